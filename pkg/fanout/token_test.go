package fanout

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestPositions: a composite resourceVersion gives back what it was made of; member
// resourceVersions need not be numbers.
func TestPositions(t *testing.T) {
	p := Positions{"prod-eu": "123456789", "prod-us": "9", "dev": "opaque/rv-1", "prod-eu-2": "0012"}
	rv := EncodePositions(p)
	if !IsComposite(rv) {
		t.Fatalf("%q is not composite", rv)
	}
	got, err := DecodePositions(rv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Errorf("got %v, want %v", got, p)
	}
	empty, err := DecodePositions(EncodePositions(Positions{}))
	if err != nil || len(empty) != 0 {
		t.Errorf("empty: %v %v", empty, err)
	}
	// 100 mounts cost about 10 bytes each.
	many := Positions{}
	for i := range 100 {
		many[fmt.Sprintf("fanout-bench-%03d", i)] = fmt.Sprint(1_000_000 + i*37)
	}
	if n := len(EncodePositions(many)); n > 1500 {
		t.Errorf("100 members take %d bytes", n)
	}
}

// TestPositionsRefused: what this server did not issue is refused, never a panic.
func TestPositionsRefused(t *testing.T) {
	for _, rv := range []string{"", "0", "123", "m1.", "m1.!!!", "m1." + strings.Repeat("A", 100), "m1.AAEC", "m1./w"} {
		if _, err := DecodePositions(rv); err == nil && rv != "m1." {
			t.Errorf("%q decoded", rv)
		}
	}
	// Names out of order.
	raw := appendComposite(nil, []string{"b", "a"}, func(int) string { return "1" })
	if _, err := DecodePositions(string(raw)); err == nil {
		t.Error("names out of order decoded")
	}
}

// FuzzPositions: any string decodes or is refused, never a panic.
func FuzzPositions(f *testing.F) {
	f.Add(EncodePositions(Positions{"a": "1", "b": "x"}))
	f.Add("m1.AAEC")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := DecodePositions(s)
		if err != nil {
			return
		}
		if again, err := DecodePositions(EncodePositions(p)); err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("%q: %v did not survive a round trip: %v %v", s, p, again, err)
		}
	})
}

// TestContinueToken: a token survives a round trip; a changed or cut one is refused.
func TestContinueToken(t *testing.T) {
	tok := &continueToken{Query: "q", Members: []string{"a", "b", "c"}, RVs: []string{"1", "", "3"}, Failed: []int{1}, Position: 2, Continue: "member-token", Kind: "PodList", APIVersion: "v1"}
	s, err := encodeContinue(tok)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeContinue(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, tok) {
		t.Errorf("got %+v, want %+v", got, tok)
	}
	for i := len(continuePrefix); i < len(s); i++ {
		c := byte('A')
		if s[i] == 'A' {
			c = 'B'
		}
		changed := s[:i] + string(c) + s[i+1:]
		if _, err := decodeContinue(changed); err == nil {
			t.Errorf("changing byte %d: accepted", i)
		}
	}
	if _, err := decodeContinue(s[:len(s)-3]); err == nil {
		t.Error("a cut token was accepted")
	}
	for _, bad := range []*continueToken{
		{Members: []string{"b", "a"}, RVs: []string{"", ""}},
		{Members: []string{"a", "a"}, RVs: []string{"", ""}},
		{Members: []string{"a"}, RVs: []string{}},
		{Members: []string{"a"}, RVs: []string{""}, Position: 2},
		{Members: []string{"a"}, RVs: []string{""}, Failed: []int{5}},
	} {
		s, _ := encodeContinue(bad)
		if _, err := decodeContinue(s); err == nil {
			t.Errorf("%+v was accepted", bad)
		}
	}
}
