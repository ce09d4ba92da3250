package apiserver

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/fanout"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
)

func isMountProxy(info *genericapirequest.RequestInfo) bool {
	return info != nil && info.IsResourceRequest && info.APIGroup == mounts.GroupName && info.Resource == "mounts" && info.Subresource == "proxy"
}

// LongRunning decides which requests the request timeout spares: watches as usual, agents'
// sessions on mounts/attach (they last as long as the agent is connected), and for
// mounts/proxy whatever is long-running on the target (watch, follow, upgrades, nested
// proxies). Other proxied requests are
// bound by the timeout like any other request.
func LongRunning() genericapirequest.LongRunningRequestCheck {
	basic := genericfilters.BasicLongRunningRequestCheck(sets.NewString("watch"), sets.NewString("attach"))
	return func(r *http.Request, info *genericapirequest.RequestInfo) bool {
		if isMountProxy(info) {
			// Parts: mounts, <name>, proxy, <inner path...>
			inner := ""
			if len(info.Parts) > 3 {
				inner = strings.Join(info.Parts[3:], "/")
			}
			if info.Name == fanout.Name {
				// mounts/*/proxy/labels/<selector>/<path>: the members are asked <path>.
				inner = fanout.KubePath(inner)
			}
			return proxy.IsLongRunning(r, inner)
		}
		return basic(r, info)
	}
}

// proxyOptionsResolver authorizes OPTIONS on mounts/proxy as "get": the generic resolver gives
// OPTIONS no verb, which no RBAC rule but "*" matches.
type proxyOptionsResolver struct {
	genericapirequest.RequestInfoResolver
}

// NewRequestInfoResolver wraps the generic resolver.
func NewRequestInfoResolver(delegate genericapirequest.RequestInfoResolver) genericapirequest.RequestInfoResolver {
	return proxyOptionsResolver{delegate}
}

func (r proxyOptionsResolver) NewRequestInfo(req *http.Request) (*genericapirequest.RequestInfo, error) {
	info, err := r.RequestInfoResolver.NewRequestInfo(req)
	if err == nil && req.Method == http.MethodOptions && isMountProxy(info) {
		info.Verb = "get"
	}
	return info, err
}
