package aggregation

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestUpgradeCannotSmuggleAwayImpersonation puts an ordinary layer-7 proxy (Go's
// httputil.ReverseProxy, which drops the headers a request names in Connection, as RFC 9110
// asks) in front of a recording target. A caller who names the impersonation headers in the
// Connection header of an upgrade request must not make that gateway drop them: the target
// must see the caller impersonated, and exactly "Connection: Upgrade".
func TestUpgradeCannotSmuggleAwayImpersonation(t *testing.T) {
	setupProxy(t)
	target, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	target.Handler = func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":403}`))
	}
	gateway := startGateway(t, target)
	data, err := framework.KubeconfigBytes(&rest.Config{Host: gateway, BearerToken: "gateway-token", TLSClientConfig: rest.TLSClientConfig{CAData: target.CA.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	suffix := rand.String(5)
	secret := "gateway-" + suffix
	setSecretData(t, secret, data)
	name := "gateway-" + suffix
	createMount(t, urlMountOf(name, secret))

	caller := "smuggler-" + suffix
	httpClient, host := directHTTP(t, proxyUser(t, caller, "smugglers"))
	// The status controller's probes reach the target too: count the exec requests only.
	execs := func() int {
		n := 0
		for _, r := range target.Requests() {
			if strings.HasSuffix(r.URL.Path, "/exec") {
				n++
			}
		}
		return n
	}
	eventually(t, "an upgrade request reaches the target", func() error {
		before := execs()
		req, err := http.NewRequest(http.MethodGet, host+proxyPath(name)+"/api/v1/namespaces/default/pods/p/exec?command=id&stdout=true", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Connection", "Upgrade, Impersonate-User, Impersonate-Group, Impersonate-Uid, Impersonate-Extra-Authentication.kubernetes.io%2fcredential-id, X-Mount-Proxy-Hops")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		req.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
		req.Header.Set("Keep-Alive", "timeout=5")
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if execs() == before {
			return fmt.Errorf("nothing reached the target: %d %s", resp.StatusCode, body)
		}
		return nil
	})
	got := target.LastCall()
	if u := got.Header.Get("Impersonate-User"); u != caller {
		t.Errorf("Impersonate-User at the target = %q, want %q: the request ran with the mount's bare credentials", u, caller)
	}
	if g := got.Header.Values("Impersonate-Group"); !contains(g, "smugglers") {
		t.Errorf("Impersonate-Group at the target = %v", g)
	}
	if got.Header.Get("Upgrade") != "websocket" || got.Header.Get("Sec-WebSocket-Protocol") != "v5.channel.k8s.io" {
		t.Errorf("the upgrade itself did not arrive: %v", got.Header)
	}
	if got.Header.Get("Keep-Alive") != "" {
		t.Errorf("the caller's Keep-Alive reached the target: %q", got.Header.Get("Keep-Alive"))
	}
}

// startGateway runs Go's reverse proxy on 127.0.0.1 in front of target, with a serving
// certificate of the target's CA, and returns its URL.
func startGateway(t *testing.T, target *framework.RecordingServer) string {
	t.Helper()
	targetURL, err := url.Parse(target.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(targetURL)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certPool(target.CA.CertPEM)}}
	cert, key, err := target.CA.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "gateway"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	gateway := httptest.NewUnstartedServer(proxy)
	gateway.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}}
	gateway.StartTLS()
	t.Cleanup(gateway.Close)
	return gateway.URL
}
