package rewrite

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// smallStacks bounds goroutine stacks for the rest of the test: a rewrite that recursed once
// per level of its input would die of a stack overflow (the fatal error the hub died of,
// issue #23) rather than pass on a machine with memory to spare.
func smallStacks(t *testing.T) {
	old := debug.SetMaxStack(16 << 20)
	t.Cleanup(func() { debug.SetMaxStack(old) })
}

// deep is n levels of '[' and their closing brackets: the nesting of issue #23 (48 MiB of it
// gzipped to 49 KB).
func deep(n int) string {
	return strings.Repeat("[", n) + strings.Repeat("]", n)
}

// TestDeepNestingEverywhere sends nesting far beyond MaxDepth through every path that parses
// a caller's or a target's JSON: each answers an error that wraps ErrTooDeep (or leaves the
// value alone where it is no JSON the rewriter reads), with small goroutine stacks and without
// a crash.
func TestDeepNestingEverywhere(t *testing.T) {
	smallStacks(t)
	r := kubevirtRules(t)
	// Far beyond the bound, and deep enough that a recursion per level overflows the small
	// stacks (issue #23's 48 MiB are sent by test/integration's TestRenamingMountHostileNesting).
	const big = 3 << 20 // a caller's body: what kube-apiserver takes
	const huge = 8 << 20
	vm := func(spec string) string {
		return `{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachine","metadata":{"name":"vm","labels":{"x.virtualization.deckhouse.io/os":"linux"}},"spec":` + spec + `}`
	}
	respond := func(path string, query url.Values, body string) error {
		q, err := r.Request("GET", path, query)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, q.Response("application/json", strings.NewReader(body)))
		return err
	}
	const vms = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
	responses := map[string]func() error{
		"object": func() error { return respond(vms+"/vm", nil, vm(deep(huge))) },
		"object, deep in metadata": func() error {
			return respond(vms+"/vm", nil, `{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachine","metadata":{"annotations":{"a":`+deep(huge)+`}}}`)
		},
		"list item": func() error {
			return respond(vms, nil, `{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachineList","items":[`+vm(`{}`)+`,`+vm(deep(huge))+`]}`)
		},
		"list member before the items": func() error {
			return respond(vms, nil, `{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachineList","metadata":`+deep(huge)+`,"items":[]}`)
		},
		"list member after the items": func() error {
			return respond(vms, nil, `{"apiVersion":"x.virtualization.deckhouse.io/v1","items":[],"kind":"PrefixedVirtualMachineList","x":`+deep(huge)+`}`)
		},
		"table row": func() error {
			return respond(vms, nil, `{"apiVersion":"meta.k8s.io/v1","kind":"Table","rows":[{"cells":[],"object":`+vm(deep(huge))+`}]}`)
		},
		"list of other groups' objects": func() error {
			return respond("/api/v1/namespaces/default/configmaps", nil, `{"apiVersion":"v1","kind":"ConfigMapList","items":[{"metadata":{"name":"a","labels":{"x.virtualization.deckhouse.io/os":"linux"}},"data":`+deep(huge)+`}]}`)
		},
		"watch event": func() error {
			return respond(vms, url.Values{"watch": {"true"}}, `{"type":"ADDED","object":`+vm(`{}`)+"}\n"+`{"type":"MODIFIED","object":`+vm(deep(huge))+"}\n")
		},
		"watch event of a bare array": func() error {
			return respond(vms, url.Values{"watch": {"true"}}, `{"type":"ADDED","object":`+deep(huge)+"}\n")
		},
		"discovery /apis": func() error { return respond("/apis", nil, strings.Repeat("[", huge)) },
		"discovery of a group": func() error {
			return respond("/apis/kubevirt.io/v1", nil, `{"kind":"APIResourceList","resources":`+deep(huge/2)+`}`)
		},
		"aggregated discovery": func() error {
			return respond("/apis", nil, `{"kind":"APIGroupDiscoveryList","items":[{"versions":`+deep(huge/2)+`}]}`)
		},
		"OpenAPI v2": func() error {
			return respond("/openapi/v2", nil, `{"swagger":"2.0","definitions":{"a":`+deep(huge/2)+`}}`)
		},
		"OpenAPI v3 index":               func() error { return respond("/openapi/v3", nil, `{"paths":`+deep(huge/2)+`}`) },
		"OpenAPI v3 document of a group": func() error { return respond("/openapi/v3/apis/kubevirt.io/v1", nil, deep(huge/2)) },
	}
	for name, f := range responses {
		t.Run("response/"+name, func(t *testing.T) {
			if err := f(); !errors.Is(err, ErrTooDeep) {
				t.Fatalf("%v, want ErrTooDeep", err)
			}
		})
	}

	post, _ := r.Request("POST", vms, nil)
	patch, _ := r.Request("PATCH", vms+"/vm", nil)
	bodies := []struct {
		name string
		q    Request
		ct   string
		body string
	}{
		{"create", post, "application/json", vm(deep(big))},
		{"bare array", post, "application/json", deep(big)},
		{"JSON patch", patch, "application/json-patch+json", deep(big)},
		{"JSON patch value", patch, "application/json-patch+json", `[{"op":"add","path":"/spec","value":` + deep(big) + `}]`},
		{"merge patch", patch, "application/merge-patch+json", vm(deep(big))},
		{"strategic merge patch", patch, "application/strategic-merge-patch+json", vm(deep(big))},
		{"apply patch in JSON", patch, "application/apply-patch+yaml", vm(deep(big))},
		{"apply patch in YAML", patch, "application/apply-patch+yaml", "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nspec: " + deep(big) + "\n"},
	}
	for _, tc := range bodies {
		t.Run("body/"+tc.name, func(t *testing.T) {
			_, err := tc.q.Body(tc.ct, []byte(tc.body))
			if err == nil {
				t.Fatal("want an error")
			}
			// YAML's own decoder stops at 10000 levels too, with its own error.
			if !errors.Is(err, ErrTooDeep) && !strings.Contains(err.Error(), "exceeded max depth") {
				t.Fatalf("%v, want ErrTooDeep", err)
			}
		})
	}

	review := `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u1","kind":{"group":"x.virtualization.deckhouse.io","version":"v1","kind":"PrefixedVirtualMachine"},"object":` + vm(deep(big)) + `}}`
	if _, err := r.AdmissionReviewToPresented([]byte(review)); !errors.Is(err, ErrTooDeep) {
		t.Errorf("admission review: %v, want ErrTooDeep", err)
	}
	answer := `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"u1","allowed":true,"x":` + deep(big) + `}}`
	if _, err := r.AdmissionResponseToTarget([]byte(answer)); !errors.Is(err, ErrTooDeep) {
		t.Errorf("admission response: %v, want ErrTooDeep", err)
	}
	answer = `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"u1","allowed":true,"patchType":"JSONPatch","patch":"` +
		base64.StdEncoding.EncodeToString([]byte(deep(big))) + `"}}`
	if _, err := r.AdmissionResponseToTarget([]byte(answer)); !errors.Is(err, ErrTooDeep) {
		t.Errorf("admission response's patch: %v, want ErrTooDeep", err)
	}

	// kubectl's last applied configuration is JSON in a string: too deep, it is left as it is.
	la, _ := sjson.Set(vm(`{}`), `metadata.annotations.kubectl\.kubernetes\.io/last-applied-configuration`, `{"apiVersion":"x.virtualization.deckhouse.io/v1","spec":`+deep(big)+`}`)
	q, _ := r.Request("GET", vms+"/vm", nil)
	out, err := io.ReadAll(q.Response("application/json", strings.NewReader(la)))
	if err != nil || !strings.Contains(gjson.Get(string(out), `metadata.annotations.kubectl\.kubernetes\.io/last-applied-configuration`).Str, "x.virtualization.deckhouse.io/v1") {
		t.Fatalf("last applied configuration: %v", err)
	}
}

