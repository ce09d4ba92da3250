package fanout

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// TestScannerValues: values are read whole, whatever brackets and quotes their strings hold,
// and a stream may end between them.
func TestScannerValues(t *testing.T) {
	in := ` {"a":"x}]\"{","b":[1,{"c":"]"}]}  "str\\\"ing" 12.5e3 true null [] {}`
	want := []string{`{"a":"x}]\"{","b":[1,{"c":"]"}]}`, `"str\\\"ing"`, `12.5e3`, `true`, `null`, `[]`, `{}`}
	sc := newScanner(strings.NewReader(in))
	for _, w := range want {
		v, err := sc.value()
		if err != nil {
			t.Fatalf("value: %v", err)
		}
		if string(v) != w {
			t.Errorf("got %s, want %s", v, w)
		}
	}
	if _, err := sc.peek(); err != io.EOF {
		t.Errorf("after the last value: %v, want EOF", err)
	}
}

// TestScannerBounds: a value larger than the bound, nested deeper than the bound, cut short
// or no JSON at all is an error, never a panic or unbounded memory.
func TestScannerBounds(t *testing.T) {
	for name, c := range map[string]struct {
		in  string
		max int
		err error
	}{
		"too large":   {in: `"` + strings.Repeat("x", 1000) + `"`, max: 100, err: errTooLarge},
		"too deep":    {in: strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), max: 1 << 20, err: errMalformed},
		"cut short":   {in: `{"a":[1,2`, max: 1 << 20, err: io.ErrUnexpectedEOF},
		"bad literal": {in: `tru`, max: 1 << 20, err: errMalformed},
		"long number": {in: strings.Repeat("1", 100), max: 1 << 20, err: errMalformed},
	} {
		t.Run(name, func(t *testing.T) {
			sc := newScanner(strings.NewReader(c.in))
			sc.max = c.max
			if _, err := sc.value(); !errors.Is(err, c.err) {
				t.Errorf("got %v, want %v", err, c.err)
			}
		})
	}
}

// TestListReader reads a list as kube-apiserver writes it, and a Table.
func TestListReader(t *testing.T) {
	l, err := newListReader(strings.NewReader(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"abc"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var items []string
	for {
		it, err := l.next()
		if err != nil {
			t.Fatal(err)
		}
		if it == nil {
			break
		}
		items = append(items, string(it))
	}
	if l.kind != "ConfigMapList" || l.apiVersion != "v1" || l.rv != "42" || l.cont != "abc" || len(items) != 2 || l.table {
		t.Errorf("got %+v with items %v", l, items)
	}

	l, err = newListReader(strings.NewReader(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7"},"columnDefinitions":[{"name":"Name"},{"name":"Age"}],"rows":[{"cells":["a","1s"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	row, err := l.next()
	if err != nil || string(row) != `{"cells":["a","1s"]}` {
		t.Fatalf("row %s, %v", row, err)
	}
	if end, err := l.next(); end != nil || err != nil {
		t.Fatalf("after the last row: %s, %v", end, err)
	}
	if !l.table || !reflect.DeepEqual(l.columnNames, []string{"Name", "Age"}) || l.rv != "7" {
		t.Errorf("got %+v", l)
	}

	for name, in := range map[string]string{
		"items before kind":    `{"items":[{}],"kind":"X"}`,
		"rows before columns":  `{"kind":"Table","rows":[{"cells":[]}],"columnDefinitions":[]}`,
		"two arrays of items":  `{"kind":"X","items":[{}],"items":[{}]}`,
		"not an object":        `[1,2]`,
		"metadata not objects": `{"kind":"X","metadata":"no","items":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			l, err := newListReader(strings.NewReader(in))
			for err == nil {
				var it []byte
				if it, err = l.next(); it == nil && err == nil {
					break
				}
			}
			if err == nil {
				t.Errorf("%s: no error", in)
			}
		})
	}

	l, err = newListReader(strings.NewReader(`{"kind":"X","items":null,"metadata":{"resourceVersion":"1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if it, err := l.next(); it != nil || err != nil || l.rv != "1" {
		t.Errorf("items null: %s %v %+v", it, err, l)
	}
}

// TestFieldsDecodeKeys: a key spelled with escapes is the key it means.
func TestFieldsDecodeKeys(t *testing.T) {
	obj := []byte(`{"a":1, "m\u0065tadata" : {"x":[1,"}"]} ,"z":"\"}"}`)
	fs, err := objectFields(obj, nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, f := range fs {
		keys = append(keys, f.key+"="+string(obj[f.start:f.end]))
	}
	want := []string{`a=1`, `metadata={"x":[1,"}"]}`, `z="\"}"`}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("got %q, want %q", keys, want)
	}
	if !json.Valid(obj) {
		t.Fatal("test input invalid")
	}
}
