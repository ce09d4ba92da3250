package fanout

import (
	"bytes"
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
		"bad literal": {in: `[tru]`, max: 1 << 20, err: errMalformed},
		"bad number":  {in: `[01]`, max: 1 << 20, err: errMalformed},
		"bad escape":  {in: `["\x"]`, max: 1 << 20, err: errMalformed},
		"bad unicode": {in: `["\u12g4"]`, max: 1 << 20, err: errMalformed},
		"control":     {in: "[\"a\x01\"]", max: 1 << 20, err: errMalformed},
		"no colon":    {in: `{"a" 1}`, max: 1 << 20, err: errMalformed},
		"two commas":  {in: `[1,,2]`, max: 1 << 20, err: errMalformed},
		"trailing":    {in: `{"a":1,}`, max: 1 << 20, err: errMalformed},
		"key no str":  {in: `{a:1}`, max: 1 << 20, err: errMalformed},
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

// FuzzScannerAgreesWithEncodingJSON: a value is accepted exactly when encoding/json finds it
// valid, and the members it records are those objectFields finds.
func FuzzScannerAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,"x",{"b":[true,false,null]}]`, `{"m\u0065ta":{"n":"a\"b"},"x":-1.5e+3}`, `"s"`, `12`, `tru`, `{"a":}`, `[01]`, `{"a":{"b":{"c":{"d":1}}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := newScanner(bytes.NewReader(data))
		sc.index = true
		v, err := sc.value()
		rest := io.ErrUnexpectedEOF
		if err == nil {
			_, rest = sc.peek()
		}
		ours := err == nil && rest == io.EOF
		if want := json.Valid(data); ours != want {
			t.Fatalf("%q: scanner %v (value %v, then %v), encoding/json %v", data, ours, err, rest, want)
		}
		if !ours || len(v) == 0 || v[0] != '{' {
			return
		}
		want, err := objectFields(v, nil)
		if err != nil {
			t.Fatalf("%q: objectFields: %v", v, err)
		}
		got := indexedFields(v, sc.members, 1, -1, 0, nil)
		if len(got) != len(want) {
			t.Fatalf("%q: indexed %d members, scanned %d", v, len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.key != w.key || g.keyStart != w.keyStart || g.start != w.start || g.end != w.end {
				t.Fatalf("%q: member %d indexed %+v, scanned %+v", v, i, g, w)
			}
			if v[g.start] == '{' {
				wantSub, _ := objectFields(v[g.start:g.end], nil)
				gotSub := indexedFields(v, sc.members, 2, g.idx, g.start, nil)
				if len(gotSub) != len(wantSub) {
					t.Fatalf("%q: member %d: indexed %d members, scanned %d", v, i, len(gotSub), len(wantSub))
				}
				for j := range gotSub {
					if gotSub[j].key != wantSub[j].key || gotSub[j].start != wantSub[j].start || gotSub[j].end != wantSub[j].end {
						t.Fatalf("%q: member %d.%d indexed %+v, scanned %+v", v, i, j, gotSub[j], wantSub[j])
					}
				}
			}
		}
	})
}

// TestListReader reads a list as kube-apiserver writes it, and a Table.
func TestListReader(t *testing.T) {
	l, err := newListReader(strings.NewReader(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"abc"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var items []string
	for {
		it, _, err := l.next()
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
	row, _, err := l.next()
	if err != nil || string(row) != `{"cells":["a","1s"]}` {
		t.Fatalf("row %s, %v", row, err)
	}
	if end, _, err := l.next(); end != nil || err != nil {
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
				if it, _, err = l.next(); it == nil && err == nil {
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
	if it, _, err := l.next(); it != nil || err != nil || l.rv != "1" {
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
