package fanout

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// configMapList is a list as kube-apiserver writes it: n ConfigMaps of about 400 bytes.
func configMapList(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"123456"},"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"metadata":{"name":"cm-%06d","namespace":"bench","uid":"4f7c2d1e-0000-4000-8000-%012d","resourceVersion":"%d","creationTimestamp":"2026-11-26T08:00:00Z","labels":{"app":"bench"},"managedFields":[{"manager":"bench","operation":"Update","apiVersion":"v1","time":"2026-11-26T08:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:data":{}},"f:metadata":{"f:labels":{".":{},"f:app":{}}}}}]},"data":{"data":"%s"}}`, i, i, 1000+i, strings.Repeat("x", 100))
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// BenchmarkEditList: a member's list read and every item edited, as a fan-out LIST does;
// "indexed" is the path lists take (the scanner validates and indexes each item once),
// "scanned" validates and scans each item again (encoding/json's validator, then the editor's
// scan), as before.
func BenchmarkEditList(b *testing.B) {
	data := configMapList(10000)
	for _, indexed := range []bool{true, false} {
		name := map[bool]string{true: "indexed", false: "scanned"}[indexed]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			out := make([]byte, 0, len(data)+len(data)/4)
			for b.Loop() {
				l, err := newListReader(bytes.NewReader(data))
				if err != nil {
					b.Fatal(err)
				}
				ed := &editor{mount: "bench-042"}
				out = out[:0]
				for {
					item, idx, err := l.next()
					if err != nil {
						b.Fatal(err)
					}
					if item == nil {
						break
					}
					if indexed {
						out, _, err = ed.item(out, item, idx, false)
					} else {
						out, _, err = ed.object(out, item, false)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/item")
		})
	}
}
