package rewrite

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func sample(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// respond rewrites a response body of GET path as the proxy does.
func respond(t testing.TB, r *Rules, path string, query url.Values, data []byte) []byte {
	t.Helper()
	q, err := r.Request("GET", path, query)
	if err != nil {
		t.Fatal(err)
	}
	// Small reads exercise the streaming state machine.
	out, err := io.ReadAll(&smallReader{r: q.Response("application/json", bytes.NewReader(data))})
	if err != nil {
		t.Fatalf("Response(%s): %v", path, err)
	}
	return out
}

type smallReader struct{ r io.Reader }

func (s *smallReader) Read(p []byte) (int, error) {
	if len(p) > 7 {
		p = p[:7]
	}
	return s.r.Read(p)
}

// jsonEqual compares JSON documents by value.
func jsonEqual(t testing.TB, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want is not JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("JSON differs:\ngot  %s\nwant %s", got, want)
	}
}

// noTargetNames fails if the target's group or kind prefix reaches the client.
func noTargetNames(t testing.TB, out []byte, allow ...string) {
	t.Helper()
	s := string(out)
	for _, a := range allow {
		s = strings.ReplaceAll(s, a, "")
	}
	for _, n := range []string{tGroup, "Prefixed", "prefixed", "io.deckhouse"} {
		if i := strings.Index(s, n); i >= 0 {
			lo, hi := max(0, i-80), min(len(s), i+80)
			t.Fatalf("target name %q in response: ...%s...", n, s[lo:hi])
		}
	}
}

func get(t testing.TB, data []byte, path string) string {
	t.Helper()
	return gjson.GetBytes(data, path).String()
}

