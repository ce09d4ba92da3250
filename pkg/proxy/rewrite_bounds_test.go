package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/rewrite"
)

// hostileVM is an object of the renamed group with n levels of '[' in its spec (unclosed: the
// shape of issue #23's 48 MiB).
func hostileVM(n int) string {
	return `{"apiVersion":"x.example.org/v1","kind":"PrefixedVM","metadata":{"name":"vm"},"spec":` + strings.Repeat("[", n)
}

// serveGzip writes body gzipped, as kube-apiserver does for large answers: 48 MiB of '['
// travel as 49 KB.
func serveGzip(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Encoding", "gzip")
	gz := gzip.NewWriter(w)
	_, _ = io.WriteString(gz, body)
	_ = gz.Close()
}

// proxied serves one request through p's handler for m as user alice.
func proxied(t *testing.T, p *Proxier, m *mounts.Mount, method, path, contentType, body string) *httptest.ResponseRecorder {
	t.Helper()
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
	inner, _, _ := strings.Cut(path, "?")
	h, err := p.Handler(ctx, m, inner)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequestWithContext(ctx, method, "/apis/mounts.kcp.io/v1alpha1/mounts/"+m.Name+"/proxy"+path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// wantStatus checks that rec is a metav1.Status of code whose message holds each of words.
func wantStatus(t *testing.T, rec *httptest.ResponseRecorder, code int, words ...string) {
	t.Helper()
	var s metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || s.Kind != "Status" {
		t.Fatalf("%d %.300q: not a Status", rec.Code, rec.Body.String())
	}
	if rec.Code != code || int(s.Code) != code {
		t.Fatalf("%d (Status %d) %s, want %d", rec.Code, s.Code, s.Message, code)
	}
	for _, w := range words {
		if !strings.Contains(s.Message, w) {
			t.Fatalf("message %q does not say %q", s.Message, w)
		}
	}
}

// TestRenamingMountBounds: what a renaming mount cannot rewrite is answered with a Status
// that names the mount and the bound: 400 for a caller's body too deep, 502 for a target's
// answer too deep (issue #23: 48 MiB of '[', gzipped, killed the hub) or cut short, 503 with
// Retry-After when the memory budget of whole documents has no room; a watch whose event
// cannot be rewritten ends with an ERROR event of a 502 Status.
func TestRenamingMountBounds(t *testing.T) {
	p := rewriteTestProxierOf(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/apis/x.example.org/v1/namespaces/default/prefixedvms/vm":
			// 48 MiB, closed: what the object's rewrite validated.
			serveGzip(w, hostileVM(24<<20)+strings.Repeat("]", 24<<20)+"}")
		case "/apis/x.example.org/v1/namespaces/default/prefixedvms/cut":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"apiVersion":"x.example.org/v1","kind":"PrefixedVM","metadata":{"name":"cut"`)
		case "/apis/x.example.org/v1/namespaces/default/prefixedvms":
			if r.URL.Query().Get("watch") == "true" {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"type":"ADDED","object":{"apiVersion":"x.example.org/v1","kind":"PrefixedVM","metadata":{"name":"ok"}}}`+"\n")
				_, _ = io.WriteString(w, `{"type":"ADDED","object":`+hostileVM(1<<20)+"\n")
				return
			}
			serveGzip(w, `{"apiVersion":"x.example.org/v1","kind":"PrefixedVMList","metadata":{},"items":[`+hostileVM(1<<20))
		case "/apis":
			serveGzip(w, strings.Repeat("[", 48<<20))
		case "/openapi/v2":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"swagger":"2.0","definitions":{"a":{"description":"`+strings.Repeat("d", 1<<20)+`"}}}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
		}
	})
	m := testMount("renaming", "creds")
	m.Spec.Rewrites = &mounts.MountRewrites{Groups: []mounts.GroupRewrite{{Presented: "example.com", Target: "x.example.org", KindPrefix: "Prefixed"}}}
	const vms = "/apis/example.com/v1/namespaces/default/vms"

	t.Run("object of 48 MiB of brackets", func(t *testing.T) {
		wantStatus(t, proxied(t, p, m, http.MethodGet, vms+"/vm", "", ""), http.StatusBadGateway, `mount "renaming"`, "deeper than the 10000 levels")
	})
	t.Run("discovery of 48 MiB of '['", func(t *testing.T) {
		// A discovery root's failure is text, the only form client-go's discovery shows.
		rec := proxied(t, p, m, http.MethodGet, "/apis", "", "")
		if body := rec.Body.String(); rec.Code != http.StatusBadGateway || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") ||
			!strings.Contains(body, `mount 'renaming'`) || !strings.Contains(body, "deeper than the 10000 levels") {
			t.Fatalf("%d %s %q", rec.Code, rec.Header().Get("Content-Type"), body)
		}
	})
	t.Run("list", func(t *testing.T) {
		wantStatus(t, proxied(t, p, m, http.MethodGet, vms, "", ""), http.StatusBadGateway, `mount "renaming"`, "deeper than the 10000 levels")
	})
	t.Run("object cut short", func(t *testing.T) {
		wantStatus(t, proxied(t, p, m, http.MethodGet, vms+"/cut", "", ""), http.StatusBadGateway, `mount "renaming"`, "ends in the middle")
	})
	t.Run("watch", func(t *testing.T) {
		rec := proxied(t, p, m, http.MethodGet, vms+"?watch=true", "", "")
		if rec.Code != http.StatusOK {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		sc := bufio.NewScanner(rec.Body)
		var events []metav1.WatchEvent
		for sc.Scan() {
			var ev metav1.WatchEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("%q: %v", sc.Bytes(), err)
			}
			events = append(events, ev)
		}
		if len(events) != 2 || events[0].Type != "ADDED" || !bytes.Contains(events[0].Object.Raw, []byte(`"kind":"VM"`)) || events[1].Type != "ERROR" {
			t.Fatalf("events %s", rec.Body)
		}
		var s metav1.Status
		if err := json.Unmarshal(events[1].Object.Raw, &s); err != nil || s.Code != http.StatusBadGateway || !strings.Contains(s.Message, `mount "renaming"`) || !strings.Contains(s.Message, "10000") {
			t.Fatalf("ERROR event %s: %v", events[1].Object.Raw, err)
		}
	})
	t.Run("bodies", func(t *testing.T) {
		deep := strings.Repeat("[", 3<<20-100)
		for _, ct := range []string{"application/json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json", "application/apply-patch+yaml"} {
			method := http.MethodPatch
			if ct == "application/json" {
				method = http.MethodPost
			}
			rec := proxied(t, p, m, method, vms, ct, `{"apiVersion":"example.com/v1","kind":"VM","spec":`+deep)
			if ct == "application/json-patch+json" {
				rec = proxied(t, p, m, method, vms, ct, deep)
			}
			wantStatus(t, rec, http.StatusBadRequest, `mount "renaming"`, "deeper than the 10000 levels")
		}
	})
	t.Run("budget", func(t *testing.T) {
		budget := rewrite.NewBudget(5<<19, 200*time.Millisecond) // 2.5 MiB
		p.RewriteBudget = budget
		defer func() { p.RewriteBudget = nil }()
		// A document of 1 MiB is served within the budget (twice its size while it is
		// read), and gives its share back.
		if rec := proxied(t, p, m, http.MethodGet, "/openapi/v2", "", ""); rec.Code != http.StatusOK {
			t.Fatalf("%d %.200s", rec.Code, rec.Body)
		}
		if n := budget.InUse(); n != 0 {
			t.Fatalf("%d bytes of the budget not given back", n)
		}
		// Another rewrite holds its document, whose answer is not read yet: no room, 503.
		rules, err := p.RewriteRules(m)
		if err != nil {
			t.Fatal(err)
		}
		q, _ := rules.Request(http.MethodGet, "/openapi/v2", nil)
		holder := q.WithBudget(context.Background(), budget).Response("application/json", strings.NewReader(`{"swagger":"2.0","definitions":{"a":{"description":"`+strings.Repeat("d", 1<<20)+`"}}}`))
		if _, err := holder.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		rec := proxied(t, p, m, http.MethodGet, "/openapi/v2", "", "")
		wantStatus(t, rec, http.StatusServiceUnavailable, `mount "renaming"`, "--rewrite-document-memory-budget")
		if rec.Header().Get("Retry-After") == "" {
			t.Fatal("no Retry-After")
		}
		_ = holder.(io.Closer).Close()
		if n := budget.InUse(); n != 0 {
			t.Fatalf("%d bytes of the budget not given back", n)
		}
		// A budget smaller than the document: 502, at once.
		p.RewriteBudget = rewrite.NewBudget(1<<20, time.Minute)
		wantStatus(t, proxied(t, p, m, http.MethodGet, "/openapi/v2", "", ""), http.StatusBadGateway, `mount "renaming"`, "budget of 1048576 bytes")
	})
}

