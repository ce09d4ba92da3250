package integration

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestKcpAPIExportBehindAnotherCA: the export's virtual workspace is often reached through a
// front-proxy whose serving CA is not the one of --kcp-kubeconfig's server. Here a TLS proxy
// with a CA of its own stands in front of the kcp harness's virtual workspace (kcp cannot be
// built here; the harness serves the export's APIBindings as kcp v0.32.3 does).
// --kcp-apiexport-ca-file verifies it: the collector lists the bindings through it (with
// --kcp-kubeconfig's CA, as before the flag, every listing failed on the certificate).
func TestKcpAPIExportBehindAnotherCA(t *testing.T) {
	k := framework.StartKcp(t, framework.KcpV0323)
	kcpRoot(t, k, startKubes(t, 1)[0])
	k.AddWorkspace("root:ws-a", kcpClusterA, nil, true)

	ca, err := pki.NewCA("front-proxy-serving-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(&x509.Certificate{Subject: pkix.Name{CommonName: "front-proxy"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "front-proxy-ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	var answered atomic.Int64 // bindings listed through the front, answered 200 by kcp
	startKcpServer(t, k, func(o *options.Options) {
		apiOnly(o)
		o.Kcp.UnboundGCInterval = 100 * time.Millisecond
		kcpConfig, err := clientcmd.BuildConfigFromFlags("", o.Kcp.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		// The front passes the provider's own credentials on; it trusts the harness's CA.
		rt, err := rest.TransportFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: kcpConfig.CAData}})
		if err != nil {
			t.Fatal(err)
		}
		export, err := url.Parse(o.Kcp.APIExportURL)
		if err != nil {
			t.Fatal(err)
		}
		proxy := &httputil.ReverseProxy{
			Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(&url.URL{Scheme: export.Scheme, Host: export.Host}) },
			Transport: rt,
			ModifyResponse: func(resp *http.Response) error {
				if resp.StatusCode == http.StatusOK && resp.Request.URL.Query().Get("watch") == "" {
					answered.Add(1)
				}
				return nil
			},
			FlushInterval: -1,
		}
		front := httptest.NewUnstartedServer(proxy)
		front.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}}
		front.StartTLS()
		t.Cleanup(front.Close)
		o.Kcp.APIExportURL = front.URL + export.Path
		o.Kcp.APIExportCAFile = caFile
	})

	for deadline := time.Now().Add(30 * time.Second); answered.Load() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			begun, failed := k.BindingListings()
			t.Fatalf("no listing through the front-proxy with its own CA within 30 s (kcp saw %d listings, %d failed)", begun, failed)
		}
	}
	t.Logf("%d answers through the front-proxy with its own CA", answered.Load())
}
