package dryrun

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

func TestEscapeRestore(t *testing.T) {
	for _, c := range []struct {
		name, in, escaped string
	}{
		{"empty", "", ""},
		{"none", "fieldManager=kubectl&limit=500", "fieldManager=kubectl&limit=500"},
		{"one", "dryRun=All&fieldManager=kubectl-client-side-apply&fieldValidation=Strict", Parameter + "=All&fieldManager=kubectl-client-side-apply&fieldValidation=Strict"},
		{"twice, no value, empty value", "dryRun=All&dryRun&dryRun=", Parameter + "=All&" + Parameter + "&" + Parameter + "="},
		{"encoded key", "dry%52un=All", Parameter + "=All"},
		{"value kept as sent", "a=%2F%20+&dryRun=All%20&b", "a=%2F%20+&" + Parameter + "=All%20&b"},
		{"bad escape elsewhere", "a=%zz&dryRun=All", "a=%zz&" + Parameter + "=All"},
		{"like, but not dryRun", "dryrun=All&xdryRun=All&dryRunx=1", "dryrun=All&xdryRun=All&dryRunx=1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Escape(c.in)
			if err != nil || got != c.escaped {
				t.Fatalf("Escape(%q) = %q, %v; want %q", c.in, got, err, c.escaped)
			}
			// What the connect handler checks: no dryRun left.
			if q, _ := url.ParseQuery(got); len(q[Name]) != 0 {
				t.Errorf("Escape(%q) = %q still has dryRun", c.in, got)
			}
			want := c.in
			if c.name == "encoded key" {
				want = "dryRun=All"
			}
			if back := Restore(got); back != want {
				t.Errorf("Restore(%q) = %q, want %q", got, back, want)
			}
		})
	}
}

func TestEscapeRefusesTheParameter(t *testing.T) {
	for _, q := range []string{
		Parameter + "=All",
		"a=1&" + Parameter,
		url.QueryEscape(Parameter) + "=All",
		"mount-proxy.kcp.io%2EdryRun=All",
	} {
		if got, err := Escape(q); err == nil {
			t.Errorf("Escape(%q) = %q, want an error", q, got)
		}
	}
}

func TestRestored(t *testing.T) {
	escaped, _ := Escape("dryRun=All&fieldManager=m")
	req := httptest.NewRequest(http.MethodPatch, "/apis/x?"+escaped, nil)
	got := Restored(req)
	if got.URL.RawQuery != "dryRun=All&fieldManager=m" || got.RequestURI != "/apis/x?dryRun=All&fieldManager=m" {
		t.Errorf("restored %q (%q)", got.URL.RawQuery, got.RequestURI)
	}
	if req.URL.RawQuery != escaped {
		t.Errorf("the original request changed: %q", req.URL.RawQuery)
	}
	if plain := httptest.NewRequest(http.MethodGet, "/x?a=b", nil); Restored(plain) != plain {
		t.Error("a request without the parameter was copied")
	}
}