// TestProtobufToJSONNested: protobuf bodies of built-in kinds carry JSON in bytes fields
// (managedFields' fieldsV1, a ControllerRevision's data) and may nest unknown groups: 3 MiB
// of nesting in either is refused (encoding/json checks raw JSON iteratively, 10000 levels;
// protobuf skips groups without recursion) with small stacks, and JSON within the bound
// becomes a body the rewriter then checks.
func TestProtobufToJSONNested(t *testing.T) {
	old := debug.SetMaxStack(16 << 20)
	t.Cleanup(func() { debug.SetMaxStack(old) })
	encode := func(obj runtime.Object) []byte {
		var buf bytes.Buffer
		if err := protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme).Encode(obj, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	deep := func(n int) []byte { return []byte(strings.Repeat("[", n) + strings.Repeat("]", n)) }
	cm := func(raw []byte) []byte {
		return encode(&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "a",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}}}}})
	}
	cr := func(raw []byte) []byte {
		return encode(&appsv1.ControllerRevision{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ControllerRevision"}, ObjectMeta: metav1.ObjectMeta{Name: "r"}, Data: runtime.RawExtension{Raw: raw}})
	}
	// An unknown field (15) of the ConfigMap holding 1.5 Mi nested groups.
	groups := append(bytes.Repeat([]byte{15<<3 | 3}, 1500<<10), bytes.Repeat([]byte{15<<3 | 4}, 1500<<10)...)
	unknownGroups := cm(nil)
	unknownGroups = append(unknownGroups[:len(unknownGroups):len(unknownGroups)], groups...)

	for name, body := range map[string][]byte{"fieldsV1": cm(deep(1500 << 10)), "controller revision": cr(deep(1500 << 10))} {
		if _, _, err := protobufToJSON(protobufMediaType, body); err == nil || !strings.Contains(err.Error(), "exceeded max depth") {
			t.Errorf("%s of 3 MiB of nesting: %v", name, err)
		}
	}
	if _, _, err := protobufToJSON(protobufMediaType, unknownGroups); err == nil {
		t.Log("unknown groups: decoded (skipped)")
	} else {
		t.Logf("unknown groups: %v", err)
	}
	r, err := rewrite.Compile(&mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{{Presented: "presented.io/", Target: "kubevirt.io/"}}})
	if err != nil {
		t.Fatal(err)
	}
	q, _ := r.Request(http.MethodPost, "/apis/apps/v1/namespaces/default/controllerrevisions", nil)
	for _, depth := range []int{rewrite.MaxDepth - 2, rewrite.MaxDepth} {
		data, ct, err := protobufToJSON(protobufMediaType, cr(deep(depth)))
		if err != nil {
			t.Fatalf("%d levels: %v", depth, err)
		}
		_, err = q.Body(ct, data)
		if (err != nil) != (depth+1 > rewrite.MaxDepth) {
			t.Fatalf("%d levels in data, %d in the body: %v", depth, depth+1, err)
		}
	}
}
