package kcp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// ClusterAnnotation names the logical cluster of an object, as kcp sets it on every object.
const ClusterAnnotation = "kcp.io/cluster"

// AuditAnnotationLogicalCluster is the audit annotation that names the logical cluster of a
// request under /clusters/<name>/ ("*" for all of them).
const AuditAnnotationLogicalCluster = "mounts.kcp.io/logical-cluster"

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
//
// A logical cluster is a tenant's: only what ServedInLogicalClusters allows is served there,
// everything else answers 404 before authentication. The rest of the server (a standalone
// server's own Secrets, metrics, debug handlers, the tunnel relay) belongs to the process and
// its default cluster; served under /clusters/<name>/ it would be authorized by kcp's RBAC of
// the caller's own workspace.
func WithClusterPaths(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		cluster, rest, ok, err := ParseClusterPath(req.URL.Path)
		if !ok {
			handler.ServeHTTP(w, req)
			return
		}
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		if !ServedInLogicalClusters(rest) {
			writeStatus(w, apierrors.NewGenericServerResponse(http.StatusNotFound, req.Method, schema.GroupResource{}, "",
				fmt.Sprintf("%s is not served in logical clusters: under /clusters/<name>/ this server serves only the %s API group, its discovery and OpenAPI", rest, mounts.GroupName), 0, false))
			return
		}
		// The audit event records the path without the prefix: the annotation says which
		// workspace the request was for (the generic chain's audit filter reuses this audit
		// context).
		ctx := audit.WithAuditContext(req.Context())
		audit.AddAuditAnnotation(ctx, AuditAnnotationLogicalCluster, string(cluster))
		out := req.WithContext(clusters.WithCluster(ctx, cluster))
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

// ServedInLogicalClusters reports whether path (below /clusters/<name>) is served in a logical
// cluster: the mounts.kcp.io group and its subresources, the group discovery that lists it
// (/apis; /api answers 404, which client-go's discovery takes as no legacy group), OpenAPI,
// /version, and the caller's reviews of itself (kubectl auth whoami and can-i: SelfReviews),
// which tell only what the caller may do there. A path whose dot segments would lead
// elsewhere is judged where it leads.
func ServedInLogicalClusters(p string) bool {
	return servedInLogicalClusters(p) && servedInLogicalClusters(path.Clean(p))
}

func servedInLogicalClusters(p string) bool {
	switch p {
	case "/apis", "/apis/", "/openapi/v2", "/openapi/v3", "/openapi/v3/", "/version", "/version/":
		return true
	}
	for _, prefix := range []string{"/apis/" + mounts.GroupName, "/openapi/v3/apis/" + mounts.GroupName} {
		if rest, ok := strings.CutPrefix(p, prefix); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
			return true
		}
	}
	// The self reviews, their groups' discovery and OpenAPI: nothing else of those groups.
	for _, r := range SelfReviews {
		group, version := "/apis/"+r.Group, "/apis/"+r.Group+"/"+r.Version
		switch strings.TrimSuffix(p, "/") {
		case group, version, version + "/" + r.Resource, "/openapi/v3" + version:
			return true
		}
	}
	return false
}

// SelfReviews are the resources of the caller's reviews of itself, served in logical
// clusters: authentication.k8s.io/v1 selfsubjectreviews and authorization.k8s.io/v1
// selfsubjectaccessreviews and selfsubjectrulesreviews. Nothing else of those groups is.
var SelfReviews = []schema.GroupVersionResource{
	{Group: "authentication.k8s.io", Version: "v1", Resource: "selfsubjectreviews"},
	{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectaccessreviews"},
	{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectrulesreviews"},
}

// ServedInLogicalClustersAttributes is ServedInLogicalClusters for an authorization request: a
// resource of the mounts.kcp.io group, or a non-resource path it allows.
func ServedInLogicalClustersAttributes(attrs authorizer.Attributes) bool {
	if attrs.IsResourceRequest() {
		return attrs.GetAPIGroup() == mounts.GroupName || attrs.GetSubresource() == "" && slices.ContainsFunc(SelfReviews, func(r schema.GroupVersionResource) bool {
			return attrs.GetAPIGroup() == r.Group && attrs.GetResource() == r.Resource
		})
	}
	return ServedInLogicalClusters(attrs.GetPath())
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
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
