package fanout

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestParsePath: the labels form selects by label, prefixed keys included, and the rest is
// the Kubernetes path.
func TestParsePath(t *testing.T) {
	for _, c := range []struct {
		inner, selector, kube string
	}{
		{"api/v1/pods", "", "/api/v1/pods"},
		{"/apis", "", "/apis"},
		{"labels/env=prod/api/v1/pods", "env=prod", "/api/v1/pods"},
		{"/labels/env=prod,tier!=dev/apis/apps/v1/deployments", "env=prod,tier!=dev", "/apis/apps/v1/deployments"},
		{"labels/example.com/env=prod/api", "example.com/env=prod", "/api"},
		{"labels/env in (a,b)/apis", "env in (a,b)", "/apis"},
	} {
		p, err := ParsePath(c.inner)
		if err != nil {
			t.Errorf("%s: %v", c.inner, err)
			continue
		}
		if p.SelectorText != c.selector || p.Kube != c.kube {
			t.Errorf("%s: selector %q path %q, want %q %q", c.inner, p.SelectorText, p.Kube, c.selector, c.kube)
		}
		if KubePath(c.inner) != c.kube {
			t.Errorf("KubePath(%s) = %s", c.inner, KubePath(c.inner))
		}
	}
	for _, bad := range []string{"labels", "labels/env=prod", "labels//api/v1/pods", "labels/env in (/api", "labels/env=prod/version"} {
		if p, err := ParsePath(bad); err == nil {
			t.Errorf("%s: %+v", bad, p)
		}
	}
}

// TestClassify: lists, watches and discovery are served; writes, single objects and other
// paths get a clear refusal that says where to go.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		method, path, query string
		kind                kind
		code                int
		says                string
		memberPath          string
	}{
		{method: "GET", path: "/api/v1/pods", kind: kindList},
		{method: "GET", path: "/api/v1/namespaces/ns/configmaps", kind: kindList},
		{method: "GET", path: "/apis/apps/v1/deployments", query: "watch=true", kind: kindWatch, memberPath: "/apis/apps/v1/deployments"},
		{method: "GET", path: "/api/v1/watch/namespaces/ns/pods", kind: kindWatch, memberPath: "/api/v1/namespaces/ns/pods"},
		{method: "GET", path: "/apis/apps/v1/watch/deployments", kind: kindWatch, memberPath: "/apis/apps/v1/deployments"},
		{method: "GET", path: "/api", kind: kindDiscovery},
		{method: "GET", path: "/apis/", kind: kindDiscovery, memberPath: "/apis"},
		{method: "GET", path: "/apis/apps/v1", kind: kindDiscovery},
		{method: "GET", path: "/api/v1", kind: kindDiscovery},
		{method: "GET", path: "/apis/apps", kind: kindDiscovery},
		{method: "POST", path: "/api/v1/namespaces/ns/configmaps", code: 405, says: "send it to one mount, through mounts/<name>/proxy/api/v1/namespaces/ns/configmaps"},
		{method: "DELETE", path: "/api/v1/namespaces/ns/configmaps/prod:a", code: 405, says: `DELETE is no read: "prod:a" is in mount "prod", send it through mounts/prod/proxy/api/v1/namespaces/ns/configmaps/a`},
		{method: "PATCH", path: "/api/v1/namespaces/ns/pods/prod:a/status", code: 405, says: `send it through mounts/prod/proxy/api/v1/namespaces/ns/pods/a/status`},
		{method: "PATCH", path: "/api/v1/nodes/x", code: 405},
		{method: "GET", path: "/api/v1/namespaces/ns/pods/prod-eu:web-1", code: 400, says: `get it through mounts/prod-eu/proxy/api/v1/namespaces/ns/pods/web-1`},
		{method: "GET", path: "/api/v1/namespaces/ns/pods/web-1", code: 400, says: "which mount?"},
		{method: "GET", path: "/api/v1/namespaces/ns/pods/prod-eu:web-1/log", code: 400, says: "through mounts/prod-eu/proxy/api/v1/namespaces/ns/pods/web-1/log"},
		{method: "GET", path: "/version", code: 404},
		{method: "GET", path: "/openapi/v3", code: 404},
		{method: "GET", path: "/healthz", code: 404},
	} {
		q, _ := url.ParseQuery(c.query)
		r := classify(c.method, c.path, q)
		if r.kind != c.kind || r.code != c.code && c.code != 0 || c.code == 0 && r.kind == kindRefused {
			t.Errorf("%s %s: kind %d code %d (%s), want kind %d code %d", c.method, c.path, r.kind, r.code, r.refusal, c.kind, c.code)
			continue
		}
		if c.says != "" && !strings.Contains(r.refusal, c.says) {
			t.Errorf("%s %s: %q does not say %q", c.method, c.path, r.refusal, c.says)
		}
		if c.memberPath != "" && r.path != c.memberPath {
			t.Errorf("%s %s: members are asked %s, want %s", c.method, c.path, r.path, c.memberPath)
		}
		if r.kind == kindWatch && r.query.Get("watch") != "true" {
			t.Errorf("%s %s: members are asked without watch=true", c.method, c.path)
		}
	}
	if r := classify(http.MethodGet, "/api/v1/pods", nil); r.kind != kindList {
		t.Errorf("nil query: %+v", r)
	}
}

