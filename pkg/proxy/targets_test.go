package proxy

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/client-go/rest"
)

// countingServer counts the requests that reach it; a refused target must see none.
func countingServer(t *testing.T, tlsServer bool, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, body)
	})
	var s *httptest.Server
	if tlsServer {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s, &hits
}

func get(t *testing.T, target *Target, path string) (*http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	u := *target.Base
	u.Path = path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := target.RoundTrippers(nil)
	return rt.RoundTrip(req)
}

// A kubeconfig without certificate-authority-data (a target with a publicly trusted
// certificate) still verifies the target on every path, upgrades (exec, attach,
// port-forward) included: the mount's token must not go to whoever answers.
func TestUpgradesVerifyTargetsWithoutCAData(t *testing.T) {
	untrusted, hits := countingServer(t, true, "")
	tr := NewTransports(TransportOptions{}, nil)
	target, err := tr.Get("uid", "m", TargetKey{SecretName: "no-ca"}, func() (*rest.Config, error) {
		return &rest.Config{Host: untrusted.URL, BearerToken: "mount-token"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := get(t, target, "/version"); err == nil {
		resp.Body.Close()
		t.Errorf("plain request to a target whose certificate no root trusts: %d, want a verification error", resp.StatusCode)
	}
	_, upgrade := target.RoundTrippers(nil)
	u, _ := url.Parse(untrusted.URL + "/api/v1/namespaces/default/pods/p/exec")
	conn, err := utilproxy.DialURL(context.Background(), u, upgrade)
	if err == nil {
		conn.Close()
		t.Errorf("upgrade dial to a target whose certificate no root trusts succeeded: TLS verification was off")
	}
	if hits.Load() != 0 {
		t.Errorf("the untrusted target saw %d requests", hits.Load())
	}
}

// spec.caBundle replaces the kubeconfig's CA also when the kubeconfig has none.
func TestCABundleAppliesWithoutCAData(t *testing.T) {
	target, hits := countingServer(t, true, "ok")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: target.Certificate().Raw})
	tr := NewTransports(TransportOptions{}, nil)
	tgt, err := tr.Get("uid", "m", TargetKey{SecretName: "no-ca", CABundle: string(caPEM)}, func() (*rest.Config, error) {
		return &rest.Config{Host: target.URL, BearerToken: "mount-token"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := get(t, tgt, "/version")
	if err != nil {
		t.Fatalf("spec.caBundle trusts the target, yet: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || hits.Load() != 1 {
		t.Errorf("status %d, %d requests at the target", resp.StatusCode, hits.Load())
	}
}
