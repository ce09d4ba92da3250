package kcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
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

// TestWithClusterPathsServesOnlyMounts: a logical cluster is a tenant's, so only the mounts
// group, its discovery and OpenAPI are served there; the server's own Secrets, metrics, debug
// handlers and the tunnel relay answer 404 before any handler (or authorizer) sees them.
func TestWithClusterPathsServesOnlyMounts(t *testing.T) {
	var served string
	h := WithClusterPaths(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { served = r.URL.Path }))
	for in, want := range map[string]string{
		"/clusters/abc/apis":               "/apis",
		"/clusters/abc/apis/mounts.kcp.io": "/apis/mounts.kcp.io",
		"/clusters/abc/apis/mounts.kcp.io/v1alpha1/mounts/x/proxy/api/v1/secrets": "/apis/mounts.kcp.io/v1alpha1/mounts/x/proxy/api/v1/secrets",
		"/clusters/*/apis/mounts.kcp.io/v1alpha1/mounts":                          "/apis/mounts.kcp.io/v1alpha1/mounts",
		// The fan-out (pkg/fanout), and its labels form, in a workspace.
		"/clusters/abc/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/api/v1/pods":                   "/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/api/v1/pods",
		"/clusters/abc/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/labels/env=prod/apis/apps/v1":  "/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/labels/env=prod/apis/apps/v1",
		"/clusters/abc/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/../../../../../api/v1/secrets": "",
		"/clusters/abc/openapi/v2":                                               "/openapi/v2",
		"/clusters/abc/openapi/v3/apis/mounts.kcp.io/v1alpha1":                   "/openapi/v3/apis/mounts.kcp.io/v1alpha1",
		"/clusters/abc/version":                                                  "/version",
		"/clusters/abc/api":                                                      "",
		"/clusters/abc/api/v1/secrets":                                           "",
		"/clusters/abc/api/v1/namespaces/prod/secrets/kubeconfig":                "",
		"/clusters/*/api/v1/secrets":                                             "",
		"/clusters/abc/metrics":                                                  "",
		"/clusters/abc/debug/pprof/heap":                                         "",
		"/clusters/abc/debug/flags/v":                                            "",
		"/clusters/abc/tunnel-relay":                                             "",
		"/clusters/abc/healthz":                                                  "",
		"/clusters/abc/apis/mounts.kcp.io.evil/v1":                               "",
		"/clusters/abc/apis/mounts.kcp.io/../../api/v1/secrets":                  "",
		"/clusters/abc/apis/apps/v1/deployments":                                 "",
		"/clusters/abc/openapi/v3/api/v1":                                        "",
		"/clusters/abc/apis/authentication.k8s.io/v1/selfsubjectreviews":         "/apis/authentication.k8s.io/v1/selfsubjectreviews",
		"/clusters/abc/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
		"/clusters/abc/apis/authorization.k8s.io/v1/selfsubjectrulesreviews":     "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
		"/clusters/abc/apis/authorization.k8s.io/v1":                             "/apis/authorization.k8s.io/v1",
		"/clusters/abc/apis/authentication.k8s.io":                               "/apis/authentication.k8s.io",
		"/clusters/abc/openapi/v3/apis/authorization.k8s.io/v1":                  "/openapi/v3/apis/authorization.k8s.io/v1",
		"/clusters/abc/apis/authorization.k8s.io/v1/subjectaccessreviews":        "",
		"/clusters/abc/apis/authentication.k8s.io/v1/tokenreviews":               "",
		"/clusters/abc/apis/authorization.k8s.io/v1/selfsubjectrulesreviews/x/y": "",
		"/clusters/abc/apis/events.k8s.io/v1/events":                             "",
		"/clusters/abc/api/v1/events":                                            "",
	} {
		served = ""
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, in, nil))
		if served != want {
			t.Errorf("%s: served as %q, want %q", in, served, want)
		}
		if want == "" && (rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"kind":"Status"`)) {
			t.Errorf("%s: %d %s, want a 404 Status", in, rec.Code, rec.Body.String())
		}
	}
	// The default cluster is not the mapping's to judge.
	served = ""
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/api/v1/secrets", nil))
	if served != "/api/v1/secrets" {
		t.Errorf("default cluster: served as %q", served)
	}
}

func TestClusterAuthorizerOnlyMountsInLogicalClusters(t *testing.T) {
	allow := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	a := ClusterAuthorizer{Delegate: allow, AdminGroups: []string{"admins"}}
	ctx := clusters.WithCluster(context.Background(), "abc")
	for _, tc := range []struct {
		attrs authorizer.AttributesRecord
		want  authorizer.Decision
	}{
		{authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "admin", Groups: []string{"admins"}}, Verb: "get", APIGroup: "mounts.kcp.io", Resource: "mounts", ResourceRequest: true}, authorizer.DecisionAllow},
		{authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "admin", Groups: []string{"admins"}}, Verb: "get", Resource: "secrets", ResourceRequest: true}, authorizer.DecisionDeny},
		{authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "admin", Groups: []string{"admins"}}, Verb: "get", Path: "/metrics"}, authorizer.DecisionDeny},
		{authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "admin", Groups: []string{"admins"}}, Verb: "get", Path: "/apis"}, authorizer.DecisionAllow},
		{authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "admin", Groups: []string{"admins"}}, Verb: "create", APIGroup: "authorization.k8s.io", Resource: "selfsubjectaccessreviews", ResourceRequest: true}, authorizer.DecisionAllow},
		{authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "admin", Groups: []string{"admins"}}, Verb: "create", APIGroup: "authorization.k8s.io", Resource: "subjectaccessreviews", ResourceRequest: true}, authorizer.DecisionDeny},
		{authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "admin", Groups: []string{"admins"}}, Verb: "list", APIGroup: "events.k8s.io", Resource: "events", ResourceRequest: true}, authorizer.DecisionDeny},
		{authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "admin", Groups: []string{"admins"}}, Verb: "list", Resource: "events", ResourceRequest: true}, authorizer.DecisionDeny},
	} {
		if got, reason, _ := a.Authorize(ctx, tc.attrs); got != tc.want {
			t.Errorf("%s %s%s: %v (%s), want %v", tc.attrs.Verb, tc.attrs.Resource, tc.attrs.Path, got, reason, tc.want)
		}
	}
}
