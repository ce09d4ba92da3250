package proxy

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

func TestNegotiateJSON(t *testing.T) {
	for _, c := range []struct {
		accept []string
		want   string
		ok     bool
	}{
		{nil, "application/json", true},
		{[]string{"application/json"}, "application/json", true},
		{[]string{"application/vnd.kubernetes.protobuf,application/json"}, "application/json", true},
		{[]string{"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"},
			"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", true},
		{[]string{"application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"},
			"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", true},
		{[]string{"*/*"}, "application/json", true},
		{[]string{"application/yaml, application/*"}, "application/json", true},
		{[]string{"application/vnd.kubernetes.protobuf"}, "", false},
		{[]string{"application/cbor"}, "", false},
		{[]string{"application/json;;;="}, "", false},
	} {
		got, ok := negotiateJSON(c.accept)
		if got != c.want || ok != c.ok {
			t.Errorf("negotiateJSON(%q) = %q, %v; want %q, %v", c.accept, got, ok, c.want, c.ok)
		}
	}
}

func TestProtobufToJSON(t *testing.T) {
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"kubevirt.io/os": "alpine"}}, Data: map[string]string{"k": "v"}}
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme).Encode(cm, &buf); err != nil {
		t.Fatal(err)
	}
	data, ct, err := protobufToJSON("application/vnd.kubernetes.protobuf", buf.Bytes())
	if err != nil || ct != "application/json" || !strings.Contains(string(data), `"kind":"ConfigMap","apiVersion":"v1"`) || !strings.Contains(string(data), `"kubevirt.io/os":"alpine"`) {
		t.Errorf("protobuf ConfigMap: %s %q %v", data, ct, err)
	}
	if data, ct, err := protobufToJSON("application/json", []byte(`{}`)); err != nil || ct != "application/json" || string(data) != `{}` {
		t.Errorf("JSON passes as it is: %s %q %v", data, ct, err)
	}
	for _, bad := range [][]byte{[]byte("k8s\x00\x0a\x02"), []byte("not protobuf"), append([]byte("k8s\x00"), bytes.Repeat([]byte{0xff}, 64)...)} {
		if _, _, err := protobufToJSON("application/vnd.kubernetes.protobuf", bad); err == nil {
			t.Errorf("protobuf body %q decoded", bad)
		}
	}
}

func TestReadBounded(t *testing.T) {
	if data, status := readBounded(bytes.NewReader(make([]byte, MaxRewrittenBodyBytes))); status != nil || len(data) != MaxRewrittenBodyBytes {
		t.Errorf("a body of the limit: %d bytes, %v", len(data), status)
	}
	if _, status := readBounded(bytes.NewReader(make([]byte, MaxRewrittenBodyBytes+1))); status == nil || status.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: %v", status)
	}
}

// TestCompiledRules: a mount whose rewrites rename nothing gets no rules (the proxy then
// never calls pkg/rewrite); rules are compiled once per generation and forgotten with the
// mount.
func TestCompiledRules(t *testing.T) {
	var p Proxier
	m := &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "u1", Generation: 1}, Spec: mounts.MountSpec{Rewrites: &mounts.MountRewrites{}}}
	if rules, err := p.rewriteRules(m); rules != nil || err != nil {
		t.Errorf("empty rewrites: %v, %v", rules, err)
	}
	m.Spec.Rewrites = &mounts.MountRewrites{Groups: []mounts.GroupRewrite{{Presented: "a.io", Target: "b.io"}}}
	m.Generation = 2
	first, err := p.rewriteRules(m)
	if first == nil || err != nil {
		t.Fatalf("rules: %v, %v", first, err)
	}
	if again, _ := p.rewriteRules(m); again != first {
		t.Error("the same generation was compiled again")
	}
	m.Generation = 3
	m.Spec.Rewrites.Groups[0].Target = "c.io"
	third, _ := p.rewriteRules(m)
	if third == first {
		t.Error("a new generation kept the old rules")
	}
	if rq, err := third.Request(http.MethodGet, "/apis/a.io/v1/things", nil); err != nil || rq.Path != "/apis/c.io/v1/things" {
		t.Errorf("new generation's rules: %q, %v", rq.Path, err)
	}
	p.Forget("", "m", "u1")
	if len(p.compiled.rules) != 0 {
		t.Errorf("rules kept after Forget: %v", p.compiled.rules)
	}
}

// proxiedGET serves one GET of path through p's handler for m as user alice.
func proxiedGET(tb testing.TB, p *Proxier, m *mounts.Mount, path string) (*requestHandler, int) {
	tb.Helper()
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
	h, err := p.Handler(ctx, m, path)
	if err != nil {
		tb.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/apis/mounts.kcp.io/v1alpha1/mounts/"+m.Name+"/proxy"+path, nil))
	return h.(*requestHandler), rec.Code
}

func rewriteTestProxier(tb testing.TB) *Proxier {
	return rewriteTestProxierOf(tb, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default","labels":{"kubevirt.io/os":"a"}}}`))
	})
}

