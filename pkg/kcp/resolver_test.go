package kcp

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	corev1alpha1 "github.com/kcp-dev/sdk/apis/core/v1alpha1"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"
	conditionsv1alpha1 "github.com/kcp-dev/sdk/apis/third_party/conditions/apis/conditions/v1alpha1"
)

func TestParseWorkspacePath(t *testing.T) {
	for _, c := range []struct {
		path, parent, name string
		ok                 bool
	}{
		{"root", "", "root", true},
		{"root:org", "root", "org", true},
		{"root:org:team-1", "root:org", "team-1", true},
		{"2x7kq3n1", "", "2x7kq3n1", true},
		{"", "", "", false},
		{"root:", "", "", false},
		{":root", "", "", false},
		{"root::team", "", "", false},
		{"Root:org", "", "", false},
		{"root:-org", "", "", false},
		{"root:org-", "", "", false},
		{"root:o_rg", "", "", false},
		{"root/org", "", "", false},
		{"root:org/../x", "", "", false},
		{"root:%2e%2e", "", "", false},
		{"root:org ", "", "", false},
		{"*", "", "", false},
		{strings.Repeat("a:", MaxWorkspacePathLength/2) + "a", "", "", false},
	} {
		parent, name, err := ParseWorkspacePath(c.path)
		if (err == nil) != c.ok || parent != c.parent || name != c.name {
			t.Errorf("ParseWorkspacePath(%q) = %q, %q, %v; want %q, %q, ok %v", c.path, parent, name, err, c.parent, c.name, c.ok)
		}
	}
}

// fakeKcp stands in for kcp's front-proxy: it answers GETs of Workspaces in their parent
// (/clusters/<parent>/apis/tenancy.kcp.io/v1alpha1/workspaces/<name>) and of the
// LogicalCluster "cluster" of a logical cluster, as JSON encoded from the kcp SDK's types, to
// the provider's token only; anything else is 404 as kcp answers it, a Status.
type fakeKcp struct {
	*httptest.Server
	mu       sync.Mutex
	objects  map[string]any // by request path
	requests atomic.Int32
	// hold, if set, is waited for before answering.
	hold chan struct{}
	// redirect, if set, is where every request is redirected to.
	redirect string
}

const providerToken = "provider-token"

func startFakeKcp(t *testing.T) *fakeKcp {
	k := &fakeKcp{objects: map[string]any{}}
	k.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.requests.Add(1)
		if k.hold != nil {
			<-k.hold
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer "+providerToken {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(apierrors.NewUnauthorized("Unauthorized").Status())
			return
		}
		k.mu.Lock()
		obj, ok := k.objects[r.URL.Path]
		redirect := k.redirect
		k.mu.Unlock()
		if redirect != "" {
			http.Redirect(w, r, redirect, http.StatusTemporaryRedirect)
			return
		}
		if !ok || r.Method != http.MethodGet {
			status := apierrors.NewNotFound(tenancyv1alpha1.Resource("workspaces"), r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]).Status()
			status.Kind, status.APIVersion = "Status", "v1"
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(status)
			return
		}
		if s, ok := obj.(metav1.Status); ok {
			w.WriteHeader(int(s.Code))
		}
		_ = json.NewEncoder(w).Encode(obj)
	}))
	t.Cleanup(k.Close)
	return k
}

func (k *fakeKcp) set(path string, obj any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.objects[path] = obj
}

