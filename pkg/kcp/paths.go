package kcp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// ClusterAnnotation names the logical cluster of an object, as kcp sets it on every object.
const ClusterAnnotation = "kcp.io/cluster"

// clusterNameRE matches kcp's logical cluster names (e.g. "2x7kq3n1", "root"): workspace
// paths such as root:org:team are resolved to names by kcp before it forwards a request.
var clusterNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ParseClusterPath splits /clusters/<name>[/<rest>] into the cluster and /<rest>. ok is false
// for a path outside /clusters/; err says why a /clusters/ path is unusable.
func ParseClusterPath(path string) (cluster clusters.Name, rest string, ok bool, err error) {
	after, found := strings.CutPrefix(path, "/clusters/")
	if !found {
		return "", path, false, nil
	}
	name, rest, _ := strings.Cut(after, "/")
	rest = "/" + rest
	switch {
	case name == string(clusters.Wildcard):
	case clusterNameRE.MatchString(name):
	default:
		return "", "", true, fmt.Errorf("%q is not a logical cluster name: lower-case alphanumerics and '-', at most 63, or * for all clusters (a workspace path like root:org is resolved to its logical cluster by kcp)", name)
	}
	return clusters.Name(name), rest, true, nil
}

// WithClusterPaths serves /clusters/<name>/<rest> as /<rest> in the context of logical cluster
// <name>. It goes in front of the whole handler chain, so that request info, authorization,
// discovery and OpenAPI all see the path without the prefix, as they do in kcp. Other paths
// keep the default cluster.
func WithClusterPaths(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		cluster, rest, ok, err := ParseClusterPath(req.URL.Path)
		if !ok {
			handler.ServeHTTP(w, req)
			return
		}
		if err != nil {
			status := apierrors.NewBadRequest(err.Error()).Status()
			status.Kind, status.APIVersion = "Status", "v1"
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(status)
			return
		}
		out := req.WithContext(clusters.WithCluster(req.Context(), cluster))
		u := *req.URL
		u.Path, u.RawPath = rest, ""
		// Keep the escaping the client chose below the prefix (the proxy refuses encoded
		// slashes by looking at it).
		if _, rawRest, _, _ := ParseClusterPath(req.URL.EscapedPath()); rawRest != rest {
			u.RawPath = rawRest
		}
		out.URL = &u
		out.RequestURI = u.RequestURI()
		handler.ServeHTTP(w, out)
	})
}

// WithPathPrefix also serves every path below prefix (e.g. /services/mounts, where a kcp
// front-proxy mapping forwards the full original path) as the path without it. An empty
// prefix serves as handler does.
func WithPathPrefix(prefix string, handler http.Handler) http.Handler {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rest, ok := strings.CutPrefix(req.URL.Path, prefix)
		if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
			handler.ServeHTTP(w, req)
			return
		}
		out := req.Clone(req.Context())
		out.URL.Path = "/" + strings.TrimPrefix(rest, "/")
		out.URL.RawPath = ""
		if rawRest, ok := strings.CutPrefix(req.URL.EscapedPath(), prefix); ok && rawRest != "" && rawRest != out.URL.Path {
			out.URL.RawPath = rawRest
		}
		out.RequestURI = out.URL.RequestURI()
		handler.ServeHTTP(w, out)
	})
}

// ClusterOf returns the logical cluster of a stored object: its kcp.io/cluster annotation,
// the default cluster without one.
func ClusterOf(obj metav1.Object) clusters.Name {
	if c := obj.GetAnnotations()[ClusterAnnotation]; c != "" {
		return clusters.Name(c)
	}
	return clusters.DefaultCluster
}
