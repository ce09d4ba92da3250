package rewrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// nested returns n opening brackets of open (repeated), then inner, then the closing ones.
func nested(open string, n int, inner string) []byte {
	closing := map[string]string{"[": "]", `{"a":`: "}"}[open]
	return []byte(strings.Repeat(open, n) + inner + strings.Repeat(closing, n))
}

func TestCheckJSON(t *testing.T) {
	valid := []string{
		`{}`, `[]`, ` {"a" : [1, -2.5e+3, 0, -0.0E-1, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9"]} `,
		`"s"`, `0`, `1e5`, "\t\r\n[ ]\n", `{"a":{"b":{}}}`, "\"\xff invalid UTF-8 passes as in encoding/json\"",
	}
	for _, s := range valid {
		if err := CheckJSON([]byte(s)); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	invalid := []string{
		``, ` `, `{`, `[`, `]`, `{]`, `[}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{1:2}`,
		`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x10`, `NaN`, `tru`, `truex`, `nul`, `"abc`, "\"a\x01\"",
		`"\x"`, `"\u12"`, `"\u12g4"`, `1 2`, `{} {}`, `[1 2]`, `{"a":1 "b":2}`, `'a'`, "\xef\xbb\xbf{}",
	}
	for _, s := range invalid {
		err := CheckJSON([]byte(s))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%q: %v, want a SyntaxError", s, err)
		}
	}

	// The depth bound is encoding/json's: MaxDepth levels pass, one more does not.
	for _, open := range []string{"[", `{"a":`} {
		if err := CheckJSON(nested(open, MaxDepth, "1")); err != nil {
			t.Errorf("%s x %d: %v", open, MaxDepth, err)
		}
		if !json.Valid(nested(open, MaxDepth, "1")) {
			t.Errorf("encoding/json refuses %d levels", MaxDepth)
		}
		deep := nested(open, MaxDepth+1, "1")
		if err := CheckJSON(deep); !errors.Is(err, ErrTooDeep) {
			t.Errorf("%s x %d: %v, want ErrTooDeep", open, MaxDepth+1, err)
		}
		if json.Valid(deep) {
			t.Errorf("encoding/json takes %d levels", MaxDepth+1)
		}
	}
	// An outer depth counts.
	if err := checkJSON(nested("[", MaxDepth-2, "1"), 2); err != nil {
		t.Errorf("at the bound: %v", err)
	}
	if err := checkJSON(nested("[", MaxDepth-1, "1"), 2); !errors.Is(err, ErrTooDeep) {
		t.Errorf("beyond the bound: %v", err)
	}
	// The message names the bound and quotes no more than a byte of the input.
	err := CheckJSON(bytes.Repeat([]byte("["), 48<<20))
	if !errors.Is(err, ErrTooDeep) || !strings.Contains(err.Error(), "10000") {
		t.Fatalf("48 MiB of '[': %v", err)
	}
}

// TestCheckJSONAllocates nothing below 64 levels, and one byte per level beyond.
func TestCheckJSONAllocates(t *testing.T) {
	doc := sample(t, "openapi-v2.json")
	if n := testing.AllocsPerRun(10, func() { _ = CheckJSON(doc) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// FuzzCheckJSON: CheckJSON accepts exactly what encoding/json's Valid accepts (whose depth
// bound is MaxDepth too), and a refusal is a SyntaxError or ErrTooDeep.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `[[[[]]]]`, `"\u00e9"`, `-0.5e-7`, `{"a":1,}`, `[1,2`, "\"\\ud800\"", `truefalse`} {
		f.Add([]byte(s))
	}
	f.Add(sample(f, "object.json"))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := CheckJSON(data)
		if got, want := err == nil, json.Valid(data); got != want {
			t.Fatalf("CheckJSON(%q) = %v, encoding/json Valid = %v", data, err, want)
		}
		var se *SyntaxError
		if err != nil && !errors.As(err, &se) && !errors.Is(err, ErrTooDeep) {
			t.Fatalf("CheckJSON(%q) = %v", data, err)
		}
		if s := string(data); checkJSON(s, 0) == nil != (err == nil) {
			t.Fatalf("as a string: %v", checkJSON(s, 0))
		}
	})
}

// FuzzCheckJSONDepth: deep documents made of a fuzzed shape agree with encoding/json at the
// depth bound and around it.
func FuzzCheckJSONDepth(f *testing.F) {
	f.Add([]byte(`[{"a":`), uint16(MaxDepth), []byte(`1`))
	f.Add([]byte(`[`), uint16(MaxDepth+1), []byte(`[]`))
	f.Add([]byte(`{"a":[`), uint16(MaxDepth/2), []byte(`{}`))
	f.Fuzz(func(t *testing.T, unit []byte, n uint16, inner []byte) {
		if len(unit) == 0 || len(unit) > 16 {
			return
		}
		// Close what unit opened, in reverse order.
		var closing []byte
		for i := len(unit) - 1; i >= 0; i-- {
			switch unit[i] {
			case '[':
				closing = append(closing, ']')
			case '{':
				closing = append(closing, '}')
			}
		}
		doc := append(bytes.Repeat(unit, int(n)), inner...)
		doc = append(doc, bytes.Repeat(closing, int(n))...)
		err := CheckJSON(doc)
		if got, want := err == nil, json.Valid(doc); got != want {
			t.Fatalf("%q x %d + %q: CheckJSON %v, encoding/json Valid %v", unit, n, inner, err, want)
		}
	})
}

// BenchmarkCheckJSON compares CheckJSON with the validators it replaced (gjson's, recursive)
// and with encoding/json's, on the OpenAPI sample and on one object
// (go test -bench CheckJSON -run XXX ./pkg/rewrite).
func BenchmarkCheckJSON(b *testing.B) {
	for _, doc := range []string{"openapi-v2.json", "object.json"} {
		data := sample(b, doc)
		for name, check := range map[string]func([]byte) bool{
			"CheckJSON":     func(d []byte) bool { return CheckJSON(d) == nil },
			"gjson":         gjson.ValidBytes,
			"encoding-json": json.Valid,
		} {
			b.Run(doc+"/"+name, func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if !check(data) {
						b.Fatal("invalid")
					}
				}
			})
		}
	}
}
