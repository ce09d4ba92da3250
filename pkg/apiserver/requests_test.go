package apiserver

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcp-dev/mount-apiserver/pkg/fanout"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
)

// TestLongRunningFanOut: a watch through mounts/*/proxy, in the labels form too, is
// long-running; a list is not.
func TestLongRunningFanOut(t *testing.T) {
	resolver := &genericapirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	check := LongRunning()
	for path, want := range map[string]bool{
		"/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/api/v1/pods?watch=true":                          true,
		"/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/labels/env=prod/api/v1/watch/pods":               true,
		"/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/labels/example.com/env=prod/api/v1/pods?watch=1": true,
		"/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/labels/env=prod/api/v1/pods":                     false,
		"/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/api/v1/pods":                                     false,
	} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		info, err := resolver.NewRequestInfo(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := check(req, info); got != want {
			t.Errorf("%s: long-running %v, want %v", path, got, want)
		}
	}
}

// TestHopsHeaderAgrees: the fan-out refuses requests that passed a mount proxy by the header
// the proxy counts in.
func TestHopsHeaderAgrees(t *testing.T) {
	if fanout.HopsHeader != proxy.HopsHeader {
		t.Errorf("fanout.HopsHeader %q, proxy.HopsHeader %q", fanout.HopsHeader, proxy.HopsHeader)
	}
}