func TestResponseObjects(t *testing.T) {
	r := kubevirtRules(t)
	const vms = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
	for _, tc := range []struct {
		name, path, file string
		query            url.Values
		want             map[string]string // gjson path -> value
		roundTrip        bool
	}{
		{
			name: "object", path: vms + "/vm1", file: "object.json", roundTrip: true,
			want: map[string]string{
				"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
				`metadata.labels.kubevirt\.io/os`: "linux", "metadata.labels.app": "web",
				`metadata.annotations.kubevirt\.io/note`:                                             "hello",
				"metadata.finalizers.0":                                                              "kubevirt.io/protect",
				"metadata.managedFields.0.apiVersion":                                                "kubevirt.io/v1",
				`metadata.managedFields.0.fieldsV1.f:metadata.f:labels.f:kubevirt\.io/os`:            "{}",
				`metadata.managedFields.0.fieldsV1.f:metadata.f:finalizers.v:"kubevirt\.io/protect"`: "{}",
			},
		},
		{
			name: "list", path: vms, file: "list.json", roundTrip: true,
			want: map[string]string{"kind": "VirtualMachineList", "apiVersion": "kubevirt.io/v1", "items.0.kind": "VirtualMachine", "items.0.apiVersion": "kubevirt.io/v1", `items.0.metadata.labels.kubevirt\.io/patched`: "yes"},
		},
		{
			name: "table with objects", path: vms, file: "table.json", query: url.Values{"includeObject": {"Object"}},
			roundTrip: true,
			want:      map[string]string{"kind": "Table", "rows.0.object.kind": "VirtualMachine", "rows.0.object.apiVersion": "kubevirt.io/v1", `rows.0.object.metadata.labels.kubevirt\.io/os`: "linux"},
		},
		{
			name: "table with metadata", path: vms, file: "table-metadata.json", roundTrip: true,
			want: map[string]string{"rows.0.object.kind": "PartialObjectMetadata", `rows.0.object.metadata.labels.kubevirt\.io/os`: "linux", "rows.0.object.metadata.managedFields.0.apiVersion": "kubevirt.io/v1"},
		},
		{
			name: "status not found", path: vms + "/nope", file: "status-notfound.json", roundTrip: true,
			want: map[string]string{"details.group": "kubevirt.io", "details.kind": "virtualmachines", "message": `virtualmachines.kubevirt.io "nope" not found`},
		},
		{
			name: "status already exists", path: vms, file: "status-exists.json", roundTrip: true,
			want: map[string]string{"details.group": "kubevirt.io", "details.kind": "virtualmachines", "message": `virtualmachines.kubevirt.io "vm1" already exists`},
		},
		{
			name: "status invalid", path: vms, file: "status-invalid.json", roundTrip: true,
			want: map[string]string{"details.group": "kubevirt.io", "details.kind": "VirtualMachine", "message": `VirtualMachine.kubevirt.io "bad" is invalid: spec.running: Invalid value: "string": spec.running in body must be of type boolean: "string"`},
		},
		{
			// Owner references of the renamed group are renamed; the one to the target's own
			// kubevirt.io VirtualMachine is a same-named kind of another group and stays.
			name: "configmap with owners", path: "/api/v1/namespaces/default/configmaps/owned", file: "configmap-owned.json",
			want: map[string]string{
				"metadata.ownerReferences.0.apiVersion": "kubevirt.io/v1", "metadata.ownerReferences.0.kind": "VirtualMachine",
				"metadata.ownerReferences.1.apiVersion": "kubevirt.io/v1", "metadata.ownerReferences.1.kind": "VirtualMachine",
				"metadata.ownerReferences.1.name": "other", `metadata.labels.kubevirt\.io/vm`: "vm1",
			},
		},
		{
			name: "crd not found", path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io", roundTrip: true,
			file: "status-crd-notfound.json",
			want: map[string]string{"details.name": "virtualmachines.kubevirt.io", "message": `customresourcedefinitions.apiextensions.k8s.io "virtualmachines.kubevirt.io" not found`},
		},
		{
			name: "crd", path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io", file: "crd.json", roundTrip: true,
			want: map[string]string{
				"metadata.name": "virtualmachines.kubevirt.io", "spec.group": "kubevirt.io",
				"spec.names.kind": "VirtualMachine", "spec.names.listKind": "VirtualMachineList", "spec.names.plural": "virtualmachines",
				"spec.names.singular": "virtualmachine", "spec.names.shortNames.0": "vm", "spec.names.categories.0": "all",
				"status.acceptedNames.kind": "VirtualMachine", "status.acceptedNames.plural": "virtualmachines",
			},
		},
		{
			name: "clusterrole", path: "/apis/rbac.authorization.k8s.io/v1/clusterroles/vm-editor", file: "clusterrole.json", roundTrip: true,
			want: map[string]string{"rules.0.apiGroups.0": "kubevirt.io", "rules.0.resources.0": "virtualmachines", "rules.0.resources.1": "virtualmachines/status", "rules.1.resources.0": "pods"},
		},
		{
			// Items of built-in lists carry no kind: the list's says what they are.
			name: "role list", path: "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", file: "rolelist.json", roundTrip: true,
			want: map[string]string{"items.0.rules.0.apiGroups.0": "kubevirt.io", "items.0.rules.0.resources.0": "*"},
		},
		{
			name: "validating webhook", path: "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/vm-webhook", file: "validatingwebhook.json", roundTrip: true,
			want: map[string]string{"webhooks.0.rules.0.apiGroups.0": "kubevirt.io", "webhooks.0.rules.0.resources.0": "virtualmachines"},
		},
		{
			name: "mutating webhook", path: "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/vm-mutator", file: "mutatingwebhook.json", roundTrip: true,
			want: map[string]string{"webhooks.0.rules.0.apiGroups.0": "kubevirt.io", "webhooks.0.rules.0.resources.0": "virtualmachines/status"},
		},
		{
			name: "admission policy", path: "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/vm-policy", file: "vap.json", roundTrip: true,
			want: map[string]string{
				"spec.matchConstraints.resourceRules.0.apiGroups.0": "kubevirt.io", "spec.matchConstraints.resourceRules.0.resources.0": "virtualmachines",
				"spec.matchConstraints.excludeResourceRules.0.resources.0": "virtualmachines",
				"spec.paramKind.apiVersion":                                "kubevirt.io/v1", "spec.paramKind.kind": "VirtualMachine",
			},
		},
		{
			name: "admission policy binding", path: "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/vm-policy-binding", file: "vapbinding.json", roundTrip: true,
			want: map[string]string{"spec.matchResources.resourceRules.0.apiGroups.0": "kubevirt.io", "spec.matchResources.resourceRules.0.resources.0": "virtualmachines"},
		},
		{
			name: "core events", path: "/api/v1/namespaces/default/events", file: "eventlist-core.json", roundTrip: true,
			want: map[string]string{"items.0.involvedObject.apiVersion": "kubevirt.io/v1", "items.0.involvedObject.kind": "VirtualMachine"},
		},
		{
			name: "events.k8s.io event", path: "/apis/events.k8s.io/v1/namespaces/default/events/vm1.1", file: "event-eventsk8s.json", roundTrip: true,
			want: map[string]string{"regarding.apiVersion": "kubevirt.io/v1", "regarding.kind": "VirtualMachine"},
		},
		{
			name: "subject access review", path: "/apis/authorization.k8s.io/v1/subjectaccessreviews", file: "sar.json", roundTrip: true,
			want: map[string]string{"spec.resourceAttributes.group": "kubevirt.io", "spec.resourceAttributes.resource": "virtualmachines"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := sample(t, tc.file)
			out := respond(t, r, tc.path, tc.query, in)
			noTargetNames(t, out, `"vm.`+tGroup) // a webhook's name is its own
			for p, want := range tc.want {
				if got := get(t, out, p); got != want {
					t.Errorf("%s = %q, want %q", p, got, want)
				}
			}
			if !tc.roundTrip {
				return
			}
			q, err := r.Request("PUT", tc.path, tc.query)
			if err != nil {
				t.Fatal(err)
			}
			back, err := q.Body("application/json", out)
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, back, in)
		})
	}
}

