package proxy

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	corev1alpha1 "github.com/kcp-dev/sdk/apis/core/v1alpha1"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
)

func TestRedirectLocation(t *testing.T) {
	for _, c := range []struct {
		workspaceURL, inner, want string
		badURL, badPath           bool
	}{
		{workspaceURL: "https://kcp.example:6443/clusters/root:org:team", inner: "api/v1/namespaces", want: "https://kcp.example:6443/clusters/root:org:team/api/v1/namespaces"},
		{workspaceURL: "https://kcp.example/clusters/root:org:team/", inner: "/apis/", want: "https://kcp.example/clusters/root:org:team/apis/"},
		{workspaceURL: "https://kcp.example/clusters/root:org:team", inner: "", want: "https://kcp.example/clusters/root:org:team/"},
		// The published URL's own query and fragment are not kept; the request's query is
		// added per request.
		{workspaceURL: "https://kcp.example/clusters/root:a?x=1#f", inner: "api", want: "https://kcp.example/clusters/root:a/api"},
		// A literal '%' is data and is encoded again.
		{workspaceURL: "https://kcp.example/clusters/root:a", inner: "api/v1/namespaces/d/configmaps/50%", want: "https://kcp.example/clusters/root:a/api/v1/namespaces/d/configmaps/50%25"},
		{workspaceURL: "https://kcp.example/clusters/root:a", inner: "../root:b/api", badPath: true},
		{workspaceURL: "https://kcp.example/clusters/root:a", inner: "%2e%2e/root:b", badPath: true},
		{workspaceURL: "https://kcp.example/clusters/root:a", inner: "api%2F..%2F..%2Froot:b", badPath: true},
		{workspaceURL: "", inner: "api", badURL: true},
		{workspaceURL: "http://kcp.example/clusters/root:a", inner: "api", badURL: true},
		{workspaceURL: "https://user:pw@kcp.example/clusters/root:a", inner: "api", badURL: true},
		{workspaceURL: "/clusters/root:a", inner: "api", badURL: true},
		{workspaceURL: "https://kcp.example/%zz", inner: "api", badURL: true},
	} {
		got, err := RedirectLocation(c.workspaceURL, c.inner)
		var bad *badWorkspaceURLError
		switch {
		case c.badURL && !(err != nil && errorsAs(err, &bad)):
			t.Errorf("RedirectLocation(%q, %q) = %v, %v; want a bad workspace URL", c.workspaceURL, c.inner, got, err)
		case c.badPath && (err == nil || errorsAs(err, &bad)):
			t.Errorf("RedirectLocation(%q, %q) = %v, %v; want a refused path", c.workspaceURL, c.inner, got, err)
		case !c.badURL && !c.badPath && (err != nil || got.String() != c.want):
			t.Errorf("RedirectLocation(%q, %q) = %v, %v; want %s", c.workspaceURL, c.inner, got, err, c.want)
		}
	}
}

func errorsAs(err error, target **badWorkspaceURLError) bool {
	b, ok := err.(*badWorkspaceURLError)
	if ok {
		*target = b
	}
	return ok
}

// TestWorkspaceEscapes: a Workspace mount's requests stay inside /clusters/<its workspace>:
// /clusters/a/../b, and its encoded forms, would reach another workspace with the
// provider's credentials.
func TestWorkspaceEscapes(t *testing.T) {
	for _, inner := range []string{"../b", "../b/api", "/../b", "api/../../b", "..", "%2e%2e/b", "%2E%2E/b", ".%2e/b", "..%2fb", "..%2Fb", "api%2f..%2f..%2fb", "..\\b", "%5c..%5cb", "api/%00/../../b"} {
		if got, err := JoinPath("/clusters/a", inner); err == nil {
			t.Errorf("JoinPath(/clusters/a, %q) = %q, want refused", inner, got)
		}
	}
	// Double encoding is data: one decoding at kcp leaves a literal segment under the base.
	got, err := JoinPath("/clusters/a", "%252e%252e/b")
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "https", Host: "kcp.example", Path: got}
	decoded, err := url.PathUnescape(u.EscapedPath())
	if err != nil || !strings.HasPrefix(decoded, "/clusters/a/") || strings.Contains(decoded, "/../") {
		t.Errorf("double-encoded dots: %s decodes to %q (%v)", u.String(), decoded, err)
	}
}

