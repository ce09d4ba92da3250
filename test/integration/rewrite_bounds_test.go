package integration

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// boundsHub is mount-apiserver as a process of its own (so that /metrics counts only its
// memory), with renaming mounts of the targets the test gives it, and a caller speaking HTTP/2.
type boundsHub struct {
	p       *framework.Process
	scraper *framework.Scraper
	client  *http.Client
}

func startBoundsHub(t *testing.T, args ...string) *boundsHub {
	t.Helper()
	p := framework.BuildBinary(t).Start(t, t.TempDir(), append([]string{"--status-controller=false"}, args...)...)
	scraper, err := framework.NewScraper(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := rest.TLSConfigFor(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}, Timeout: 2 * time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	return &boundsHub{p: p, scraper: scraper, client: client}
}

// renamingMount creates a renaming mount (renamingMountSpec) of the cluster kubeconfig names,
// with the mount's own credentials.
func (h *boundsHub) renamingMount(ctx context.Context, t *testing.T, name string, kubeconfig []byte) {
	t.Helper()
	core, err := kubernetes.NewForConfig(h.p.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := urlMount(name)
	m.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
	m.Spec.Rewrites = renamingMountSpec()
	if _, err := h.p.Client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// do sends a request through mount's proxy and returns the answer's code, headers and body.
func (h *boundsHub) do(ctx context.Context, method, mount, path, contentType string, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, h.p.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/"+mount+"/proxy"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}

// expectStatus wants a metav1.Status of code whose message holds each of words.
func expectBoundStatus(t *testing.T, what string, code int, body []byte, wantCode int, words ...string) {
	t.Helper()
	var s metav1.Status
	if err := json.Unmarshal(body, &s); err != nil || s.Kind != "Status" {
		t.Errorf("%s: %d %.300q, want a Status", what, code, body)
		return
	}
	if code != wantCode || int(s.Code) != wantCode {
		t.Errorf("%s: %d %s, want %d", what, code, s.Message, wantCode)
	}
	for _, w := range words {
		if !strings.Contains(s.Message, w) {
			t.Errorf("%s: message %q does not say %q", what, s.Message, w)
		}
	}
}

// alive fails the test if the hub has exited (a fatal error is no panic: nothing recovers it).
func (h *boundsHub) alive(t *testing.T) {
	t.Helper()
	select {
	case <-h.p.Exited():
		t.Fatalf("the hub died: %v", h.p.ExitErr())
	default:
	}
}

// peakRSS samples the hub's RSS every 50 ms while f runs and returns the largest.
func (h *boundsHub) peakRSS(t *testing.T, f func()) int64 {
	t.Helper()
	var peak atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if fig, err := h.scraper.Figures(); err == nil && fig.RSS > peak.Load() {
				peak.Store(fig.RSS)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	if fig, err := h.scraper.Figures(); err == nil && fig.RSS > peak.Load() {
		peak.Store(fig.RSS)
	}
	return peak.Load()
}

func (h *boundsHub) rss(t *testing.T) int64 {
	t.Helper()
	fig, err := h.scraper.Figures()
	if err != nil {
		t.Fatal(err)
	}
	return fig.RSS
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// gzipped returns parts, concatenated, gzipped.
func gzipped(t *testing.T, parts ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	gz, err := gzip.NewWriterLevel(&b, gzip.DefaultCompression)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if _, err := io.WriteString(gz, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeGzipped(w http.ResponseWriter, data []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Encoding", "gzip")
	_, _ = w.Write(data)
}

// TestRenamingMountHostileNesting is issue #23's item 2: a tenant's target answers through a
// renaming mount with 48 MiB of '[' (49 KB gzipped), in an object, as /apis, as /openapi/v2,
// in a List's item and in a watch event. Before, gjson's recursive validator overflowed the
// goroutine stack, a fatal error: the hub died and every tenant lost it. Now each is a 502
// Status naming the mount and the depth bound (the watch ends with an ERROR event carrying
// it), and a renaming mount of a real kube-apiserver keeps answering.
func TestRenamingMountHostileNesting(t *testing.T) {
	ctx := context.Background()
	kube, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	h := startBoundsHub(t)

	brackets := strings.Repeat("[", 48<<20)
	vm := `{"apiVersion":"x.virtualization.example.org/v1","kind":"PrefixedVirtualMachine","metadata":{"name":"vm","namespace":"default"},"spec":`
	// The object closes its brackets (24 Mi levels): what the object's rewrite validated.
	object := gzipped(t, vm, brackets[:24<<20], strings.Repeat("]", 24<<20), "}")
	bare := gzipped(t, brackets)
	list := gzipped(t, `{"apiVersion":"x.virtualization.example.org/v1","kind":"PrefixedVirtualMachineList","metadata":{"resourceVersion":"1"},"items":[`, vm, brackets)
	openapi := gzipped(t, `{"swagger":"2.0","definitions":{"a":`, brackets)
	t.Logf("48 MiB of '[' gzipped: %d bytes", len(bare))
	const vms = "/apis/x.virtualization.example.org/v1/namespaces/default/prefixedvirtualmachines"
	hostile := startHostileHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == vms+"/vm":
			writeGzipped(w, object)
		case r.URL.Path == vms && r.URL.Query().Get("watch") == "true":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"type":"ADDED","object":{"apiVersion":"x.virtualization.example.org/v1","kind":"PrefixedVirtualMachine","metadata":{"name":"ok"}}}`+"\n")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, `{"type":"MODIFIED","object":`+vm+brackets[:1<<20])
		case r.URL.Path == vms:
			writeGzipped(w, list)
		case r.URL.Path == "/apis":
			writeGzipped(w, bare)
		case r.URL.Path == "/openapi/v2":
			writeGzipped(w, openapi)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}`)
		}
	})
	healthyKubeconfig, err := framework.KubeconfigBytes(kube.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	h.renamingMount(ctx, t, "healthy", healthyKubeconfig)
	h.renamingMount(ctx, t, "hostile", hostile.kubeconfig(t))
	healthy := func() {
		t.Helper()
		for _, path := range []string{"/apis", "/api/v1/namespaces/default/configmaps", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"} {
			code, _, body, err := h.do(ctx, http.MethodGet, "healthy", path, "", nil)
			// The CRD is not installed: its resources are 404, as the target says.
			if err != nil || (code != http.StatusOK && !(code == http.StatusNotFound && strings.Contains(path, "virtualmachines"))) {
				t.Fatalf("healthy mount, GET %s: %d %.200s %v", path, code, body, err)
			}
		}
	}
	healthy()
	baseline := h.rss(t)

	const presented = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
	for _, c := range []struct{ what, path string }{
		{"object", presented + "/vm"},
		{"discovery", "/apis"},
		{"OpenAPI v2", "/openapi/v2"},
		{"list", presented},
	} {
		code, _, body, err := h.do(ctx, http.MethodGet, "hostile", c.path, "", nil)
		h.alive(t)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if c.path == "/apis" {
			// A discovery root's failure is text: the only form kubectl's discovery prints.
			if code != http.StatusBadGateway || !strings.Contains(string(body), "mount 'hostile'") || !strings.Contains(string(body), "deeper than the 10000 levels") {
				t.Errorf("%s: %d %.300q, want 502 naming the mount and the depth", c.what, code, body)
			}
			continue
		}
		expectBoundStatus(t, c.what, code, body, http.StatusBadGateway, `mount "hostile"`, "deeper than the 10000 levels")
	}

	code, _, body, err := h.do(ctx, http.MethodGet, "hostile", presented+"?watch=true", "", nil)
	h.alive(t)
	if err != nil || code != http.StatusOK {
		t.Fatalf("watch: %d %.300s %v", code, body, err)
	}
	var events []metav1.WatchEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var ev metav1.WatchEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("watch: %.200q: %v", sc.Bytes(), err)
		}
		events = append(events, ev)
	}
	if len(events) != 2 || events[0].Type != "ADDED" || events[1].Type != "ERROR" {
		t.Fatalf("watch: %.500s", body)
	}
	expectBoundStatus(t, "watch's ERROR event", http.StatusBadGateway, events[1].Object.Raw, http.StatusBadGateway, `mount "hostile"`, "deeper than the 10000 levels")

	healthy()
	if _, err := h.p.Client.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the hub's own API: %v", err)
	}
	t.Logf("RSS: baseline %.1f MiB, after the hostile answers %.1f MiB", mib(baseline), mib(h.rss(t)))
}

// nestedBody is a body of size bytes whose value nests arrays: an object of the renamed kind
// (or a JSON patch, which is an array) with '[' to the end.
func nestedBody(contentType string, size int) []byte {
	if contentType == "application/json-patch+json" {
		return bytes.Repeat([]byte("["), size)
	}
	head := []byte(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"vm"},"spec":`)
	return append(head, bytes.Repeat([]byte("["), size-len(head))...)
}

// TestRenamingMountNestedBodies is issue #23's item 3: six callers at once send 3 MiB bodies
// of nested arrays (the most a renaming mount reads) through a renaming mount, in every
// content type a body of a renamed resource takes. Before, gjson's recursive validator grew
// each request's stack by hundreds of MiB (RSS from 103 to 1,745 MiB); now each is a 400
// naming the depth bound, and RSS barely moves.
func TestRenamingMountNestedBodies(t *testing.T) {
	ctx := context.Background()
	h := startBoundsHub(t)
	var reached atomic.Int64
	target := startHostileHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		// A body that reaches the target was not refused.
		if r.Method != http.MethodGet {
			reached.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"apiVersion":"x.virtualization.example.org/v1","kind":"PrefixedVirtualMachineList","metadata":{},"items":[]}`)
	})
	h.renamingMount(ctx, t, "renamer", target.kubeconfig(t))
	const vms = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines"
	if code, _, body, err := h.do(ctx, http.MethodGet, "renamer", vms, "", nil); err != nil || code != http.StatusOK {
		t.Fatalf("warm-up: %d %s %v", code, body, err)
	}
	// A small body of each kind first, so that what the first use sets up is no load.
	for _, ct := range []string{"application/json", "application/merge-patch+json"} {
		_, _, _, _ = h.do(ctx, http.MethodPatch, "renamer", vms+"/vm", ct, nestedBody(ct, 20000))
	}
	baseline := h.rss(t)

	const size = 3 * 1024 * 1024
	requests := []struct{ method, contentType string }{
		{http.MethodPost, "application/json"},
		{http.MethodPut, "application/json"},
		{http.MethodPatch, "application/merge-patch+json"},
		{http.MethodPatch, "application/strategic-merge-patch+json"},
		{http.MethodPatch, "application/json-patch+json"},
		{http.MethodPatch, "application/apply-patch+yaml"},
	}
	bodies := make([][]byte, len(requests))
	for i, r := range requests {
		bodies[i] = nestedBody(r.contentType, size)
	}
	var mu sync.Mutex
	var failures []string
	peak := h.peakRSS(t, func() {
		for range 3 {
			var wg sync.WaitGroup
			for i, r := range requests {
				wg.Go(func() {
					path := vms
					if r.method != http.MethodPost {
						path += "/vm"
					}
					code, _, body, err := h.do(ctx, r.method, "renamer", path, r.contentType, bodies[i])
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failures = append(failures, fmt.Sprintf("%s %s: %v", r.method, r.contentType, err))
						return
					}
					var s metav1.Status
					if json.Unmarshal(body, &s) != nil || code != http.StatusBadRequest || !strings.Contains(s.Message, "deeper than the 10000 levels") || !strings.Contains(s.Message, `mount "renamer"`) {
						failures = append(failures, fmt.Sprintf("%s %s: %d %.300s, want a 400 naming the depth bound", r.method, r.contentType, code, body))
					}
				})
			}
			wg.Wait()
		}
	})
	h.alive(t)
	for _, f := range failures {
		t.Error(f)
	}
	if n := reached.Load(); n > 0 {
		t.Errorf("%d nested bodies reached the target", n)
	}
	t.Logf("RSS: baseline %.1f MiB, peak %.1f MiB (+%.1f MiB) over 3 rounds of 6 concurrent 3 MiB nested bodies", mib(baseline), mib(peak), mib(peak-baseline))
	if rise := peak - baseline; rise > 128<<20 {
		t.Errorf("RSS rose by %.1f MiB, want far less than the 1.6 GiB of issue #23", mib(rise))
	}
}