// TestGJSONDoesNotRecurse checks what the rewriter still calls on input it has not checked
// (lookups and iteration while classifying a stream's items), and sjson's edits, on 8 Mi
// levels of nesting with small stacks: they scan iteratively.
func TestGJSONDoesNotRecurse(t *testing.T) {
	smallStacks(t)
	d := `{"kind":"x","metadata":{"name":"a"},"spec":` + deep(8<<20) + `}`
	if gjson.Get(d, "metadata.name").Str != "a" || gjson.Get(d, "spec.0.0").Raw == "" || gjson.Get(d, "kind").Str != "x" {
		t.Fatal("lookups")
	}
	n := 0
	gjson.Parse(d).ForEach(func(_, v gjson.Result) bool { n++; return true })
	gjson.Get(d, "spec").ForEach(func(_, v gjson.Result) bool { n++; return true })
	if n != 4 || len(gjson.Get(d, "spec").Array()) != 1 {
		t.Fatalf("ForEach saw %d values", n)
	}
	if _, err := sjson.Set(d, "metadata.name", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := sjson.SetRaw(d, "spec.0", "1"); err != nil {
		t.Fatal(err)
	}
	// encoding/json (the admission relay's reads of webhook configurations and Statuses)
	// checks the whole input iteratively, 10000 levels deep, before it decodes.
	var obj struct {
		Metadata struct{ Name string } `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(d), &obj); err == nil || !strings.Contains(err.Error(), "exceeded max depth") {
		t.Fatalf("encoding/json: %v", err)
	}
	// The recursive validator itself, on a depth within the bound, is what it always was.
	if !gjson.Valid(deep(MaxDepth)) {
		t.Fatal("gjson.Valid")
	}
}

// TestApplyYAMLAliases: a YAML apply patch whose aliases repeat a large string would be
// gigabytes of JSON; it is refused before it is converted.
func TestApplyYAMLAliases(t *testing.T) {
	r := kubevirtRules(t)
	q, _ := r.Request("PATCH", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm", nil)
	var y strings.Builder
	y.WriteString("apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm\nx: &a " + strings.Repeat("z", 1<<20) + "\nspec:\n")
	for i := range 500 {
		fmt.Fprintf(&y, "  k%04d: *a\n", i)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := q.Body("application/apply-patch+yaml", []byte(y.String()))
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "aliases") {
		t.Fatalf("%v, want an error about aliases", err)
	}
	// 500 aliases of 1 MiB would be 500 MiB of JSON.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 128<<20 {
		t.Fatalf("%d MiB allocated", alloc>>20)
	}
	// Aliases that expand to little pass.
	small := "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm\n  labels: &l {kubevirt.io/os: linux}\nspec:\n  template:\n    metadata:\n      labels: *l\n"
	out, err := q.Body("application/apply-patch+yaml", []byte(small))
	if err != nil || get(t, out, `spec.template.metadata.labels.x\.virtualization\.deckhouse\.io/os`) != "linux" {
		t.Fatalf("%s %v", out, err)
	}
}

// openAPIv2 returns an OpenAPI v2 document of about size bytes: the sample's definitions and
// paths, repeated under other names.
func openAPIv2(t testing.TB, size int) []byte {
	t.Helper()
	in := sample(t, "openapi-v2.json")
	defs := gjson.GetBytes(in, "definitions").Raw
	paths := gjson.GetBytes(in, "paths").Raw
	var b bytes.Buffer
	b.WriteString(`{"swagger":"2.0","info":{"title":"Kubernetes","version":"v1.37.1"},"paths":{`)
	for i := 0; b.Len() < size/2; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		p := strings.ReplaceAll(paths[1:len(paths)-1], `{namespace}`, `{namespace`+strconv.Itoa(i)+`}`)
		b.WriteString(p)
	}
	b.WriteString(`},"definitions":{`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strings.ReplaceAll(defs[1:len(defs)-1], `"io.k8s`, `"io.k8s`+strconv.Itoa(i)))
	}
	b.WriteString(`}}`)
	return b.Bytes()
}

// TestOpenAPIv2Memory rewrites a 16 MiB /openapi/v2 and counts what it allocates: the
// document once as it is read (and the growth of that buffer), not copies of it (before
// issue #23, seven or so: 230 MiB raised RSS by 1.8 GiB). The answer is the one a whole-text
// replacement gives.
func TestOpenAPIv2Memory(t *testing.T) {
	r := kubevirtRules(t)
	doc := openAPIv2(t, 16<<20)
	q, _ := r.Request("GET", "/openapi/v2", nil)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n, err := io.Copy(io.Discard, struct{ io.Reader }{q.Response("application/json", struct{ io.Reader }{bytes.NewReader(doc)})})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("document %d MiB, answer %d MiB, allocated %d MiB", len(doc)>>20, n>>20, alloc>>20)
	// Read in chunks, then joined: twice the document, and a little for the rest.
	if alloc > uint64(2*len(doc))+16<<20 {
		t.Fatalf("allocated %d MiB for a document of %d MiB", alloc>>20, len(doc)>>20)
	}

	out := respondBig(t, q, doc)
	repl, _ := r.replacer(doc, r.groups)
	pieces, err := r.dropHiddenV2(doc)
	if err != nil {
		t.Fatal(err)
	}
	var whole []byte
	for _, p := range pieces {
		if p.start < p.end {
			whole = append(whole, doc[p.start:p.end]...)
		} else {
			whole = append(whole, p.lit...)
		}
	}
	if want := repl.Replace(string(whole)); string(out) != want {
		t.Fatal("the streamed rewrite differs from the whole one")
	}
	if err := CheckJSON(out); err != nil || len(gjson.GetBytes(out, "definitions").Map()) == 0 {
		t.Fatalf("answer: %v", err)
	}
	noTargetNames(t, out)
}

func respondBig(t testing.TB, q Request, doc []byte) []byte {
	t.Helper()
	out, err := io.ReadAll(q.Response("application/json", bytes.NewReader(doc)))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReplacingReaderCuts: parts end only after bytes that no name holds, so that a
// replacement never spans two parts, whatever the document's layout.
func TestReplacingReaderCuts(t *testing.T) {
	r := kubevirtRules(t)
	q, _ := r.Request("GET", "/openapi/v3/apis/kubevirt.io/v1", nil)
	base := sample(t, "openapi-v3-group.json")
	for _, shift := range []int{0, 1, 7, 100, 4095} {
		// A prefix of spaces moves every name across the parts' boundaries.
		doc := append(bytes.Repeat([]byte(" "), shift), base...)
		repl, cut := r.replacer(doc, []*groupRule{q.rule})
		want := repl.Replace(string(doc))
		rr := &replacingReader{data: doc, pieces: []piece{{end: len(doc)}}, repl: repl, cut: cut}
		got, err := io.ReadAll(&smallReader{r: rr})
		if err != nil || string(got) != want {
			t.Fatalf("shift %d: %v, streamed answer differs", shift, err)
		}
	}
	// A document without a byte to cut at is replaced whole.
	long := []byte(`"` + strings.Repeat(`x.virtualization.deckhouse.io/`, 10000) + `"`)
	repl, cut := r.replacer(long, r.groups)
	rr := &replacingReader{data: long, pieces: []piece{{end: len(long)}}, repl: repl, cut: cut}
	got, err := io.ReadAll(rr)
	if err != nil || string(got) != repl.Replace(string(long)) {
		t.Fatalf("%v", err)
	}
}

// TestDocumentBounds: a document beyond maxDocument, or beyond the whole Budget, is refused
// with ErrTooLarge; one that waits for a Budget that others hold gets ErrBusy after the wait;
// and every rewrite gives its share back when its answer is read or closed.
func TestDocumentBounds(t *testing.T) {
	r := kubevirtRules(t)
	q, _ := r.Request("GET", "/openapi/v2", nil)
	ctx := context.Background()

	// Beyond maxDocument, with an endless target.
	_, err := io.Copy(io.Discard, q.Response("application/json", io.MultiReader(strings.NewReader(`{"a":"`), endless{})))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "67108864") {
		t.Fatalf("endless document: %v", err)
	}

	// Nested too deep, a document is refused as soon as it is, not once read whole.
	for _, path := range []string{"/openapi/v2", "/apis"} {
		d, _ := r.Request("GET", path, nil)
		src := &counting{r: endless{c: '['}}
		if _, err := io.Copy(io.Discard, d.Response("application/json", src)); !errors.Is(err, ErrTooDeep) || src.n > 256<<10 {
			t.Fatalf("%s, endless '[': %v after %d bytes", path, err, src.n)
		}
	}

	doc := openAPIv2(t, 4<<20)
	small := NewBudget(4<<20, time.Second)
	if _, err := io.Copy(io.Discard, q.WithBudget(ctx, small).Response("application/json", bytes.NewReader(doc))); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("beyond the budget: %v", err)
	}

	b := NewBudget(64<<20, 200*time.Millisecond)
	// A reader that has read its document and not its answer holds its share.
	held := q.WithBudget(ctx, b).Response("application/json", bytes.NewReader(doc)).(*documentReader)
	if _, err := held.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if got := b.size - available(b); got < int64(len(doc)) {
		t.Fatalf("a read document holds %d bytes of the budget", got)
	}
	// Others fill the rest; the next waits, then is busy.
	rest := available(b)
	if !b.sem.TryAcquire(rest) {
		t.Fatal("could not fill the budget")
	}
	start := time.Now()
	_, err = io.Copy(io.Discard, q.WithBudget(ctx, b).Response("application/json", bytes.NewReader(doc)))
	if !errors.Is(err, ErrBusy) || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("busy budget: %v after %v", err, time.Since(start))
	}
	// A caller that goes away stops waiting.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := io.Copy(io.Discard, q.WithBudget(cctx, b).Response("application/json", bytes.NewReader(doc))); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	b.sem.Release(rest)
	_ = held.Close()
	if free := available(b); free != b.size {
		t.Fatalf("%d bytes of the budget not given back", b.size-free)
	}
	// Once everything is given back, the whole budget is free.
	b2 := NewBudget(64<<20, time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			rd := q.WithBudget(ctx, b2).Response("application/json", bytes.NewReader(doc))
			if _, err := io.Copy(io.Discard, rd); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Discovery too, and a reader closed before its end.
	d, _ := r.Request("GET", "/apis", nil)
	rd := d.WithBudget(ctx, b2).Response("application/json", bytes.NewReader(sample(t, "apis.json")))
	if _, err := rd.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	_ = rd.(io.Closer).Close()
	if free := available(b2); free != b2.size {
		t.Fatalf("%d bytes of the budget not given back", b2.size-free)
	}
}

// available returns how much of b is free, by taking and giving it back.
func available(b *Budget) int64 {
	lo, hi := int64(0), b.size
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if b.sem.TryAcquire(mid) {
			b.sem.Release(mid)
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// endless reads c (or 'a') for ever.
type endless struct{ c byte }

func (e endless) Read(p []byte) (int, error) {
	c := e.c
	if c == 0 {
		c = 'a'
	}
	for i := range p {
		p[i] = c
	}
	return len(p), nil
}

// counting counts what is read from r.
type counting struct {
	r io.Reader
	n int
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