func TestImpersonationInKcp(t *testing.T) {
	m := &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: mounts.MountSpec{Identity: mounts.MountIdentity{Mode: mounts.IdentityModeImpersonate}}}
	noIdentity := &user.DefaultInfo{Name: kcp.ForwardedWithoutIdentityUser, Groups: []string{kcp.AuthorizedByKcpGroup, user.AllAuthenticated}}
	if _, err := impersonation(m, noIdentity); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "kcp v0.32.3") {
		t.Errorf("impersonating a request kcp forwarded without its caller: %v", err)
	}
	// Mount credentials need nobody to impersonate.
	lending := m.DeepCopy()
	lending.Spec.Identity.Mode = mounts.IdentityModeMountCredentials
	if imp, err := impersonation(lending, noIdentity); imp != nil || err != nil {
		t.Errorf("mount credentials for a request without identity: %v, %v", imp, err)
	}
	// This server's marker group is not sent to targets.
	imp, err := impersonation(m, &user.DefaultInfo{Name: "alice", Groups: []string{kcp.AuthorizedByKcpGroup, "team"}})
	if err != nil || imp.UserName != "alice" || strings.Join(imp.Groups, ",") != "team" {
		t.Errorf("impersonation of alice: %+v, %v", imp, err)
	}
}

// kcpStandIn answers as kcp's front-proxy does to the provider (its bearer token): Workspaces
// in their parent as JSON of the SDK's types, and records every other request.
type kcpStandIn struct {
	*httptest.Server
	mu         sync.Mutex
	workspaces map[string]*tenancyv1alpha1.Workspace // by path
	requests   []*http.Request
}

func startKcpStandIn(t *testing.T) *kcpStandIn {
	k := &kcpStandIn{workspaces: map[string]*tenancyv1alpha1.Workspace{}}
	k.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer provider" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		rest, isWorkspace := strings.CutPrefix(r.URL.Path, "/clusters/")
		parent, name, _ := strings.Cut(rest, "/apis/tenancy.kcp.io/v1alpha1/workspaces/")
		if ws, ok := k.workspaces[parent+":"+name]; isWorkspace && ok {
			_ = json.NewEncoder(w).Encode(ws)
			return
		}
		if isWorkspace && strings.Contains(rest, "/apis/tenancy.kcp.io/") {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(apierrors.NewNotFound(tenancyv1alpha1.Resource("workspaces"), name).Status())
			return
		}
		k.requests = append(k.requests, r.Clone(context.Background()))
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	}))
	t.Cleanup(k.Close)
	return k
}

func (k *kcpStandIn) add(path, cluster string, phase corev1alpha1.LogicalClusterPhaseType) {
	i := strings.LastIndex(path, ":")
	k.mu.Lock()
	defer k.mu.Unlock()
	k.workspaces[path] = &tenancyv1alpha1.Workspace{
		TypeMeta:   metav1.TypeMeta{Kind: "Workspace", APIVersion: "tenancy.kcp.io/v1alpha1"},
		ObjectMeta: metav1.ObjectMeta{Name: path[i+1:]},
		Spec:       tenancyv1alpha1.WorkspaceSpec{Cluster: cluster, URL: "https://front-proxy.example/clusters/" + path},
		Status:     tenancyv1alpha1.WorkspaceStatus{Phase: phase},
	}
}

func (k *kcpStandIn) recorded() []*http.Request {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*http.Request(nil), k.requests...)
}