// openAPIDocument returns an OpenAPI v2 document of about size bytes in the target's names:
// definitions of the renamed group's kinds and of others, with descriptions, and their paths.
func openAPIDocument(size int) []string {
	var parts []string
	var b strings.Builder
	b.WriteString(`{"swagger":"2.0","info":{"title":"Kubernetes","version":"v1.37.1"},"paths":{`)
	b.WriteString(`"/apis/x.virtualization.example.org/v1/namespaces/{namespace}/prefixedvirtualmachines/{name}":{"get":{"description":"read the specified PrefixedVirtualMachine","operationId":"readPrefixedVirtualMachine","responses":{"200":{"schema":{"$ref":"#/definitions/org.example.virtualization.x.v1.PrefixedVirtualMachine"}}}}}`)
	b.WriteString(`},"definitions":{`)
	b.WriteString(`"org.example.virtualization.x.v1.PrefixedVirtualMachine":{"description":"A machine.","type":"object","x-kubernetes-group-version-kind":[{"group":"x.virtualization.example.org","kind":"PrefixedVirtualMachine","version":"v1"}]}`)
	parts = append(parts, b.String())
	desc := strings.Repeat("Free text of a field, as CRDs carry plenty. ", 40)
	total := b.Len()
	for i := 0; total < size; i++ {
		def := fmt.Sprintf(`,"com.example.v1.Thing%d":{"description":%q,"type":"object","properties":{"spec":{"type":"object","description":%q},"status":{"$ref":"#/definitions/com.example.v1.Thing%dStatus"}},"x-kubernetes-group-version-kind":[{"group":"example.com","kind":"Thing%d","version":"v1"}]}`, i, desc, desc, i, i)
		parts = append(parts, def)
		total += len(def)
	}
	return append(parts, `}}`)
}