// kubectl get crd: a Table of PartialObjectMetadata, the name in the cells too.
func TestResponseCRDTable(t *testing.T) {
	r := kubevirtRules(t)
	in := []byte(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"1"},"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"","priority":0},{"name":"Created At","type":"date","format":"","description":"","priority":0}],` +
		`"rows":[{"cells":["prefixedvirtualmachines.x.virtualization.deckhouse.io","2026-11-23T02:58:00Z"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"prefixedvirtualmachines.x.virtualization.deckhouse.io","uid":"1","resourceVersion":"1","creationTimestamp":"2026-11-23T02:58:00Z"}}},` +
		`{"cells":["widgets.example.com","2026-11-23T02:58:00Z"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"widgets.example.com","uid":"2"}}}]}`)
	const path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	out := respond(t, r, path, nil, in)
	noTargetNames(t, out)
	for p, want := range map[string]string{
		"rows.0.cells.0": "virtualmachines.kubevirt.io", "rows.0.object.metadata.name": "virtualmachines.kubevirt.io",
		"rows.1.cells.0": "widgets.example.com", "rows.1.object.metadata.name": "widgets.example.com",
	} {
		if got := get(t, out, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	// The target's own CRD of the presented group's name is not listed: it would be a second
	// virtualmachines.kubevirt.io.
	hidden := bytes.Replace(in, []byte(`"rows":[`), []byte(`"rows":[{"cells":["virtualmachines.kubevirt.io","2026-11-23T02:58:00Z"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"virtualmachines.kubevirt.io","uid":"3"}}},`), 1)
	jsonEqual(t, respond(t, r, path, nil, hidden), out)

	// And in a watch of Tables (kubectl get crd -w).
	out = respond(t, r, path, url.Values{"watch": {"true"}}, append(append([]byte(`{"type":"ADDED","object":`), in...), '}', '\n'))
	if got := get(t, out, "object.rows.0.cells.0"); got != "virtualmachines.kubevirt.io" {
		t.Errorf("watch: %q", got)
	}
}

func TestResponseCRDList(t *testing.T) {
	r := kubevirtRules(t)
	in := sample(t, "crdlist.json")
	if n := gjson.GetBytes(in, "items.#").Int(); n != 2 {
		t.Fatalf("%d CRDs in the sample", n)
	}
	out := respond(t, r, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", nil, in)
	noTargetNames(t, out)
	if n := gjson.GetBytes(out, "items.#").Int(); n != 1 || get(t, out, "items.0.metadata.name") != "virtualmachines.kubevirt.io" || get(t, out, "items.0.spec.names.shortNames.0") != "vm" {
		t.Fatalf("%s", out)
	}
	// Nor in a watch.
	var stream []byte
	gjson.GetBytes(in, "items").ForEach(func(_, item gjson.Result) bool {
		stream = append(stream, `{"type":"ADDED","object":`+string(compact(t, []byte(item.Raw)))+"}\n"...)
		return true
	})
	out = respond(t, r, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", url.Values{"watch": {"true"}}, stream)
	if lines := bytes.Split(bytes.TrimSpace(out), []byte("\n")); len(lines) != 1 || get(t, lines[0], "object.spec.group") != pGroup {
		t.Fatalf("%s", out)
	}
}

func TestResponseWatch(t *testing.T) {
	r := kubevirtRules(t)
	in := sample(t, "watch.jsonl")
	out := respond(t, r, "/apis/kubevirt.io/v1/namespaces/default/virtualmachines", url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}}, in)
	noTargetNames(t, out)
	inLines := bytes.Split(bytes.TrimSpace(in), []byte("\n"))
	outLines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(outLines) != len(inLines) {
		t.Fatalf("%d frames out of %d", len(outLines), len(inLines))
	}
	var types []string
	for i, l := range outLines {
		types = append(types, get(t, l, "type"))
		if k := get(t, l, "object.kind"); k != "VirtualMachine" {
			t.Errorf("frame %d kind %q", i, k)
		}
		if v := get(t, l, "object.apiVersion"); v != "kubevirt.io/v1" {
			t.Errorf("frame %d apiVersion %q", i, v)
		}
		// Each frame goes back to what the target sent.
		q, _ := r.Request("POST", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines", nil)
		back, err := q.Body("application/json", l)
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, back, inLines[i])
	}
	if got := strings.Join(types, ","); got != "ADDED,BOOKMARK,MODIFIED,ADDED,DELETED" {
		t.Fatalf("types %s", got)
	}
	if get(t, outLines[1], `object.metadata.annotations.k8s\.io/initial-events-end`) != "true" {
		t.Fatalf("bookmark lost its annotation: %s", outLines[1])
	}
	// The object kubectl last applied (vm2 was applied on the target) is renamed too.
	la := get(t, outLines[3], `object.metadata.annotations.kubectl\.kubernetes\.io/last-applied-configuration`)
	if get(t, []byte(la), "kind") != "VirtualMachine" || get(t, []byte(la), `metadata.labels.kubevirt\.io/os`) != "win" {
		t.Fatalf("last applied configuration not renamed: %s", la)
	}

	// ERROR events carry a Status.
	errOut := respond(t, r, "/apis/kubevirt.io/v1/virtualmachines", url.Values{"watch": {"true"}}, sample(t, "watch-error.jsonl"))
	jsonEqual(t, bytes.TrimSpace(errOut), bytes.TrimSpace(sample(t, "watch-error.jsonl")))
}

func TestResponseTooLarge(t *testing.T) {
	r := kubevirtRules(t)
	q, _ := r.Request("GET", "/apis/kubevirt.io/v1/virtualmachines", nil)
	big := `{"kind":"PrefixedVirtualMachineList","items":[{"a":"` + strings.Repeat("x", 4096) + `"}]}`
	s := &streamReader{q: q, s: &scanner{r: bufio.NewReader(strings.NewReader(big)), max: 1024}}
	if _, err := io.ReadAll(s); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	w, _ := r.Request("GET", "/apis/kubevirt.io/v1/virtualmachines", url.Values{"watch": {"true"}})
	s = &streamReader{q: w, watch: true, s: &scanner{r: bufio.NewReader(strings.NewReader(`{"type":"ADDED","object":` + big + "}\n")), max: 1024}}
	if _, err := io.ReadAll(s); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("watch: err = %v, want ErrTooLarge", err)
	}
}