func TestWorkspaceAndRedirectMounts(t *testing.T) {
	k := startKcpStandIn(t)
	k.add("root:org:team", "2x7kq3n1", corev1alpha1.LogicalClusterPhaseReady)
	k.add("root:org:young", "8f3kq1z0", corev1alpha1.LogicalClusterPhaseInitializing)
	kcpConfig := &rest.Config{Host: k.URL, BearerToken: "provider", TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.Certificate().Raw})}}
	resolver, err := kcp.NewWorkspaceResolver(kcpConfig, kcp.ResolverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxier{Transports: NewTransports(TransportOptions{}, nil), Workspaces: resolver, Kcp: kcpConfig}
	alice := &user.DefaultInfo{Name: "alice", UID: "a-1", Groups: []string{"team", user.AllAuthenticated}}
	ctx := genericapirequest.WithUser(context.Background(), alice)
	mount := func(name string, typ mounts.MountType, ref string, mode mounts.IdentityMode) *mounts.Mount {
		return &mounts.Mount{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
			Spec:       mounts.MountSpec{Type: typ, Ref: mounts.ObjectReference{Kind: "Workspace", APIVersion: "tenancy.kcp.io/v1alpha1", Name: ref}, Identity: mounts.MountIdentity{Mode: mode}},
		}
	}

	// Workspace: to <kcp>/clusters/<logical cluster>/<path> as the caller, with the
	// provider's credentials and none of the caller's.
	h, err := p.Handler(ctx, mount("ws", mounts.MountTypeWorkspace, "root:org:team", mounts.IdentityModeImpersonate), "api/v1/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/apis/mounts.kcp.io/v1alpha1/mounts/ws/proxy/api/v1/namespaces?limit=1", nil)
	req.Header.Set("Authorization", "Bearer caller")
	req.Header.Set("Impersonate-User", "system:admin")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("proxied request: %d %s", rec.Code, rec.Body)
	}
	got := k.recorded()
	if len(got) != 1 {
		t.Fatalf("kcp got %d requests, want 1", len(got))
	}
	r := got[0]
	if r.URL.Path != "/clusters/2x7kq3n1/api/v1/namespaces" || r.URL.RawQuery != "limit=1" {
		t.Errorf("kcp got %s", r.URL)
	}
	if r.Header.Get("Authorization") != "Bearer provider" || r.Header.Get("Impersonate-User") != "alice" || r.Header.Get("Impersonate-Uid") != "a-1" ||
		strings.Join(r.Header.Values("Impersonate-Group"), ",") != "team,"+user.AllAuthenticated {
		t.Errorf("kcp got headers %v", r.Header)
	}

	// Escapes into another workspace are refused before anything is sent.
	for _, inner := range []string{"../8f3kq1z0/api", "%2e%2e/8f3kq1z0", "api%2F..%2F..%2F8f3kq1z0"} {
		if _, err := p.Handler(ctx, mount("ws", mounts.MountTypeWorkspace, "root:org:team", mounts.IdentityModeImpersonate), inner); !apierrors.IsBadRequest(err) {
			t.Errorf("inner path %q: %v", inner, err)
		}
	}

	// Redirect: 307 to the workspace's URL plus the path and query.
	h, err = p.Handler(ctx, mount("redir", mounts.MountTypeRedirect, "root:org:team", mounts.IdentityModeImpersonate), "api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/apis/mounts.kcp.io/v1alpha1/mounts/redir/proxy/api/v1/pods?watch=true&fieldSelector=a%3Db", nil))
	if loc := rec.Header().Get("Location"); rec.Code != http.StatusTemporaryRedirect || loc != "https://front-proxy.example/clusters/root:org:team/api/v1/pods?watch=true&fieldSelector=a%3Db" {
		t.Errorf("redirect: %d Location %q", rec.Code, loc)
	}
	var status metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil || status.Code != http.StatusTemporaryRedirect {
		t.Errorf("redirect body %q: %v", rec.Body, err)
	}
	if n := len(k.recorded()); n != 1 {
		t.Errorf("a redirect sent %d requests to kcp", n-1)
	}

	// Refusals.
	for _, c := range []struct {
		mount  *mounts.Mount
		caller user.Info
		check  func(error) bool
		says   string
	}{
		{mount("gone", mounts.MountTypeWorkspace, "root:org:gone", mounts.IdentityModeImpersonate), alice, isReason(ReasonWorkspaceNotFound), "workspace root:org:gone does not exist"},
		{mount("gone", mounts.MountTypeRedirect, "root:org:gone", mounts.IdentityModeImpersonate), alice, isReason(ReasonWorkspaceNotFound), "workspace root:org:gone does not exist"},
		{mount("young", mounts.MountTypeWorkspace, "root:org:young", mounts.IdentityModeImpersonate), alice, isReason(ReasonWorkspaceNotReady), "workspace root:org:young is not ready: its phase is Initializing"},
		{mount("lend", mounts.MountTypeWorkspace, "root:org:team", mounts.IdentityModeMountCredentials), alice, apierrors.IsForbidden, "never lent"},
		{mount("ws", mounts.MountTypeWorkspace, "root:org:team", mounts.IdentityModeImpersonate), &user.DefaultInfo{Name: kcp.ForwardedWithoutIdentityUser}, apierrors.IsForbidden, "without naming its caller"},
		{mount("ws", mounts.MountTypeWorkspace, "root:org:team", mounts.IdentityModeImpersonate), &user.DefaultInfo{Name: "root", Groups: []string{user.SystemPrivilegedGroup}}, apierrors.IsForbidden, user.SystemPrivilegedGroup},
	} {
		_, err := p.handler(genericapirequest.WithUser(context.Background(), c.caller), c.mount, "api")
		if err == nil || !c.check(err) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("mount %s (%s) for %s: %v; want one that says %q", c.mount.Name, c.mount.Spec.Type, c.caller.GetName(), err, c.says)
		}
		if err != nil {
			if s, ok := err.(apierrors.APIStatus); ok && strings.Contains(c.says, "does not exist") && s.Status().Code != http.StatusServiceUnavailable {
				t.Errorf("mount %s: code %d, want 503", c.mount.Name, s.Status().Code)
			}
		}
	}

	// A token file (a projected service account token, say) is read for every request.
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("provider"), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile := rest.CopyConfig(kcpConfig)
	fromFile.BearerToken, fromFile.BearerTokenFile = "", tokenFile
	withFile := &Proxier{Transports: NewTransports(TransportOptions{}, nil), Workspaces: resolver, Kcp: fromFile}
	h, err = withFile.Handler(ctx, mount("ws", mounts.MountTypeWorkspace, "root:org:team", mounts.IdentityModeImpersonate), "api")
	if err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/apis/mounts.kcp.io/v1alpha1/mounts/ws/proxy/api", nil))
	if all := k.recorded(); rec.Code != http.StatusOK || all[len(all)-1].Header.Get("Authorization") != "Bearer provider" {
		t.Errorf("with a token file: %d %s", rec.Code, rec.Body)
	}

	// Without kcp configured, neither type is served.
	plain := &Proxier{Transports: NewTransports(TransportOptions{}, nil)}
	for _, typ := range []mounts.MountType{mounts.MountTypeWorkspace, mounts.MountTypeRedirect} {
		if _, err := plain.handler(ctx, mount("x", typ, "root:org:team", mounts.IdentityModeImpersonate), "api"); !isReason(ReasonUnsupportedType)(err) {
			t.Errorf("%s without kcp: %v", typ, err)
		}
	}
}

