package rewrite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// chooser draws choices from fuzz input; an exhausted input draws zeros.
type chooser struct{ b []byte }

func (c *chooser) n(k int) int {
	if k <= 1 {
		return 0
	}
	if len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0])
	c.b = c.b[1:]
	return v % k
}

func (c *chooser) pick(s []string) string { return s[c.n(len(s))] }

// Pools of names. Rule groups and prefixes come from disjoint pools, so that a random rule set
// is valid (invertible) and objects of "other" groups never carry a renamed name.
var (
	presentedPool = []string{"kubevirt.io", "cdi.kubevirt.io", "a.example.com", "b.example.com"}
	targetPool    = []string{"x.virtualization.deckhouse.io", "y.example.org", "t.io", "z.internal"}
	kindPrefixes  = []string{"", "Prefixed", "X", "Vendor"}
	otherGroups   = []string{"", "apps", "batch", "example.net", "rbac.authorization.k8s.io"}
	kinds         = []string{"VirtualMachine", "DataVolume", "Foo", "Bar", "Widget"}
	keyPrefixP    = []string{"kubevirt.io/", "cdi.kubevirt.io/", "p.example.com/"}
	keyPrefixT    = []string{"x.virtualization.deckhouse.io/", "cdi.x.virtualization.deckhouse.io/", "t.example.org/"}
	otherKeys     = []string{"app", "example.net/role", "app.kubernetes.io/name", "k8s.io/initial-events-end"}
	values        = []string{"", "v", "kubevirt.io/v1", "x.virtualization.deckhouse.io", "Prefixed", "VirtualMachine", "a\"b\\c\u00e9\u2028"}
)

// fuzzRules builds a valid rule set: distinct presented groups; a target group shared only by
// rules with distinct non-empty kind prefixes none of which starts another; key prefixes one
// to one.
func fuzzRules(c *chooser) *mounts.MountRewrites {
	in := &mounts.MountRewrites{}
	ng := 1 + c.n(3)
	usedP := map[string]bool{}
	for i := 0; i < ng; i++ {
		p := c.pick(presentedPool)
		if usedP[p] {
			continue
		}
		t := c.pick(targetPool)
		kp := c.pick(kindPrefixes)
		ok := true
		for _, g := range in.Groups {
			if g.Target == t && (kp == "" || g.KindPrefix == "" || strings.HasPrefix(kp, g.KindPrefix) || strings.HasPrefix(g.KindPrefix, kp)) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		usedP[p] = true
		in.Groups = append(in.Groups, mounts.GroupRewrite{Presented: p, Target: t, KindPrefix: kp})
	}
	np := c.n(3)
	usedK := map[int]bool{}
	for i := 0; i < np; i++ {
		j := c.n(len(keyPrefixP))
		if usedK[j] {
			continue
		}
		usedK[j] = true
		in.MetadataKeyPrefixes = append(in.MetadataKeyPrefixes, mounts.PrefixRewrite{Presented: keyPrefixP[j], Target: keyPrefixT[j]})
	}
	return in
}

// side is the world an object is drawn in: the client's (presented names) or the target's.
type side struct {
	groups    []string // renamed groups of this side
	kindOf    func(group, kind string) string
	resOf     func(group, resource string) string
	keyPrefix []string
}

func sides(in *mounts.MountRewrites) (presented, target side) {
	presented.kindOf = func(_, k string) string { return k }
	presented.resOf = func(_, r string) string { return r }
	target.resOf = func(g, res string) string {
		for _, r := range in.Groups {
			if r.Target == g {
				return strings.ToLower(r.KindPrefix) + res
			}
		}
		return res
	}
	target.kindOf = func(g, k string) string {
		for _, r := range in.Groups {
			if r.Target == g {
				return r.KindPrefix + k
			}
		}
		return k
	}
	for _, g := range in.Groups {
		presented.groups = append(presented.groups, g.Presented)
		target.groups = append(target.groups, g.Target)
	}
	for _, p := range in.MetadataKeyPrefixes {
		presented.keyPrefix = append(presented.keyPrefix, p.Presented)
		target.keyPrefix = append(target.keyPrefix, p.Target)
	}
	return presented, target
}

// fuzzObject draws an object of one side: names of that side only, everything else from pools
// that no rule renames (free-form strings may still look like names: values are never renamed).
func fuzzObject(c *chooser, s side) (map[string]any, string) {
	gv := func() (string, string) {
		var g string
		if len(s.groups) > 0 && c.n(2) == 0 {
			g = c.pick(s.groups)
		} else {
			g = c.pick(otherGroups)
		}
		k := c.pick(kinds)
		if contains(s.groups, g) {
			k = s.kindOf(g, k)
		}
		if g == "" {
			return "v1", k
		}
		return g + "/v1", k
	}
	key := func() string {
		if len(s.keyPrefix) > 0 && c.n(2) == 0 {
			return c.pick(s.keyPrefix) + c.pick([]string{"os", "a", "b-c"})
		}
		return c.pick(otherKeys)
	}
	apiVersion, kind := gv()
	meta := map[string]any{"name": c.pick([]string{"vm1", "x", "kubevirt.io"}), "uid": "u"}
	if n := c.n(4); n > 0 {
		labels := map[string]any{}
		for i := 0; i < n; i++ {
			labels[key()] = c.pick(values)
		}
		meta["labels"] = labels
	}
	if n := c.n(3); n > 0 {
		ann := map[string]any{}
		for i := 0; i < n; i++ {
			ann[key()] = c.pick(values)
		}
		meta["annotations"] = ann
	}
	if n := c.n(3); n > 0 {
		var f []any
		for i := 0; i < n; i++ {
			f = append(f, key())
		}
		meta["finalizers"] = f
	}
	if n := c.n(3); n > 0 {
		var refs []any
		for i := 0; i < n; i++ {
			av, k := gv()
			refs = append(refs, map[string]any{"apiVersion": av, "kind": k, "name": "o", "uid": fmt.Sprint(i)})
		}
		meta["ownerReferences"] = refs
	}
	if c.n(2) == 0 {
		fl := map[string]any{}
		if n := c.n(3); n > 0 {
			for i := 0; i < n; i++ {
				fl["f:"+key()] = map[string]any{}
			}
		}
		meta["managedFields"] = []any{map[string]any{
			"manager": "m", "operation": "Apply", "apiVersion": apiVersion, "fieldsType": "FieldsV1",
			"fieldsV1": map[string]any{"f:metadata": map[string]any{"f:labels": fl, "f:finalizers": map[string]any{"v:" + mustJSON(key()): map[string]any{}}}},
		}}
	}
	obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta,
		"spec": map[string]any{"s": c.pick(values), "n": 1.5, "list": []any{c.pick(values), nil, true}}}
	return obj, apiVersion
}

