package rewrite

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"runtime"
	"strings"
	"testing"
)

// listStream generates a List of the target's objects lazily: header, n items, trailer
// (kind after the items, as kube-apiserver writes unstructured lists).
type listStream struct {
	item   []byte
	n, i   int
	buf    []byte
	off    int
	closed bool
}

func newListStream(item []byte, n int) *listStream {
	return &listStream{item: item, n: n, buf: []byte(`{"apiVersion":"x.virtualization.deckhouse.io/v1","items":[`)}
}

func (l *listStream) Read(p []byte) (int, error) {
	for l.off == len(l.buf) {
		l.buf, l.off = l.buf[:0], 0
		switch {
		case l.i < l.n:
			if l.i > 0 {
				l.buf = append(l.buf, ',')
			}
			l.buf = append(l.buf, l.item...)
			l.i++
		case !l.closed:
			l.buf = append(l.buf, `],"kind":"PrefixedVirtualMachineList","metadata":{"resourceVersion":"1"}}`...)
			l.closed = true
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, l.buf[l.off:])
	l.off += n
	return n, nil
}

func compact(t testing.TB, data []byte) []byte {
	var b bytes.Buffer
	if err := jsonCompact(&b, data); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestLargeListMemory streams a List of about 100 MB through the rewriter and checks that the
// heap stays far below its size.
func TestLargeListMemory(t *testing.T) {
	r := kubevirtRules(t)
	item := compact(t, sample(t, "object.json"))
	n := (100 << 20) / len(item)
	q, err := r.Request("GET", "/apis/kubevirt.io/v1/virtualmachines", nil)
	if err != nil {
		t.Fatal(err)
	}
	out := q.Response("application/json", newListStream(item, n))
	var peak uint64
	var ms runtime.MemStats
	buf := make([]byte, 32<<10)
	total, reads := 0, 0
	for {
		k, err := out.Read(buf)
		total += k
		if reads++; reads%2000 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Presented names are shorter than the target's: 100 MB in are about 89 MB out.
	if total < 80<<20 {
		t.Fatalf("%d bytes out", total)
	}
	if peak > 48<<20 {
		t.Fatalf("heap in use reached %d MB while %d MB streamed", peak>>20, total>>20)
	}
	t.Logf("%d items, %d MB out, peak heap in use %d MB", n, total>>20, peak>>20)
}

func benchList(b *testing.B, path string, item []byte, size int) {
	r := kubevirtRules(b)
	n := size / len(item)
	q, err := r.Request("GET", path, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(n * len(item)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := io.Copy(io.Discard, q.Response("application/json", newListStream(item, n))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList10MB rewrites a 10 MB List of renamed objects.
func BenchmarkList10MB(b *testing.B) {
	benchList(b, "/apis/kubevirt.io/v1/virtualmachines", compact(b, sample(b, "object.json")), 10<<20)
}

// BenchmarkList10MBBaseline copies the same List untouched (a mount without rewrites).
func BenchmarkList10MBBaseline(b *testing.B) {
	item := compact(b, sample(b, "object.json"))
	n := (10 << 20) / len(item)
	b.SetBytes(int64(n * len(item)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := io.Copy(io.Discard, newListStream(item, n)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList10MBOtherGroup rewrites a 10 MB List of objects that mention no renamed name
// (ConfigMaps through a renaming mount): the cost of looking.
func BenchmarkList10MBOtherGroup(b *testing.B) {
	cm := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"default","uid":"5b0d6a3e-1","resourceVersion":"1","labels":{"app":"web"}},"data":{"key":"` + strings.Repeat("v", 900) + `"}}`)
	benchList(b, "/api/v1/configmaps", cm, 10<<20)
}

// BenchmarkWatch10000 rewrites a watch stream of 10,000 events.
func BenchmarkWatch10000(b *testing.B) {
	r := kubevirtRules(b)
	lines := bytes.Split(bytes.TrimSpace(sample(b, "watch.jsonl")), []byte("\n"))
	var stream []byte
	for i := 0; i < 10000; i++ {
		stream = append(append(stream, lines[i%len(lines)]...), '\n')
	}
	q, err := r.Request("GET", "/apis/kubevirt.io/v1/virtualmachines", url.Values{"watch": {"true"}})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := io.Copy(io.Discard, q.Response("application/json", bytes.NewReader(stream))); err != nil {
			b.Fatal(err)
		}
	}
}

func jsonCompact(dst *bytes.Buffer, src []byte) error { return json.Compact(dst, src) }