func (k *fakeKcp) config() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.Certificate().Raw})
	return &rest.Config{Host: k.URL, BearerToken: providerToken, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

func workspace(name, cluster, url string, phase corev1alpha1.LogicalClusterPhaseType, conditions ...conditionsv1alpha1.Condition) *tenancyv1alpha1.Workspace {
	return &tenancyv1alpha1.Workspace{
		TypeMeta:   metav1.TypeMeta{Kind: "Workspace", APIVersion: tenancyv1alpha1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       tenancyv1alpha1.WorkspaceSpec{Cluster: cluster, URL: url},
		Status:     tenancyv1alpha1.WorkspaceStatus{Phase: phase, Conditions: conditions},
	}
}

const workspacesPath = "/apis/tenancy.kcp.io/v1alpha1/workspaces/"

func TestResolveWorkspace(t *testing.T) {
	k := startFakeKcp(t)
	k.set("/clusters/root:org"+workspacesPath+"team", workspace("team", "2x7kq3n1", "https://kcp.example:6443/clusters/root:org:team", corev1alpha1.LogicalClusterPhaseReady))
	k.set("/clusters/root:org"+workspacesPath+"young", workspace("young", "8f3kq1z0", "https://kcp.example:6443/clusters/root:org:young", corev1alpha1.LogicalClusterPhaseInitializing,
		conditionsv1alpha1.Condition{Type: "WorkspaceInitialized", Status: corev1.ConditionFalse, Message: "Initializers still exist: [root:universal]"},
		conditionsv1alpha1.Condition{Type: "WorkspaceScheduled", Status: corev1.ConditionTrue, Message: "ignored"}))
	k.set("/clusters/root:org"+workspacesPath+"mounted", workspace("mounted", "", "https://mounts.example/proxy", corev1alpha1.LogicalClusterPhaseReady))
	k.set("/clusters/root:org"+workspacesPath+"evil", workspace("evil", "../../x", "https://kcp.example:6443/clusters/root:org:evil", corev1alpha1.LogicalClusterPhaseReady))
	k.set("/clusters/root:org"+workspacesPath+"other", workspace("not-other", "abc", "", corev1alpha1.LogicalClusterPhaseReady))
	k.set("/clusters/root/apis/core.kcp.io/v1alpha1/logicalclusters/cluster", &corev1alpha1.LogicalCluster{
		TypeMeta:   metav1.TypeMeta{Kind: "LogicalCluster", APIVersion: corev1alpha1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Status:     corev1alpha1.LogicalClusterStatus{Phase: corev1alpha1.LogicalClusterPhaseReady, URL: "https://shard.internal/clusters/root"},
	})
	forbidden := apierrors.NewForbidden(tenancyv1alpha1.Resource("workspaces"), "secret", nil).Status()
	forbidden.Kind, forbidden.APIVersion = "Status", "v1"
	k.set("/clusters/root:org"+workspacesPath+"secret", forbidden)

	r, err := NewWorkspaceResolver(k.config(), ResolverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		path string
		want Workspace
		err  func(error) bool
	}{
		{path: "root:org:team", want: Workspace{Path: "root:org:team", Cluster: "2x7kq3n1", URL: "https://kcp.example:6443/clusters/root:org:team", Ready: true}},
		{path: "root:org:young", want: Workspace{Path: "root:org:young", Cluster: "8f3kq1z0", URL: "https://kcp.example:6443/clusters/root:org:young",
			Message: "workspace root:org:young is not ready: its phase is Initializing (WorkspaceInitialized: Initializers still exist: [root:universal])"}},
		{path: "root:org:mounted", want: Workspace{Path: "root:org:mounted", URL: "https://mounts.example/proxy", Ready: true}},
		// The root workspace is its own logical cluster; its URL is the configured kcp's.
		{path: "root", want: Workspace{Path: "root", Cluster: "root", URL: k.URL + "/clusters/root", Ready: true}},
		{path: "root:org:nope", err: apierrors.IsNotFound},
		{path: "nope", err: apierrors.IsNotFound},
		{path: "root:org:secret", err: apierrors.IsForbidden},
		{path: "root:org:evil", err: func(err error) bool { return strings.Contains(err.Error(), "not a logical cluster name") }},
		{path: "root:org:other", err: func(err error) bool { return strings.Contains(err.Error(), "not that Workspace") }},
		{path: "root:org/../x", err: apierrors.IsBadRequest},
	} {
		got, err := r.ResolveWorkspace(ctx, c.path)
		switch {
		case c.err != nil && (err == nil || !c.err(err)):
			t.Errorf("%s: %+v, %v; want another error", c.path, got, err)
		case c.err == nil && err != nil:
			t.Errorf("%s: %v", c.path, err)
		case c.err == nil && got != c.want:
			t.Errorf("%s:\n%+v\nwant\n%+v", c.path, got, c.want)
		}
	}

	// Another provider's credentials are refused: the error is kcp's Status.
	cfg := k.config()
	cfg.BearerToken = "someone"
	other, err := NewWorkspaceResolver(cfg, ResolverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.ResolveWorkspace(ctx, "root:org:team"); !apierrors.IsUnauthorized(err) {
		t.Errorf("with wrong credentials: %v", err)
	}
}

func TestResolverCache(t *testing.T) {
	k := startFakeKcp(t)
	path := "/clusters/root" + workspacesPath + "team"
	k.set(path, workspace("team", "abc", "https://kcp.example/clusters/root:team", corev1alpha1.LogicalClusterPhaseReady))
	ctx := context.Background()

	r, err := NewWorkspaceResolver(k.config(), ResolverOptions{TTL: time.Hour, ErrorTTL: time.Hour, MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := r.ResolveWorkspace(ctx, "root:team"); err != nil {
			t.Fatal(err)
		}
	}
	if n := k.requests.Load(); n != 1 {
		t.Errorf("3 resolutions within the TTL asked kcp %d times, want once", n)
	}
	// Errors are cached too (for ErrorTTL), and the cache stays within MaxEntries.
	for range 2 {
		for _, p := range []string{"root:a", "root:b", "root:c"} {
			if _, err := r.ResolveWorkspace(ctx, p); !apierrors.IsNotFound(err) {
				t.Errorf("%s: %v", p, err)
			}
		}
	}
	if n := r.Len(); n > 2 {
		t.Errorf("cache holds %d entries, more than MaxEntries 2", n)
	}

	// Expired entries are fetched again: a workspace that became ready is seen.
	k.requests.Store(0)
	expiring, err := NewWorkspaceResolver(k.config(), ResolverOptions{TTL: time.Nanosecond, ErrorTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	k.set(path, workspace("team", "abc", "https://kcp.example/clusters/root:team", corev1alpha1.LogicalClusterPhaseUnavailable))
	if ws, err := expiring.ResolveWorkspace(ctx, "root:team"); err != nil || ws.Ready {
		t.Errorf("unavailable workspace: %+v, %v", ws, err)
	}
	k.set(path, workspace("team", "abc", "https://kcp.example/clusters/root:team", corev1alpha1.LogicalClusterPhaseReady))
	if ws, err := expiring.ResolveWorkspace(ctx, "root:team"); err != nil || !ws.Ready {
		t.Errorf("workspace ready again: %+v, %v", ws, err)
	}
	if n := k.requests.Load(); n != 2 {
		t.Errorf("2 resolutions after expiry asked kcp %d times, want twice", n)
	}
}

// TestResolverSharesRequests: concurrent resolutions of one path wait for one request to kcp,
// and a caller that goes away does not fail the others.
func TestResolverSharesRequests(t *testing.T) {
	k := startFakeKcp(t)
	k.set("/clusters/root"+workspacesPath+"team", workspace("team", "abc", "https://kcp.example/clusters/root:team", corev1alpha1.LogicalClusterPhaseReady))
	k.hold = make(chan struct{})
	r, err := NewWorkspaceResolver(k.config(), ResolverOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	first, cancelFirst := context.WithCancel(context.Background())
	firstDone := make(chan error)
	go func() {
		_, err := r.ResolveWorkspace(first, "root:team")
		firstDone <- err
	}()
	// Wait until the first request reached kcp, then let more callers come.
	for k.requests.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Go(func() {
			ws, err := r.ResolveWorkspace(context.Background(), "root:team")
			if err == nil && ws.Cluster != "abc" {
				err = context.Canceled
			}
			errs <- err
		})
	}
	cancelFirst()
	close(k.hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a waiting caller: %v", err)
		}
	}
	if err := <-firstDone; err != nil {
		t.Logf("the first caller, which went away: %v", err)
	}
	if n := k.requests.Load(); n != 1 {
		t.Errorf("11 concurrent resolutions asked kcp %d times, want once", n)
	}
}

func TestBaseURL(t *testing.T) {
	for host, ok := range map[string]bool{
		"https://kcp.example:6443":          true,
		"https://kcp.example:6443/":         true,
		"https://kcp.example/prefix":        true,
		"http://kcp.example":                false,
		"https://kcp.example/clusters/root": false,
		"https://user:pw@kcp.example":       false,
		"https://kcp.example/?q=1":          false,
		"kcp.example":                       false,
		"":                                  false,
	} {
		if _, err := BaseURL(&rest.Config{Host: host}); (err == nil) != ok {
			t.Errorf("BaseURL(%q): %v, want ok %v", host, err, ok)
		}
	}
}

// TestResolverFollowsNoRedirect: the provider's credentials go to kcp only, not wherever an
// answer points.
func TestResolverFollowsNoRedirect(t *testing.T) {
	elsewhere := startFakeKcp(t)
	k := startFakeKcp(t)
	elsewhere.set("/clusters/root"+workspacesPath+"team", workspace("team", "abc", "https://kcp.example/clusters/root:team", corev1alpha1.LogicalClusterPhaseReady))
	k.mu.Lock()
	k.redirect = elsewhere.URL + "/clusters/root" + workspacesPath + "team"
	k.mu.Unlock()
	r, err := NewWorkspaceResolver(k.config(), ResolverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ResolveWorkspace(context.Background(), "root:team"); err == nil {
		t.Error("a redirect resolved the workspace")
	}
	if n := elsewhere.requests.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}

// BenchmarkResolveWorkspaceCached is the cost the proxy's hot path pays per request for a
// workspace resolved within the TTL.
func BenchmarkResolveWorkspaceCached(b *testing.B) {
	k := &fakeKcp{objects: map[string]any{}}
	k.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(workspace("team", "abc", "https://kcp.example/clusters/root:team", corev1alpha1.LogicalClusterPhaseReady))
	}))
	defer k.Close()
	r, err := NewWorkspaceResolver(k.config(), ResolverOptions{TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.ResolveWorkspace(ctx, "root:team"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := r.ResolveWorkspace(ctx, "root:team"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkResolveWorkspaceUncached is one round trip to kcp (here a loopback TLS stand-in,
// kept-alive connection): what a request pays when the cached entry has expired.
func BenchmarkResolveWorkspaceUncached(b *testing.B) {
	k := &fakeKcp{objects: map[string]any{}}
	k.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(workspace("team", "abc", "https://kcp.example/clusters/root:team", corev1alpha1.LogicalClusterPhaseReady))
	}))
	defer k.Close()
	r, err := NewWorkspaceResolver(k.config(), ResolverOptions{TTL: time.Nanosecond})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ResolveWorkspace(ctx, "root:team"); err != nil {
			b.Fatal(err)
		}
	}
}
