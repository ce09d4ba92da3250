package yamlbound

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// bomb is YAML of about big + n*6 bytes that stands for n copies of a string of big bytes.
func bomb(big, n int) []byte {
	var b strings.Builder
	b.WriteString("a: &a " + strings.Repeat("z", big) + "\nb: [")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "*a")
	}
	b.WriteString("]\n")
	return []byte(b.String())
}

func TestCheck(t *testing.T) {
	// What Check prevents: 100 KiB of YAML that is 100 MiB of JSON.
	y := bomb(100<<10, 1000)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := Check(y, 1<<20)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrExpands) || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("%v, want ErrExpands", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Fatalf("Check allocated %d MiB", alloc>>20)
	}
	// Nested anchors are counted as they expand (three levels of nine: the decoder itself
	// refuses a fourth as excessive aliasing).
	laughs := "a: &a [" + strings.Repeat("lol,", 8) + "lol]\nb: &b [" + strings.Repeat("*a,", 8) + "*a]\nc: &c [" + strings.Repeat("*b,", 8) + "*b]\n"
	if err := Check([]byte(laughs), 2<<10); !errors.Is(err, ErrExpands) {
		t.Fatalf("laughs: %v", err)
	}
	if err := Check([]byte(laughs), 8<<10); err != nil {
		t.Fatalf("laughs within the bound: %v", err)
	}

	// Within the bound, with or without aliases, and what does not parse: nil.
	for _, ok := range []string{
		"a: 1\nb: [x, y]\n",
		"labels: &l {app: x}\nselector: *l\n",
		"text: '*not an alias*'\n",
		"a: [\n",
		string(bomb(1000, 10)),
	} {
		if err := Check([]byte(ok), 1<<20); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	// The estimate is the JSON's size, for plain strings.
	j, err := yaml.YAMLToJSON(bomb(1000, 10))
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(bomb(1000, 10), len(j)-1); err == nil {
		t.Fatalf("JSON of %d bytes passed a bound of %d", len(j), len(j)-1)
	}
	if err := Check(bomb(1000, 10), len(j)); err != nil {
		t.Fatalf("JSON of %d bytes: %v", len(j), err)
	}
}

// FuzzCheck: what Check passes converts to JSON of at most the bound.
func FuzzCheck(f *testing.F) {
	f.Add([]byte("a: &a xyz\nb: [*a, *a, *a]\n"), uint16(20))
	f.Add([]byte("a: &a {k: v}\nb: {<<: *a, c: *a}\n"), uint16(40))
	f.Fuzz(func(t *testing.T, y []byte, limit uint16) {
		if len(y) > 4096 {
			return
		}
		if Check(y, int(limit)) != nil {
			return
		}
		if !strings.Contains(string(y), "*") {
			return // not measured
		}
		j, err := yaml.YAMLToJSON(y)
		if err == nil && len(j) > 2*int(limit)+64 {
			t.Fatalf("%q passed a bound of %d: %d bytes of JSON", y, limit, len(j))
		}
	})
}