// TestSplitSelectors: requirements on the mount label select members and are not sent to
// them; metadata.name=<mount>:<name> selects the member and asks it for <name>.
func TestSplitSelectors(t *testing.T) {
	q := url.Values{"labelSelector": {"mounts.kcp.io/mount in (a,b),app=web"}, "fieldSelector": {"metadata.name=b:x,status.phase!=Running"}}
	s, err := splitSelectors(q)
	if err != nil {
		t.Fatal(err)
	}
	if s.labelSelector != "app=web" {
		t.Errorf("members are asked labels %q", s.labelSelector)
	}
	if s.selects("a") || !s.selects("b") || s.selects("c") {
		t.Errorf("selects a %v b %v c %v", s.selects("a"), s.selects("b"), s.selects("c"))
	}
	if got := s.fieldSelectorFor("b"); got != "status.phase!=Running,metadata.name=x" {
		t.Errorf("member b is asked fields %q", got)
	}
	s, _ = splitSelectors(url.Values{"fieldSelector": {"metadata.name=a:x,metadata.name=b:y"}})
	if s.selects("a") || s.selects("b") {
		t.Error("two names select something")
	}
	s, _ = splitSelectors(url.Values{"labelSelector": {"!mounts.kcp.io/mount"}})
	if s.selects("a") {
		t.Error("!mounts.kcp.io/mount selects a mount")
	}
	s, _ = splitSelectors(url.Values{"fieldSelector": {"metadata.name=plain"}})
	if !s.selects("a") || s.fieldSelectorFor("a") != "metadata.name=plain" {
		t.Errorf("a name without a mount: %+v", s)
	}
	// metadata.name!=<mount>:<name> leaves out that mount's object only: the others are not
	// asked to leave out their objects of the same name.
	s, _ = splitSelectors(url.Values{"fieldSelector": {"metadata.name!=b:x,metadata.namespace=ns"}})
	if !s.selects("a") || !s.selects("b") || s.fieldSelectorFor("a") != "metadata.namespace=ns" || s.fieldSelectorFor("b") != "metadata.namespace=ns,metadata.name!=x" {
		t.Errorf("metadata.name!=b:x: a is asked %q, b %q", s.fieldSelectorFor("a"), s.fieldSelectorFor("b"))
	}
	for _, bad := range []url.Values{{"labelSelector": {"a in ("}}, {"fieldSelector": {"a"}}} {
		if _, err := splitSelectors(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestNegotiateJSON(t *testing.T) {
	for _, c := range []struct {
		accept []string
		want   string
		ok     bool
	}{
		{nil, "application/json", true},
		{[]string{"application/vnd.kubernetes.protobuf, application/json"}, "application/json", true},
		{[]string{"application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}, "application/json;as=Table;v=v1;g=meta.k8s.io,application/json", true},
		{[]string{"*/*"}, "application/json", true},
		{[]string{"application/vnd.kubernetes.protobuf"}, "", false},
		{[]string{"application/cbor"}, "", false},
	} {
		got, ok := negotiateJSON(c.accept)
		if got != c.want || ok != c.ok {
			t.Errorf("%v: %q %v", c.accept, got, ok)
		}
	}
}
