package proxy

import (
	"net/http"
	"reflect"
	"testing"
)

func TestScrubHeaders(t *testing.T) {
	caller := func() http.Header {
		return http.Header{
			"Connection":                  {"Upgrade, Impersonate-User, X-Custom", "keep-alive"},
			"Upgrade":                     {"websocket"},
			"Impersonate-User":            {"system:admin"},
			"Impersonate-Group":           {"system:masters"},
			"X-Remote-User":               {"system:admin"},
			"X-Kcp-Mount-Hops":            {"1"},
			"X-Kcp-Virtual-Resource-Hops": {"1"},
			"X-Custom":                    {"named in Connection"},
			"Keep-Alive":                  {"timeout=5"},
			"Proxy-Connection":            {"keep-alive"},
			"Te":                          {"trailers"},
			"Trailer":                     {"X-Checksum"},
			"Transfer-Encoding":           {"chunked"},
			"Authorization":               {"Bearer caller"},
			"Proxy-Authorization":         {"Basic c2VjcmV0"},
			"Cookie":                      {"session=1"},
			"Sec-Websocket-Protocol":      {"v5.channel.k8s.io"},
			"Accept":                      {"application/json"},
		}
	}

	h := caller()
	scrubHeaders(h, true)
	want := http.Header{
		"Connection":             {"Upgrade"},
		"Upgrade":                {"websocket"},
		"Sec-Websocket-Protocol": {"v5.channel.k8s.io"},
		"Accept":                 {"application/json"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("upgrade headers after scrubbing:\n%v\nwant\n%v", h, want)
	}

	h = caller()
	scrubHeaders(h, false)
	delete(want, "Connection")
	delete(want, "Upgrade")
	if !reflect.DeepEqual(h, want) {
		t.Errorf("plain headers after scrubbing:\n%v\nwant\n%v", h, want)
	}
}

func TestHops(t *testing.T) {
	for _, c := range []struct {
		values []string
		want   int
		ok     bool
	}{
		{nil, 0, true},
		{[]string{"0"}, 0, true},
		{[]string{"2"}, 2, true},
		{[]string{"-1"}, 0, false},
		{[]string{"x"}, 0, false},
		{[]string{"1", "1"}, 0, false},
		{[]string{"99999999999999999999"}, 0, false},
	} {
		h := http.Header{}
		for _, v := range c.values {
			h.Add(HopsHeader, v)
		}
		got, err := hops(h)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("hops(%q) = %d, %v; want %d, ok %v", c.values, got, err, c.want, c.ok)
		}
	}
}
