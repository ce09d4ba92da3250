package rewrite

import (
	"net/url"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

const (
	tGroup = "x.virtualization.deckhouse.io"
	pGroup = "kubevirt.io"
)

// kubevirtRules are the rules of the samples in testdata, taken from a real kube-apiserver
// 1.37 that stores kubevirt.io VirtualMachine as x.virtualization.deckhouse.io
// PrefixedVirtualMachine (and also serves the upstream kubevirt.io, which the mount hides).
func kubevirtRules(t testing.TB) *Rules {
	t.Helper()
	r, err := Compile(&mounts.MountRewrites{
		Groups:              []mounts.GroupRewrite{{Presented: pGroup, Target: tGroup, KindPrefix: "Prefixed"}},
		MetadataKeyPrefixes: []mounts.PrefixRewrite{{Presented: "kubevirt.io/", Target: "x.virtualization.deckhouse.io/"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCompile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      *mounts.MountRewrites
		wantNil bool
		wantErr bool
	}{
		{name: "nil", in: nil, wantNil: true},
		{name: "empty", in: &mounts.MountRewrites{}, wantNil: true},
		{name: "group", in: &mounts.MountRewrites{Groups: []mounts.GroupRewrite{{Presented: "a.io", Target: "b.io"}}}},
		{name: "empty presented", in: &mounts.MountRewrites{Groups: []mounts.GroupRewrite{{Target: "b.io"}}}, wantErr: true},
		{name: "slash in group", in: &mounts.MountRewrites{Groups: []mounts.GroupRewrite{{Presented: "a.io/v1", Target: "b.io"}}}, wantErr: true},
		{name: "presented twice", in: &mounts.MountRewrites{Groups: []mounts.GroupRewrite{{Presented: "a.io", Target: "b.io"}, {Presented: "a.io", Target: "c.io"}}}, wantErr: true},
		{name: "one target twice without prefixes", in: &mounts.MountRewrites{Groups: []mounts.GroupRewrite{{Presented: "a.io", Target: "b.io"}, {Presented: "c.io", Target: "b.io"}}}, wantErr: true},
		{name: "one target with distinct prefixes", in: &mounts.MountRewrites{Groups: []mounts.GroupRewrite{{Presented: "a.io", Target: "b.io", KindPrefix: "A"}, {Presented: "c.io", Target: "b.io", KindPrefix: "C"}}}},
		{name: "empty prefix", in: &mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{{Presented: "a/"}}}, wantErr: true},
		{name: "quote in prefix", in: &mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{{Presented: "a\"/", Target: "b/"}}}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Compile(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && (r == nil) != tc.wantNil {
				t.Fatalf("rules = %v, want nil %v", r, tc.wantNil)
			}
		})
	}
}

func TestNilRules(t *testing.T) {
	var r *Rules
	q, err := r.Request("GET", "/apis/kubevirt.io/v1/virtualmachines", url.Values{"watch": {"true"}})
	if err != nil || q.Class != Untouched || q.Path != "/apis/kubevirt.io/v1/virtualmachines" || !q.Watch {
		t.Fatalf("got %+v, %v", q, err)
	}
	body := []byte(`{"apiVersion":"kubevirt.io/v1"}`)
	if out, err := q.Body("application/vnd.kubernetes.protobuf", body); err != nil || string(out) != string(body) {
		t.Fatalf("Body = %q, %v", out, err)
	}
}

func TestRequestPaths(t *testing.T) {
	r := kubevirtRules(t)
	for _, tc := range []struct {
		path      string
		query     url.Values
		wantClass Class
		wantPath  string
		wantQuery url.Values
		wantWatch bool
	}{
		{path: "/version", wantClass: Untouched, wantPath: "/version"},
		{path: "/api", wantClass: Untouched, wantPath: "/api"},
		{path: "/api/v1", wantClass: Untouched, wantPath: "/api/v1"},
		{path: "/apis", wantClass: Discovery, wantPath: "/apis"},
		{path: "/apis/kubevirt.io", wantClass: Discovery, wantPath: "/apis/" + tGroup},
		{path: "/apis/kubevirt.io/v1", wantClass: Discovery, wantPath: "/apis/" + tGroup + "/v1"},
		{path: "/apis/kubevirt.io/v1/virtualmachines", wantClass: Resource, wantPath: "/apis/" + tGroup + "/v1/prefixedvirtualmachines"},
		{path: "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm1", wantClass: Resource, wantPath: "/apis/" + tGroup + "/v1/namespaces/default/prefixedvirtualmachines/vm1"},
		{path: "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm1/status", wantClass: Resource, wantPath: "/apis/" + tGroup + "/v1/namespaces/default/prefixedvirtualmachines/vm1/status"},
		{path: "/apis/kubevirt.io/v1/namespaces/virtualmachines/virtualmachines/virtualmachines", wantClass: Resource, wantPath: "/apis/" + tGroup + "/v1/namespaces/virtualmachines/prefixedvirtualmachines/virtualmachines"},
		{path: "/apis/kubevirt.io/v1/watch/namespaces/default/virtualmachines", wantClass: Resource, wantPath: "/apis/" + tGroup + "/v1/watch/namespaces/default/prefixedvirtualmachines", wantWatch: true},
		{path: "/apis/kubevirt.io/v1/watch/virtualmachines/", wantClass: Resource, wantPath: "/apis/" + tGroup + "/v1/watch/prefixedvirtualmachines/", wantWatch: true},
		{path: "/apis/kubevirt.io/v1/virtualmachines", query: url.Values{"watch": {"1"}}, wantClass: Resource, wantPath: "/apis/" + tGroup + "/v1/prefixedvirtualmachines", wantWatch: true},
		{
			path:      "/apis/kubevirt.io/v1/virtualmachines",
			query:     url.Values{"labelSelector": {"kubevirt.io/os in (linux,win),app=web,!kubevirt.io/skip"}, "watch": {"true"}},
			wantClass: Resource, wantPath: "/apis/" + tGroup + "/v1/prefixedvirtualmachines", wantWatch: true,
			wantQuery: url.Values{"labelSelector": {"app=web,x.virtualization.deckhouse.io/os in (linux,win),!x.virtualization.deckhouse.io/skip"}, "watch": {"true"}},
		},
		{path: "/api/v1/namespaces/default/pods", query: url.Values{"labelSelector": {"kubevirt.io/domain=vm1"}}, wantClass: Objects, wantPath: "/api/v1/namespaces/default/pods",
			wantQuery: url.Values{"labelSelector": {"x.virtualization.deckhouse.io/domain=vm1"}}},
		{path: "/api/v1/namespaces/default", wantClass: Objects, wantPath: "/api/v1/namespaces/default"},
		{path: "/api/v1/namespaces/default/status", wantClass: Objects, wantPath: "/api/v1/namespaces/default/status"},
		{
			path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", query: url.Values{"fieldSelector": {"metadata.name=virtualmachines.kubevirt.io"}},
			wantClass: Objects, wantPath: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
			wantQuery: url.Values{"fieldSelector": {"metadata.name=prefixedvirtualmachines.x.virtualization.deckhouse.io"}},
		},
		{
			path: "/api/v1/events", query: url.Values{"fieldSelector": {"involvedObject.kind=VirtualMachine,involvedObject.apiVersion=kubevirt.io/v1,involvedObject.name=vm1"}},
			wantClass: Objects, wantPath: "/api/v1/events",
			wantQuery: url.Values{"fieldSelector": {"involvedObject.apiVersion=x.virtualization.deckhouse.io/v1,involvedObject.kind=PrefixedVirtualMachine,involvedObject.name=vm1"}},
		},
		{
			path: "/apis/events.k8s.io/v1/events", query: url.Values{"fieldSelector": {"regarding.apiVersion=kubevirt.io/v1,regarding.kind!=VirtualMachine"}},
			wantClass: Objects, wantPath: "/apis/events.k8s.io/v1/events",
			wantQuery: url.Values{"fieldSelector": {"regarding.apiVersion=x.virtualization.deckhouse.io/v1,regarding.kind!=PrefixedVirtualMachine"}},
		},
		// The target group is presented only as kubevirt.io: its own name is not served.
		{path: "/apis/" + tGroup + "/v1/prefixedvirtualmachines", wantClass: NotFound, wantPath: "/apis/" + tGroup + "/v1/prefixedvirtualmachines"},
		{path: "/apis/" + tGroup, wantClass: NotFound, wantPath: "/apis/" + tGroup},
		{path: "/openapi/v2", wantClass: OpenAPI, wantPath: "/openapi/v2"},
		{path: "/openapi/v3", wantClass: OpenAPI, wantPath: "/openapi/v3"},
		{path: "/openapi/v3/apis/kubevirt.io/v1", query: url.Values{"hash": {"ABC"}}, wantClass: OpenAPI, wantPath: "/openapi/v3/apis/" + tGroup + "/v1", wantQuery: url.Values{"hash": {"ABC"}}},
		{path: "/openapi/v3/apis/" + tGroup + "/v1", wantClass: NotFound, wantPath: "/openapi/v3/apis/" + tGroup + "/v1"},
		{path: "/openapi/v3/api/v1", wantClass: Untouched, wantPath: "/openapi/v3/api/v1"},
		{path: "/apis/apps/v1/deployments", wantClass: Objects, wantPath: "/apis/apps/v1/deployments"},
		{path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io", wantClass: Objects, wantPath: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/prefixedvirtualmachines." + tGroup},
		{path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io/status", wantClass: Objects, wantPath: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/prefixedvirtualmachines." + tGroup + "/status"},
		{path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", wantClass: Objects, wantPath: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"},
		{path: "/apis/apps/v1", wantClass: Untouched, wantPath: "/apis/apps/v1"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			q, err := r.Request("GET", tc.path, tc.query)
			if err != nil {
				t.Fatal(err)
			}
			if q.Class != tc.wantClass || q.Path != tc.wantPath || q.Watch != tc.wantWatch {
				t.Fatalf("got class %v path %q watch %v, want %v %q %v", q.Class, q.Path, q.Watch, tc.wantClass, tc.wantPath, tc.wantWatch)
			}
			want := tc.wantQuery
			if want == nil {
				want = tc.query
			}
			if q.Query.Encode() != want.Encode() {
				t.Fatalf("query %q, want %q", q.Query.Encode(), want.Encode())
			}
		})
	}
}

func TestRequestBadSelectors(t *testing.T) {
	r := kubevirtRules(t)
	for _, q := range []url.Values{
		{"labelSelector": {"kubevirt.io/a in (("}},
		{"labelSelector": {"kubevirt.io/" + string(make([]byte, 70)) + "=x"}},
		{"fieldSelector": {"metadata.name"}},
	} {
		path := "/apis/kubevirt.io/v1/virtualmachines"
		if q.Get("fieldSelector") != "" {
			path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
		}
		if _, err := r.Request("GET", path, q); err == nil {
			t.Errorf("%v: want an error", q)
		}
	}
}
