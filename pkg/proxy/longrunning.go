package proxy

import (
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

var innerRequestInfo = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// longRunningSubresources stream for as long as the client wants.
var longRunningSubresources = sets.New("exec", "attach", "portforward", "proxy")

// IsLongRunning says whether a proxied request may outlive the request timeout: upgrades,
// watches, followed logs and nested proxies (pods/proxy, services/proxy) of the inner request.
// Everything else is bound by the timeout, so a hung target cannot hold a request forever.
func IsLongRunning(req *http.Request, innerPath string) bool {
	if httpstream.IsUpgradeRequest(req) {
		return true
	}
	if !mayBeLongRunning(innerPath, req.URL.RawQuery) {
		return false
	}
	inner := &http.Request{Method: req.Method, URL: &url.URL{Path: "/" + strings.TrimPrefix(innerPath, "/"), RawQuery: req.URL.RawQuery}}
	info, err := innerRequestInfo.NewRequestInfo(inner)
	if err != nil || !info.IsResourceRequest {
		return false
	}
	switch {
	case info.Verb == "watch":
		return true
	case longRunningSubresources.Has(info.Subresource):
		return true
	case info.Subresource == "log":
		follow := req.URL.Query().Get("follow")
		return follow == "true" || follow == "1"
	}
	return false
}

// longRunningWords are what a long-running inner request must contain: the verb watch (a path
// segment or a query parameter) or one of the subresources above or "log".
var longRunningWords = []string{"watch", "exec", "attach", "portforward", "proxy", "log"}

// mayBeLongRunning is false when the inner request cannot be long-running: neither its path nor
// its query contains any of longRunningWords, and the query has no escapes that could spell one.
// The server asks several times per request (max-in-flight, timeout, metrics); most requests
// are answered here, without resolving the inner request's info.
func mayBeLongRunning(innerPath, rawQuery string) bool {
	if strings.Contains(rawQuery, "%") {
		return true
	}
	for _, w := range longRunningWords {
		if strings.Contains(innerPath, w) || strings.Contains(rawQuery, w) {
			return true
		}
	}
	return false
}