// fuzzReference draws an object of another group that names groups, resources and kinds of
// one side: a CRD, a ClusterRole or an Event. It returns the object and its path.
func fuzzReference(c *chooser, s side) (map[string]any, string) {
	g := c.pick(otherGroups)
	if len(s.groups) > 0 && c.n(3) != 0 {
		g = c.pick(s.groups)
	}
	kind := c.pick(kinds)
	plural := strings.ToLower(kind) + "s"
	short := strings.ToLower(kind)[:2]
	kk, res := kind, plural
	if contains(s.groups, g) {
		kk, res, short = s.kindOf(g, kind), s.resOf(g, plural), s.resOf(g, short)
	}
	switch c.n(3) {
	case 0:
		if g == "" {
			g = "example.net"
		}
		names := map[string]any{"kind": kk, "listKind": kk + "List", "plural": res, "singular": strings.TrimSuffix(res, "s"),
			"shortNames": []any{short}, "categories": []any{"all"}}
		return map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": res + "." + g},
			"spec":     map[string]any{"group": g, "names": names, "scope": "Namespaced"},
			"status":   map[string]any{"acceptedNames": names}}, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	case 1:
		return map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "r"},
			"rules": []any{
				map[string]any{"apiGroups": []any{g}, "resources": []any{res, res + "/status", "*"}, "verbs": []any{"get"}},
				map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"*"}},
			}}, "/apis/rbac.authorization.k8s.io/v1/clusterroles"
	}
	av := "v1"
	if g != "" {
		av = g + "/v1"
	}
	return map[string]any{"apiVersion": "v1", "kind": "Event", "metadata": map[string]any{"name": "e", "namespace": "default"},
		"involvedObject": map[string]any{"apiVersion": av, "kind": kk, "name": "o"}, "reason": "R"}, "/api/v1/namespaces/default/events"
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// pathFor returns a request path for objects of apiVersion on the presented side.
func pathFor(in *mounts.MountRewrites, apiVersion string, presentedSide bool) string {
	g, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return "/api/v1/namespaces/default/configmaps"
	}
	if !presentedSide {
		for _, r := range in.Groups {
			if r.Target == g {
				g = r.Presented
			}
		}
	}
	return "/apis/" + g + "/v1/namespaces/default/things"
}