func TestResponseMalformed(t *testing.T) {
	r := kubevirtRules(t)
	for _, tc := range []struct {
		name  string
		query url.Values
		body  string
	}{
		{name: "truncated list", body: `{"kind":"PrefixedVirtualMachineList","apiVersion":"x.virtualization.deckhouse.io/v1","items":[{"kind":"PrefixedVirtualMachine"`},
		{name: "truncated object", body: `{"kind":"PrefixedVirtualMachine","apiVersion":"x.virtualization.deckhouse.io/v1","metadata":{`},
		{name: "bad item", body: `{"kind":"PrefixedVirtualMachineList","items":[{"a":x.virtualization.deckhouse.io}]}`},
		{name: "missing colon", body: `{"kind" "x"}`},
		{name: "trailing comma in items", body: `{"kind":"PrefixedVirtualMachineList","items":[{},]}`},
		{name: "empty member value", body: `{"kind":,"items":[]}`},
		{name: "empty item", body: `{"items":[,]}`},
		{name: "watch garbage", query: url.Values{"watch": {"true"}}, body: `{"type":"ADDED","object":{"apiVersion":"x.virtualization.deckhouse.io/v1"}}` + "\n" + `[1,2]`},
		{name: "watch truncated", query: url.Values{"watch": {"true"}}, body: `{"type":"ADDED","object":{"apiVersion":"x.virtualization.deckhouse.io/v1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := r.Request("GET", "/apis/kubevirt.io/v1/virtualmachines", tc.query)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadAll(q.Response("application/json", strings.NewReader(tc.body))); err == nil {
				t.Fatal("want an error")
			}
		})
	}
	// Not JSON, or not an object: passes.
	q, _ := r.Request("GET", "/apis/kubevirt.io/v1/virtualmachines", nil)
	for _, ct := range []string{"application/vnd.kubernetes.protobuf", "text/plain"} {
		out, err := io.ReadAll(q.Response(ct, strings.NewReader("\x00binary")))
		if err != nil || string(out) != "\x00binary" {
			t.Fatalf("%s: %q, %v", ct, out, err)
		}
	}
	out, err := io.ReadAll(q.Response("application/json", strings.NewReader(" [1, 2]\n")))
	if err != nil || string(out) != "[1, 2]\n" {
		t.Fatalf("%q, %v", out, err)
	}
}
