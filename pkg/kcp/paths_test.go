package kcp

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWithPathPrefix(t *testing.T) {
	var got string
	h := WithPathPrefix("/services/mounts/", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.URL.EscapedPath() }))
	for in, want := range map[string]string{
		"/services/mounts/clusters/abc/apis":     "/clusters/abc/apis",
		"/services/mounts":                       "/",
		"/services/mountsx/apis":                 "/services/mountsx/apis",
		"/apis/mounts.kcp.io":                    "/apis/mounts.kcp.io",
		"/services/mounts/clusters/a/x%2Fy/path": "/clusters/a/x%2Fy/path",
	} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, in, nil))
		if got != want {
			t.Errorf("%s: served as %s, want %s", in, got, want)
		}
	}
}