func roundTrip(t *testing.T, data []byte) {
	c := &chooser{b: data}
	in := fuzzRules(c)
	r, err := Compile(in)
	if err != nil {
		t.Fatalf("valid rules refused: %v", err)
	}
	presented, target := sides(in)
	fromPresented := c.n(2) == 0
	s := presented
	if !fromPresented {
		s = target
	}
	obj, apiVersion := fuzzObject(c, s)
	path := pathFor(in, apiVersion, fromPresented)
	if c.n(2) == 0 {
		obj, path = fuzzReference(c, s)
	}
	orig, _ := json.Marshal(obj)
	// Lists and watch events go the same way.
	switch c.n(3) {
	case 1:
		orig = []byte(`{"kind":"List","apiVersion":"v1","metadata":{},"items":[` + string(orig) + `,` + string(orig) + `]}`)
	case 2:
		orig = []byte(`{"type":"MODIFIED","object":` + string(orig) + `}`)
	}

	q, err := r.Request("GET", path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var there, back []byte
	if fromPresented {
		if there, err = q.Body("application/json", orig); err != nil {
			t.Fatalf("to target: %v\n%s", err, orig)
		}
		out, err := io.ReadAll(q.Response("application/json", bytes.NewReader(there)))
		if err != nil {
			t.Fatalf("to presented: %v\n%s", err, there)
		}
		back = out
	} else {
		out, err := io.ReadAll(q.Response("application/json", bytes.NewReader(orig)))
		if err != nil {
			t.Fatalf("to presented: %v\n%s", err, orig)
		}
		there = out
		if back, err = q.Body("application/json", there); err != nil {
			t.Fatalf("to target: %v\n%s", err, there)
		}
	}
	var a, b any
	if err := json.Unmarshal(orig, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(back, &b); err != nil {
		t.Fatalf("round trip is not JSON: %v\n%s", err, back)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("round trip differs (rules %+v, from presented %v):\norig  %s\nthere %s\nback  %s", *in, fromPresented, orig, there, back)
	}
}

// FuzzRoundTrip: for random valid rule sets and random objects (alone, in a List, in a watch
// event) of either side, rewriting to the other side and back gives the original.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 3, 0, 2, 0, 1, 1, 0, 0, 1})
	f.Add([]byte("kubevirt roundtrip seed with labels and owners"))
	f.Add(bytes.Repeat([]byte{1, 2, 3, 0}, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data)
	})
}

// FuzzJSONPatchRoundTrip: a JSON patch of a renamed group's object (label, annotation and
// finalizer paths and values, apiVersion, kind, owner references, whole maps, other values),
// rewritten to the target and back, is the original.
func FuzzJSONPatchRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(bytes.Repeat([]byte{3, 1, 4, 1, 5, 9, 2, 6}, 10))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &chooser{b: data}
		in := fuzzRules(c)
		r, err := Compile(in)
		if err != nil {
			t.Fatal(err)
		}
		presented, _ := sides(in)
		g := in.Groups[c.n(len(in.Groups))].Presented
		key := func() string {
			if len(presented.keyPrefix) > 0 && c.n(2) == 0 {
				return c.pick(presented.keyPrefix) + "k"
			}
			return c.pick(otherKeys)
		}
		esc := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") }
		var ops []any
		for i, n := 0, 1+c.n(6); i < n; i++ {
			op := map[string]any{"op": c.pick([]string{"add", "replace", "remove", "test", "move", "copy"})}
			switch c.n(8) {
			case 0:
				op["path"], op["value"] = "/metadata/labels/"+esc(key()), c.pick(values)
			case 1:
				op["path"], op["from"] = "/metadata/annotations/"+esc(key()), "/metadata/annotations/"+esc(key())
			case 2:
				op["path"], op["value"] = "/metadata/finalizers/"+fmt.Sprint(c.n(3)), key()
			case 3:
				op["path"], op["value"] = "/apiVersion", g+"/v1"
			case 4:
				op["path"], op["value"] = "/kind", c.pick(kinds)
			case 5:
				op["path"], op["value"] = "/metadata/ownerReferences/0", map[string]any{"apiVersion": g + "/v1", "kind": c.pick(kinds), "name": "o", "uid": "1"}
			case 6:
				op["path"], op["value"] = "/metadata/labels", map[string]any{key(): "a", key(): "b"}
			default:
				op["path"], op["value"] = "/spec/"+esc(key()), c.pick(values)
			}
			ops = append(ops, op)
		}
		orig, _ := json.Marshal(ops)
		q, err := r.Request("PATCH", "/apis/"+g+"/v1/namespaces/default/things/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		there, err := q.Body("application/json-patch+json", orig)
		if err != nil {
			t.Fatalf("%v\n%s", err, orig)
		}
		back, err := r.jsonPatch(toPresented, there, q.rule)
		if err != nil {
			t.Fatalf("%v\n%s", err, there)
		}
		var a, b any
		_ = json.Unmarshal(orig, &a)
		if err := json.Unmarshal(back, &b); err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip differs (rules %+v):\norig  %s\nthere %s\nback  %s", *in, orig, there, back)
		}
	})
}