// TestRenamingMountHugeOpenAPI is issue #23's item 7: a tenant's target serves /openapi/v2 of
// 230 MiB (gzipped to a few hundred KiB) through a renaming mount. Before, the rewrite read it
// whole and made several copies (RSS up to +1.8 GiB per request, and nothing bounded several
// at once). Now documents above 64 MiB are refused (502 naming the bound) after at most that
// much is read; a large document within the bound (48 MiB) is rewritten holding about twice
// its size; and six at once share the server's budget (--rewrite-document-memory-budget):
// each is answered, or told to retry (503, Retry-After).
func TestRenamingMountHugeOpenAPI(t *testing.T) {
	ctx := context.Background()
	h := startBoundsHub(t)
	huge := gzipped(t, openAPIDocument(230<<20)...)
	bigParts := openAPIDocument(48 << 20)
	big := gzipped(t, bigParts...)
	t.Logf("documents gzipped: 230 MiB to %d KiB, 48 MiB to %d KiB", len(huge)>>10, len(big)>>10)
	serve := func(doc []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/openapi/v2" {
				writeGzipped(w, doc)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"kind":"APIVersions","versions":["v1"]}`)
		}
	}
	h.renamingMount(ctx, t, "huge", startHostileHTTP(t, serve(huge)).kubeconfig(t))
	h.renamingMount(ctx, t, "big", startHostileHTTP(t, serve(big)).kubeconfig(t))
	for _, m := range []string{"huge", "big"} {
		if code, _, body, err := h.do(ctx, http.MethodGet, m, "/api", "", nil); err != nil || code != http.StatusOK {
			t.Fatalf("warm-up %s: %d %s %v", m, code, body, err)
		}
	}

	baseline := h.rss(t)
	var code int
	var body []byte
	peak := h.peakRSS(t, func() {
		var err error
		code, _, body, err = h.do(ctx, http.MethodGet, "huge", "/openapi/v2", "", nil)
		if err != nil {
			t.Errorf("huge: %v", err)
		}
	})
	h.alive(t)
	t.Logf("one GET of a 230 MiB /openapi/v2: RSS baseline %.1f MiB, peak %.1f MiB (+%.1f MiB)", mib(baseline), mib(peak), mib(peak-baseline))
	expectBoundStatus(t, "huge", code, body, http.StatusBadGateway, `mount "huge"`, "67108864 bytes")
	if rise := peak - baseline; rise > 256<<20 {
		t.Errorf("RSS rose by %.1f MiB for one document", mib(rise))
	}
	if t.Failed() {
		return // what follows multiplies it: not on a shared machine
	}

	baseline = h.rss(t)
	peak = h.peakRSS(t, func() {
		code, _, body, _ = h.do(ctx, http.MethodGet, "big", "/openapi/v2", "", nil)
	})
	t.Logf("one GET of a 48 MiB /openapi/v2: RSS baseline %.1f MiB, peak %.1f MiB (+%.1f MiB), answer %.1f MiB", mib(baseline), mib(peak), mib(peak-baseline), mib(int64(len(body))))
	if code != http.StatusOK || !json.Valid(body) || !bytes.Contains(body, []byte(`"group":"kubevirt.io","kind":"VirtualMachine"`)) || bytes.Contains(body, []byte("x.virtualization.example.org")) {
		t.Fatalf("big: %d %.300s", code, body)
	}
	if rise := peak - baseline; rise > 256<<20 {
		t.Errorf("RSS rose by %.1f MiB for one 48 MiB document", mib(rise))
	}

	baseline = h.rss(t)
	var ok, busy atomic.Int64
	peak = h.peakRSS(t, func() {
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				code, header, body, err := h.do(ctx, http.MethodGet, "big", "/openapi/v2", "", nil)
				switch {
				case err != nil:
					t.Errorf("big, concurrent: %v", err)
				case code == http.StatusOK:
					ok.Add(1)
				case code == http.StatusServiceUnavailable && header.Get("Retry-After") != "":
					busy.Add(1)
					expectBoundStatus(t, "busy", code, body, http.StatusServiceUnavailable, `mount "big"`, "--rewrite-document-memory-budget")
				default:
					t.Errorf("big, concurrent: %d %.300s", code, body)
				}
			})
		}
		wg.Wait()
	})
	h.alive(t)
	t.Logf("six GETs at once of a 48 MiB /openapi/v2: %d answered, %d told to retry; RSS baseline %.1f MiB, peak %.1f MiB (+%.1f MiB)", ok.Load(), busy.Load(), mib(baseline), mib(peak), mib(peak-baseline))
	if ok.Load() == 0 {
		t.Error("none was answered")
	}
	// The budget (256 MiB) bounds what the documents hold; the rest is buffers and garbage.
	if rise := peak - baseline; rise > 512<<20 {
		t.Errorf("RSS rose by %.1f MiB for six documents at once", mib(rise))
	}
}
