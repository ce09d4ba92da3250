package rewrite

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/tidwall/gjson"
)

// groupNames returns the names of an APIGroupList's or APIGroupDiscoveryList's groups.
func groupNames(t *testing.T, data []byte, path string) []string {
	var names []string
	gjson.GetBytes(data, path).ForEach(func(_, n gjson.Result) bool {
		names = append(names, n.String())
		return true
	})
	return names
}

func count(names []string, n string) int {
	c := 0
	for _, x := range names {
		if x == n {
			c++
		}
	}
	return c
}

func TestDiscovery(t *testing.T) {
	r := kubevirtRules(t)

	// The target serves both x.virtualization.deckhouse.io and the upstream kubevirt.io: the
	// mount shows kubevirt.io once, the renamed one (deckhouse's "matches multiple kinds").
	out := respond(t, r, "/apis", nil, sample(t, "apis.json"))
	noTargetNames(t, out)
	names := groupNames(t, out, "groups.#.name")
	if count(names, pGroup) != 1 || count(names, "apps") != 1 {
		t.Fatalf("groups %v", names)
	}
	g := gjson.GetBytes(out, `groups.#(name=="kubevirt.io")`)
	if g.Get("preferredVersion.groupVersion").String() != "kubevirt.io/v1" || g.Get("versions.0.groupVersion").String() != "kubevirt.io/v1" {
		t.Fatalf("group %s", g.Raw)
	}
	if len(names) != len(groupNames(t, sample(t, "apis.json"), "groups.#.name"))-1 {
		t.Fatalf("groups %v", names)
	}

	out = respond(t, r, "/apis", nil, sample(t, "apis-aggregated.json"))
	noTargetNames(t, out)
	names = groupNames(t, out, "items.#.metadata.name")
	if count(names, pGroup) != 1 {
		t.Fatalf("groups %v", names)
	}
	res := gjson.GetBytes(out, `items.#(metadata.name=="kubevirt.io").versions.0.resources.0`)
	for p, want := range map[string]string{
		"resource": "virtualmachines", "singularResource": "virtualmachine", "shortNames.0": "vm", "categories.0": "all",
		"responseKind.group": "kubevirt.io", "responseKind.kind": "VirtualMachine",
		"subresources.0.responseKind.kind": "VirtualMachine", "subresources.0.responseKind.group": "kubevirt.io",
		"subresources.1.responseKind.kind": "Scale", "subresources.1.responseKind.group": "autoscaling",
	} {
		if got := res.Get(p).String(); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}

	out = respond(t, r, "/apis/kubevirt.io", nil, sample(t, "apigroup.json"))
	noTargetNames(t, out)
	if get(t, out, "name") != pGroup || get(t, out, "preferredVersion.groupVersion") != "kubevirt.io/v1" {
		t.Fatalf("%s", out)
	}

	out = respond(t, r, "/apis/kubevirt.io/v1", nil, sample(t, "apiresourcelist.json"))
	noTargetNames(t, out)
	for p, want := range map[string]string{
		"groupVersion": "kubevirt.io/v1", "resources.0.name": "virtualmachines", "resources.0.singularName": "virtualmachine",
		"resources.0.kind": "VirtualMachine", "resources.0.shortNames.0": "vm", "resources.0.categories.0": "all",
		"resources.1.name": "virtualmachines/status", "resources.1.kind": "VirtualMachine",
		"resources.2.name": "virtualmachines/scale", "resources.2.kind": "Scale", "resources.2.group": "autoscaling",
	} {
		if got := get(t, out, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
}

// Two presented groups stored in one target group, told apart by their kind prefixes.
func TestDiscoverySharedTarget(t *testing.T) {
	r, err := Compile(&mounts.MountRewrites{Groups: []mounts.GroupRewrite{
		{Presented: "a.io", Target: "t.io", KindPrefix: "A"},
		{Presented: "b.io", Target: "t.io", KindPrefix: "B"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	list := []byte(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"t.io/v1","resources":[` +
		`{"name":"afoos","singularName":"afoo","namespaced":true,"kind":"AFoo","verbs":["get"]},` +
		`{"name":"bbars","singularName":"bbar","namespaced":true,"kind":"BBar","verbs":["get"]}]}`)
	out := respond(t, r, "/apis/a.io/v1", nil, list)
	if get(t, out, "resources.#") != "1" || get(t, out, "resources.0.name") != "foos" || get(t, out, "resources.0.kind") != "Foo" || get(t, out, "groupVersion") != "a.io/v1" {
		t.Fatalf("a.io: %s", out)
	}
	out = respond(t, r, "/apis/b.io/v1", nil, list)
	if get(t, out, "resources.#") != "1" || get(t, out, "resources.0.name") != "bars" || get(t, out, "resources.0.kind") != "Bar" {
		t.Fatalf("b.io: %s", out)
	}
	groups := []byte(`{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"t.io","versions":[{"groupVersion":"t.io/v1","version":"v1"}],"preferredVersion":{"groupVersion":"t.io/v1","version":"v1"}},{"name":"a.io","versions":[]}]}`)
	out = respond(t, r, "/apis", nil, groups)
	if got := strings.Join(groupNames(t, out, "groups.#.name"), ","); got != "a.io,b.io" {
		t.Fatalf("groups %s: %s", got, out)
	}
	agg := []byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[{"metadata":{"name":"t.io"},"versions":[{"version":"v1","resources":[` +
		`{"resource":"afoos","responseKind":{"group":"t.io","version":"v1","kind":"AFoo"},"scope":"Namespaced","singularResource":"afoo","verbs":["get"]},` +
		`{"resource":"bbars","responseKind":{"group":"t.io","version":"v1","kind":"BBar"},"scope":"Namespaced","singularResource":"bbar","verbs":["get"]}],"freshness":"Current"}]}]}`)
	out = respond(t, r, "/apis", nil, agg)
	if got := strings.Join(groupNames(t, out, "items.#.metadata.name"), ","); got != "a.io,b.io" {
		t.Fatalf("groups %s", got)
	}
	for p, want := range map[string]string{
		"items.0.versions.0.resources.#": "1", "items.0.versions.0.resources.0.resource": "foos", "items.0.versions.0.resources.0.responseKind.kind": "Foo",
		"items.0.versions.0.resources.0.responseKind.group": "a.io", "items.1.versions.0.resources.#": "1", "items.1.versions.0.resources.0.singularResource": "bar",
	} {
		if got := get(t, out, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}

	// Objects pick their rule by their kind's prefix.
	q, _ := r.Request("GET", "/apis/b.io/v1/bars/x", nil)
	out = respond(t, r, "/apis/b.io/v1/bars/x", nil, []byte(`{"apiVersion":"t.io/v1","kind":"BBar","metadata":{"name":"x","ownerReferences":[{"apiVersion":"t.io/v1","kind":"AFoo","name":"y","uid":"1"}]}}`))
	if q.Path != "/apis/t.io/v1/bbars/x" || get(t, out, "apiVersion") != "b.io/v1" || get(t, out, "kind") != "Bar" ||
		get(t, out, "metadata.ownerReferences.0.apiVersion") != "a.io/v1" || get(t, out, "metadata.ownerReferences.0.kind") != "Foo" {
		t.Fatalf("%s %s", q.Path, out)
	}
}

func TestOpenAPI(t *testing.T) {
	r := kubevirtRules(t)

	out := respond(t, r, "/openapi/v3", nil, sample(t, "openapi-v3-index.json"))
	noTargetNames(t, out)
	if u := get(t, out, `paths.apis/kubevirt\.io/v1.serverRelativeURL`); !strings.HasPrefix(u, "/openapi/v3/apis/kubevirt.io/v1?hash=") {
		t.Fatalf("index entry %q", u)
	}
	if want := gjson.GetBytes(sample(t, "openapi-v3-index.json"), `paths.apis/x\.virtualization\.deckhouse\.io/v1.serverRelativeURL`).String(); !strings.HasSuffix(want, strings.TrimPrefix(get(t, out, `paths.apis/kubevirt\.io/v1.serverRelativeURL`), "/openapi/v3/apis/kubevirt.io/v1")) {
		t.Fatalf("hash of the target's document lost")
	}

	// kube-apiserver serves the index as text/plain.
	q, _ := r.Request("GET", "/openapi/v3", nil)
	plain, err := io.ReadAll(q.Response("text/plain; charset=utf-8", bytes.NewReader(sample(t, "openapi-v3-index.json"))))
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, plain, out)

	out = respond(t, r, "/openapi/v3/apis/kubevirt.io/v1", nil, sample(t, "openapi-v3-group.json"))
	noTargetNames(t, out)
	if !gjson.ValidBytes(out) {
		t.Fatal("not JSON")
	}
	vm := gjson.GetBytes(out, `components.schemas.io\.kubevirt\.v1\.VirtualMachine`)
	if gvk := vm.Get("x-kubernetes-group-version-kind.0"); gvk.Get("group").String() != pGroup || gvk.Get("kind").String() != "VirtualMachine" {
		t.Fatalf("GVK %s", gvk.Raw)
	}
	if !gjson.GetBytes(out, `components.schemas.io\.kubevirt\.v1\.VirtualMachineList`).Exists() {
		t.Fatal("list schema missing")
	}
	p := gjson.GetBytes(out, `paths./apis/kubevirt\.io/v1/namespaces/{namespace}/virtualmachines/{name}`)
	if !p.Exists() {
		t.Fatal("path missing")
	}
	if ref := p.Get("get.responses.200.content.application/json.schema.$ref").String(); ref != "#/components/schemas/io.kubevirt.v1.VirtualMachine" {
		t.Fatalf("ref %q", ref)
	}

	in := sample(t, "openapi-v2.json")
	out = respond(t, r, "/openapi/v2", nil, in)
	noTargetNames(t, out)
	defs := gjson.GetBytes(out, "definitions")
	if n := len(defs.Map()); n != len(gjson.GetBytes(in, "definitions").Map())-2 {
		t.Fatalf("%d definitions", n)
	}
	if g := defs.Get(`io\.kubevirt\.v1\.VirtualMachine.x-kubernetes-group-version-kind.0.group`).String(); g != pGroup {
		t.Fatalf("group %q", g)
	}
	// The upstream kubevirt.io of the target is gone: its schema had no spec.
	if !defs.Get(`io\.kubevirt\.v1\.VirtualMachine.properties.spec.properties.running`).Exists() {
		t.Fatal("the renamed definition is not the one presented")
	}
	if !defs.Get(`io\.k8s\.api\.core\.v1\.ConfigMap`).Exists() || !gjson.GetBytes(out, `paths./api/v1/namespaces/{namespace}/configmaps/{name}`).Exists() {
		t.Fatal("other definitions and paths must stay")
	}
}