// FuzzResponse: any bytes as a response (object, list or watch stream) never panic, and a
// rewritten JSON object stays JSON.
func FuzzResponse(f *testing.F) {
	for _, s := range []string{"object.json", "list.json", "table.json", "watch.jsonl", "status-invalid.json", "apis.json", "apiresourcelist.json"} {
		f.Add(sample(f, s), s == "watch.jsonl")
	}
	f.Add([]byte(`{"kind":"PrefixedVirtualMachineList","items":[{"a":"\u0078.virtualization.deckhouse.io"}],"kind":1}`), false)
	r := kubevirtRules(f)
	f.Fuzz(func(t *testing.T, data []byte, watch bool) {
		for _, path := range []string{"/apis/kubevirt.io/v1/virtualmachines", "/apis", "/apis/kubevirt.io/v1", "/openapi/v3", "/api/v1/events"} {
			query := url.Values{}
			if watch {
				query.Set("watch", "true")
			}
			q, err := r.Request("GET", path, query)
			if err != nil {
				t.Fatal(err)
			}
			out, err := io.ReadAll(q.Response("application/json", bytes.NewReader(data)))
			if err == nil && !watch && json.Valid(data) && bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) && !json.Valid(out) {
				t.Fatalf("%s: valid JSON in, invalid out:\n%s\n%s", path, data, out)
			}
			if _, err := q.Body("application/json-patch+json", data); err != nil {
				_ = err
			}
			_, _ = q.Body("application/strategic-merge-patch+json", data)
			_, _ = q.Body("application/apply-patch+yaml", data)
		}
		_, _ = r.AdmissionReviewToPresented(data)
		_, _ = r.AdmissionResponseToTarget(data)
	})
}

// FuzzRequest: any path and query classify without panic.
func FuzzRequest(f *testing.F) {
	f.Add("/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm1/status", "labelSelector=kubevirt.io/os%3Dlinux&watch=true")
	f.Add("/apis/kubevirt.io/v1/watch/virtualmachines", "")
	f.Add("/api/v1/events", "fieldSelector=involvedObject.apiVersion%3Dkubevirt.io/v1")
	f.Add("/openapi/v3/apis/kubevirt.io/v1", "hash=1")
	f.Add("//apis//", "labelSelector=%21")
	r := kubevirtRules(f)
	f.Fuzz(func(t *testing.T, path, rawQuery string) {
		query, _ := url.ParseQuery(rawQuery)
		_, _ = r.Request("GET", path, query)
	})
}

// FuzzFastPath: the fast path and the general path rewrite any object alike, both ways.
func FuzzFastPath(f *testing.F) {
	f.Add([]byte{}, []byte(nil))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, []byte(nil))
	for _, s := range []string{"object.json", "configmap-owned.json", "watch.jsonl"} {
		for _, l := range bytes.Split(bytes.TrimSpace(sample(f, s)), []byte("\n")) {
			f.Add([]byte{0}, l)
		}
	}
	f.Fuzz(func(t *testing.T, choices, raw []byte) {
		c := &chooser{b: choices}
		in := fuzzRules(c)
		if len(raw) > 0 {
			in = &mounts.MountRewrites{
				Groups:              []mounts.GroupRewrite{{Presented: pGroup, Target: tGroup, KindPrefix: "Prefixed"}},
				MetadataKeyPrefixes: []mounts.PrefixRewrite{{Presented: "kubevirt.io/", Target: "x.virtualization.deckhouse.io/"}},
			}
		}
		fast, err := Compile(in)
		if err != nil {
			t.Fatal(err)
		}
		general, _ := Compile(in)
		general.general = true
		presented, target := sides(in)
		docs := [][]byte{raw}
		if len(raw) == 0 {
			p, _ := fuzzObject(c, presented)
			q, _ := fuzzObject(c, target)
			docs = [][]byte{[]byte(mustJSON(p)), []byte(mustJSON(q))}
		}
		for _, doc := range docs {
			for _, d := range []direction{toTarget, toPresented} {
				a, errA := fast.object(d, doc, typeHint{})
				b, errB := general.object(d, doc, typeHint{})
				if (errA == nil) != (errB == nil) {
					t.Fatalf("errors differ: fast %v, general %v\n%s", errA, errB, doc)
				}
				if errA != nil {
					continue
				}
				if !json.Valid(doc) {
					if !bytes.Equal(a, b) {
						t.Fatalf("not JSON, yet rewritten differently:\n%q\n%q", a, b)
					}
					continue
				}
				// Numbers as they are written: valid JSON such as 1E1000 does not fit a float64.
				var x, y any
				if !bytes.Equal(a, b) && (decodeNumbers(a, &x) != nil || decodeNumbers(b, &y) != nil || !reflect.DeepEqual(x, y)) {
					t.Fatalf("direction %d differs:\nin      %s\nfast    %s\ngeneral %s", d, doc, a, b)
				}
			}
		}
	})
}

func decodeNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}