func isReason(reason string) func(error) bool {
	return func(err error) bool {
		c, ok := err.(*CredentialsError)
		return ok && c.Reason == reason
	}
}

// TestImpersonationOfReservedNames: without prefixes, a caller named like one of Kubernetes'
// own identities (a ServiceAccount, a node) or in one of its groups is refused: on the target
// the name would be the target's own ServiceAccount or node. With prefixes it is the hub's.
func TestImpersonationOfReservedNames(t *testing.T) {
	m := &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: mounts.MountSpec{Identity: mounts.MountIdentity{Mode: mounts.IdentityModeImpersonate}}}
	sa := &user.DefaultInfo{Name: "system:serviceaccount:prod:deployer", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:prod", user.AllAuthenticated}}
	if _, err := impersonation(m, sa); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.identity.userPrefix") {
		t.Errorf("a ServiceAccount of the hub without prefixes: %v", err)
	}
	inGroup := &user.DefaultInfo{Name: "alice", Groups: []string{"system:nodes", user.AllAuthenticated}}
	if _, err := impersonation(m, inGroup); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.identity.groupPrefix") {
		t.Errorf("a member of system:nodes without a group prefix: %v", err)
	}
	plain := &user.DefaultInfo{Name: "alice", Groups: []string{"team", user.AllAuthenticated}}
	if imp, err := impersonation(m, plain); err != nil || strings.Join(imp.Groups, ",") != "team,system:authenticated" {
		t.Errorf("alice: %+v, %v", imp, err)
	}
	prefixed := m.DeepCopy()
	prefixed.Spec.Identity.UserPrefix, prefixed.Spec.Identity.GroupPrefix = "hub:", "hub:"
	if imp, err := impersonation(prefixed, sa); err != nil || imp.UserName != "hub:system:serviceaccount:prod:deployer" {
		t.Errorf("a ServiceAccount of the hub with prefixes: %+v, %v", imp, err)
	}
}
