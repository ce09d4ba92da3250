package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestKcpForgedIdentity attacks kcp mode with a tenant's means: claiming kcp's authorization
// by a certificate's organization or by X-Remote-Group, and naming an administrator in
// X-Remote-* with a certificate the server does not trust for that. None of it gets past
// authentication as claimed: the server answers what it answers any stranger.
func TestKcpForgedIdentity(t *testing.T) {
	k := framework.StartKcp(t, framework.KcpV0323)
	s := framework.StartInProcess(t, "", func(o *options.Options) {
		if err := k.Configure(o); err != nil {
			t.Fatal(err)
		}
		apiOnly(o)
	})
	ctx := context.Background()
	serverPKI, err := pki.Load(filepath.Join(s.RootDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.CAData)
	getAt := func(path string, cert tls.Certificate, header http.Header) (int, string) {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
		for key, v := range header {
			req.Header[key] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	get := func(cert tls.Certificate, header http.Header) (int, string) {
		t.Helper()
		return getAt("/clusters/abc/apis/mounts.kcp.io/v1alpha1/mounts", cert, header)
	}
	issue := func(ca *pki.CA, cn string, orgs ...string) tls.Certificate {
		cert, key, err := ca.Issue(&x509.Certificate{Subject: pkix.Name{CommonName: cn, Organization: orgs}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key}
	}
	fromServerCA := func(cn string, orgs ...string) tls.Certificate {
		data, err := serverPKI.UserKubeconfig(s.URL, cn, orgs, true)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmdConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			t.Fatal(err)
		}
		return pair
	}
	admin := http.Header{"X-Remote-User": {"mount-admin"}, "X-Remote-Group": {authorization.AdminsGroup}}

	// Nor in the default cluster, which requests through kcp never address.
	for _, path := range []string{"/apis/mounts.kcp.io/v1alpha1/mounts", framework.KcpMountsMapping + "/apis/mounts.kcp.io/v1alpha1/mounts"} {
		if code, body := getAt(path, issue(k.FrontProxyCA, framework.KcpFrontProxyClientName), admin); code != http.StatusForbidden {
			t.Errorf("the front-proxy naming an administrator at %s: %d %s", path, code, body)
		}
	}
	// The shard's own certificate is served: the request is kcp's.
	if code, body := get(issue(k.ShardCA, framework.KcpShardClientName), nil); code != http.StatusOK {
		t.Fatalf("the shard's request: %d %s", code, body)
	}
	for name, c := range map[string]struct {
		cert   tls.Certificate
		header http.Header
	}{
		"a client certificate of the server's CA claiming kcp's group":          {fromServerCA("mallory", kcp.AuthorizedByKcpGroup), nil},
		"a client certificate of the server's CA naming an admin in X-Remote-*": {fromServerCA("mallory"), admin},
		"the shard CA with a name it does not allow":                            {issue(k.ShardCA, "mallory"), nil},
		"the front-proxy CA with a name it does not allow, naming an admin":     {issue(k.FrontProxyCA, "mallory"), admin},
		"the front-proxy's certificate claiming kcp's group":                    {issue(k.FrontProxyCA, framework.KcpFrontProxyClientName), http.Header{"X-Remote-User": {"mallory"}, "X-Remote-Group": {kcp.AuthorizedByKcpGroup}}},
		// kcp's groups are kcp's: one named like this server's administrators is not them.
		"the front-proxy naming a kcp group called like the administrators": {issue(k.FrontProxyCA, framework.KcpFrontProxyClientName), admin},
	} {
		code, body := get(c.cert, c.header)
		if code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("%s: %d %s", name, code, body)
		}
		if strings.Contains(body, `"kind":"MountList"`) || strings.Contains(body, "mount-admin") && code == http.StatusOK {
			t.Errorf("%s: served %s", name, body)
		}
	}
}
