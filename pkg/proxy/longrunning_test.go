package proxy

import (
	"net/http"
	"net/url"
	"testing"
)

func TestIsLongRunning(t *testing.T) {
	for _, tc := range []struct {
		method, inner, query string
		want                 bool
	}{
		{"GET", "api/v1/namespaces/default", "", false},
		{"GET", "api/v1/pods", "limit=500", false},
		{"GET", "api/v1/pods", "watch=true", true},
		{"GET", "api/v1/pods", "watch=1&resourceVersion=5", true},
		{"GET", "api/v1/pods", "watch=false", false},
		{"GET", "api/v1/pods", "%77atch=true", true},
		{"GET", "api/v1/watch/pods", "", true},
		{"GET", "apis/apps/v1/watch/namespaces/x/deployments", "", true},
		{"GET", "api/v1/namespaces/x/pods/p/log", "follow=true", true},
		{"GET", "api/v1/namespaces/x/pods/p/log", "follow=1", true},
		{"GET", "api/v1/namespaces/x/pods/p/log", "", false},
		{"GET", "api/v1/namespaces/x/pods/p/log", "f%6Fllow=true", true},
		{"POST", "api/v1/namespaces/x/pods/p/exec", "command=ls", true},
		{"POST", "api/v1/namespaces/x/pods/p/attach", "", true},
		{"POST", "api/v1/namespaces/x/pods/p/portforward", "", true},
		{"GET", "api/v1/namespaces/x/services/s/proxy/metrics", "", true},
		{"GET", "api/v1/namespaces/logs/configmaps/watcher", "", false},
		{"GET", "healthz", "watch=true", false},
	} {
		req := &http.Request{Method: tc.method, URL: &url.URL{Path: "/ignored", RawQuery: tc.query}, Header: http.Header{}}
		if got := IsLongRunning(req, tc.inner); got != tc.want {
			t.Errorf("IsLongRunning(%s %s?%s) = %v, want %v", tc.method, tc.inner, tc.query, got, tc.want)
		}
		// The shortcut never says "no" where the full resolution says "yes".
		if tc.want && !mayBeLongRunning(tc.inner, tc.query) {
			t.Errorf("mayBeLongRunning(%s?%s) = false for a long-running request", tc.inner, tc.query)
		}
	}
}