// rewriteTestProxierOf returns a proxier whose mounts' Secret ns/creds names a TLS target
// served by handler.
func rewriteTestProxierOf(tb testing.TB, handler http.HandlerFunc) *Proxier {
	srv := httptest.NewTLSServer(handler)
	tb.Cleanup(srv.Close)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "token"}
	kc.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "ctx"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		tb.Fatal(err)
	}
	secrets := secretMap{"ns/creds": &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds", ResourceVersion: "1"}, Data: map[string][]byte{"kubeconfig": data}}}
	return &Proxier{Secrets: secrets, Transports: NewTransports(TransportOptions{}, nil)}
}

// TestMountsWithoutRewritesPayNothing: the proxy compiles and calls nothing of pkg/rewrite for
// a mount without spec.rewrites or with rewrites that rename nothing; a renaming mount's
// answer is rewritten.
func TestMountsWithoutRewritesPayNothing(t *testing.T) {
	p := rewriteTestProxier(t)
	plain := testMount("plain", "creds")
	empty := testMount("empty", "creds")
	empty.Spec.Rewrites = &mounts.MountRewrites{}
	for _, m := range []*mounts.Mount{plain, empty} {
		h, code := proxiedGET(t, p, m, "/api/v1/namespaces/default")
		if code != http.StatusOK || h.rules != nil || h.rewriting != nil {
			t.Errorf("mount %s: %d, rules %v, rewriting %v", m.Name, code, h.rules, h.rewriting)
		}
	}
	if len(p.compiled.rules) != 1 || p.compiled.rules[empty.UID].rules != nil {
		t.Errorf("compiled rules: %v; want only the empty mount's nil rules", p.compiled.rules)
	}

	renaming := testMount("renaming", "creds")
	renaming.Spec.Rewrites = &mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{{Presented: "presented.io/", Target: "kubevirt.io/"}}}
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
	h, err := p.Handler(ctx, renaming, "/api/v1/namespaces/default")
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/x", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"presented.io/os":"a"`) {
		t.Errorf("renaming mount: %d %s", rec.Code, rec.Body)
	}
}

// BenchmarkProxiedGET reports what a proxied GET costs for a mount without rewrites and for a
// renaming mount (go test -bench ProxiedGET -benchmem ./pkg/proxy).
func BenchmarkProxiedGET(b *testing.B) {
	for _, c := range []struct {
		name     string
		rewrites *mounts.MountRewrites
	}{
		{"none", nil},
		{"renaming", &mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{{Presented: "presented.io/", Target: "kubevirt.io/"}}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := rewriteTestProxier(b)
			m := testMount("bench", "creds")
			m.Spec.Rewrites = c.rewrites
			b.ReportAllocs()
			for b.Loop() {
				if _, code := proxiedGET(b, p, m, "/api/v1/namespaces/default"); code != http.StatusOK {
					b.Fatal(code)
				}
			}
		})
	}
}

func TestOpaqueSubresource(t *testing.T) {
	for p, want := range map[string]bool{
		"/api/v1/namespaces/a/services/b/proxy/x/y":       true,
		"/api/v1/namespaces/a/services/https:b:443/proxy": true,
		"/api/v1/namespaces/a/pods/b/log":                 true,
		"/api/v1/namespaces/a/pods/b/exec":                true,
		"/api/v1/nodes/n/proxy/metrics":                   true,
		"/api/v1/namespaces/a/pods/b":                     false,
		"/api/v1/namespaces/a/pods/b/status":              false,
		"/api/v1/namespaces/proxy":                        false,
		"/api/v1/namespaces/a/pods/proxy":                 false,
		"/apis/apps/v1/namespaces/a/deployments/proxy":    false,
	} {
		if got := opaqueSubresource(p); got != want {
			t.Errorf("opaqueSubresource(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestRenamingClassifiesThePathSent: a renaming mount judges the path it sends, with empty
// segments dropped. A webhook configuration written at .../admissionregistration.k8s.io//v1/...
// is one (without an admission relay, 422), and /api//v1/... is renamed like /api/v1/....
func TestRenamingClassifiesThePathSent(t *testing.T) {
	p := rewriteTestProxier(t)
	m := testMount("renaming", "creds")
	m.Spec.Rewrites = &mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{{Presented: "presented.io/", Target: "kubevirt.io/"}}}
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
	for _, inner := range []string{"/apis/admissionregistration.k8s.io//v1/validatingwebhookconfigurations", "//apis/admissionregistration.k8s.io/v1//mutatingwebhookconfigurations"} {
		h, err := p.Handler(ctx, m, inner)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		body := `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"c"},"webhooks":[]}`
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/x", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), "no admission relay") {
			t.Errorf("POST %s: %d %s, want 422: no admission relay", inner, rec.Code, rec.Body)
		}
	}
	h, err := p.Handler(ctx, m, "/api//v1/namespaces//default")
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/x", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"presented.io/os":"a"`) {
		t.Errorf("GET /api//v1/...: %d %s, want it renamed", rec.Code, rec.Body)
	}
}
