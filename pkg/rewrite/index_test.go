package rewrite

import (
	"bufio"
	"bytes"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

// TestScannerIndex checks that the index the stream's scanner records while it reads a value
// is the walker's own index of that value.
func TestScannerIndex(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json*")
	if err != nil {
		t.Fatal(err)
	}
	docs := [][]byte{[]byte(`{"a":"{[\"}","b":[{},[],{"c":"]\\\\"}]}`), []byte(`[1,{"x":[2]}]`)}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Ext(f) == ".jsonl" {
			docs = append(docs, bytes.Split(bytes.TrimSpace(data), []byte("\n"))...)
		} else {
			docs = append(docs, data)
		}
	}
	for _, doc := range docs {
		// A small reader buffer, so that values span several chunks.
		s := &scanner{r: bufio.NewReaderSize(bytes.NewReader(doc), 16), max: maxValue, index: true}
		v, err := s.value(nil, 0)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		w := walker{b: v}
		want := w.index(nil)
		if len(s.match) != len(v) {
			t.Fatalf("index of %d bytes for a value of %d", len(s.match), len(v))
		}
		for i, c := range v {
			if (c == '{' || c == '[') && !insideString(v, i) && s.match[i] != want[i] {
				t.Fatalf("%s: the container at %d ends at %d, not %d", doc, i, s.match[i], want[i])
			}
		}
	}
}

// insideString reports whether offset i of valid JSON doc is inside a string.
func insideString(doc []byte, i int) bool {
	in := false
	for j := 0; j < i; j++ {
		switch doc[j] {
		case '\\':
			if in {
				j++
			}
		case '"':
			in = !in
		}
	}
	return in
}

// TestWatchEventsNotHeldBack sends a watch stream one event at a time, the next only once the
// previous one came out of the rewriter: a Read that waited for more than the events at hand
// would never return.
func TestWatchEventsNotHeldBack(t *testing.T) {
	r := kubevirtRules(t)
	q, err := r.Request("GET", "/apis/kubevirt.io/v1/virtualmachines", url.Values{"watch": {"true"}})
	if err != nil {
		t.Fatal(err)
	}
	events := bytes.Split(bytes.TrimSpace(sample(t, "watch.jsonl")), []byte("\n"))
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.Close() })
	out := q.Response("application/json", pr)
	buf := make([]byte, 1<<20)
	for i, ev := range events {
		go func() { _, _ = pw.Write(append(append([]byte(nil), ev...), '\n')) }()
		got := 0
		for got == 0 || buf[got-1] != '\n' {
			n, err := out.Read(buf[got:])
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			got += n
		}
		if bytes.Count(buf[:got], []byte("\n")) != 1 || !bytes.Contains(buf[:got], []byte(`"type"`)) {
			t.Fatalf("event %d came out as %q", i, buf[:got])
		}
	}
}
