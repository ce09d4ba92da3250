package apiserver

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/dryrun"
)

// fanOutName is the mount name of requests to all mounts at once, which only read.
const fanOutName = "*"

// carryDryRun wraps a handler chain builder so that a caller's dryRun reaches the target of
// mounts/<name>/proxy: the connect handler refuses the parameter on every CONNECT subresource,
// and server-side dry run and kubectl diff failed through every mount. Innermost, after the
// request info, audit and authorization saw the request as the caller sent it; the proxy
// restores the parameter (pkg/dryrun). A caller may not send the private parameter itself.
// Requests to mounts/*/proxy only read: their dryRun is refused as before.
func carryDryRun(build func(http.Handler, *genericapiserver.Config) http.Handler) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		return build(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			info, ok := genericapirequest.RequestInfoFrom(r.Context())
			if !ok || !isMountProxy(info) || info.Name == fanOutName || r.URL.RawQuery == "" {
				apiHandler.ServeHTTP(w, r)
				return
			}
			escaped, err := dryrun.Escape(r.URL.RawQuery)
			if err != nil {
				responsewriters.ErrorNegotiated(apierrors.NewBadRequest(err.Error()), Codecs, v1alpha1.SchemeGroupVersion, w, r)
				return
			}
			if escaped != r.URL.RawQuery {
				out := *r
				u := *r.URL
				u.RawQuery = escaped
				out.URL = &u
				out.RequestURI = u.RequestURI()
				r = &out
			}
			apiHandler.ServeHTTP(w, r)
		}), c)
	}
}
