package record

import (
	"testing"
)

func TestPathRoundTrip(t *testing.T) {
	for _, h := range []Hook{
		{Cluster: "_default", Mount: "vm", UID: "7c8b40d9", Kind: Validating, Config: "vm-policy", Webhook: "cpus.vms.example.com", Token: "abc_-"},
		{Cluster: "root:org", Mount: "m", UID: "u", Kind: Mutating, Config: "a", Webhook: "w/with/slashes?and#more", Token: "t"},
	} {
		got, err := ParsePath(h.Path())
		if err != nil || got != h {
			t.Errorf("ParsePath(%q) = %+v, %v; want %+v", h.Path(), got, err, h)
		}
	}
	for _, bad := range []string{"", "/", "/a/b/c/d/e/f", "/a/b/c/other/e/f/g", "/a/b/c/validating/e/f/g/h", "/a//c/validating/e/f/g", "/a/b/c/validating/e/f/%zz"} {
		if h, err := ParsePath(bad); err == nil {
			t.Errorf("ParsePath(%q) = %+v, want an error", bad, h)
		}
	}
}

func TestParseRecord(t *testing.T) {
	if _, err := ParseRecord(nil); err == nil {
		t.Error("no annotation parsed")
	}
	for _, bad := range []string{"", "{", `{"webhooks":{}}`, `{"token":""}`, `[]`} {
		if r, err := ParseRecord(map[string]string{Annotation: bad}); err == nil {
			t.Errorf("record %q parsed: %+v", bad, r)
		}
	}
	r, err := ParseRecord(map[string]string{Annotation: `{"token":"t","webhooks":{"w":{"url":"https://x/y"}}}`})
	if err != nil || r.Token != "t" || *r.Webhooks["w"].URL != "https://x/y" {
		t.Errorf("record: %+v, %v", r, err)
	}
	a, _ := NewToken()
	b, _ := NewToken()
	if a == b || len(a) < 40 {
		t.Errorf("tokens %q, %q", a, b)
	}
}
