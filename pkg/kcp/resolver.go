package kcp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	corev1alpha1 "github.com/kcp-dev/sdk/apis/core/v1alpha1"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"
	conditionsv1alpha1 "github.com/kcp-dev/sdk/apis/third_party/conditions/apis/conditions/v1alpha1"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// workspacePathSegmentRE is one segment of a kcp workspace path (root:org:team): lower-case
// alphanumerics and '-', starting and ending alphanumeric, as kcp's logical cluster paths are.
var workspacePathSegmentRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// MaxWorkspacePathLength bounds a workspace path, as the Mount's validation of spec.ref.name does.
const MaxWorkspacePathLength = 253 * 4

// ParseWorkspacePath splits a workspace path such as root:org:team into its parent path
// (root:org) and its last segment (team). A path of one segment (e.g. root) has no parent: it
// names a logical cluster itself.
func ParseWorkspacePath(path string) (parent, name string, err error) {
	if path == "" {
		return "", "", fmt.Errorf("the workspace path is empty")
	}
	if len(path) > MaxWorkspacePathLength {
		return "", "", fmt.Errorf("the workspace path has %d characters, more than %d", len(path), MaxWorkspacePathLength)
	}
	for _, segment := range strings.Split(path, ":") {
		if !workspacePathSegmentRE.MatchString(segment) {
			return "", "", fmt.Errorf("%q is not a workspace path: segments of lower-case alphanumerics and '-' (not first or last), joined by ':', e.g. root:org:team", path)
		}
	}
	i := strings.LastIndex(path, ":")
	if i < 0 {
		return "", path, nil
	}
	return path[:i], path[i+1:], nil
}

// ResolverOptions tune a KcpWorkspaceResolver.
type ResolverOptions struct {
	// TTL is how long a resolved workspace is reused (0: DefaultResolveTTL).
	TTL time.Duration
	// ErrorTTL is how long a failed resolution is reused (0: DefaultResolveErrorTTL).
	ErrorTTL time.Duration
	// MaxEntries bounds the cache (0: DefaultResolveMaxEntries).
	MaxEntries int
	// Timeout bounds one request to kcp (0: DefaultResolveTimeout).
	Timeout time.Duration
}

// Defaults of ResolverOptions. A few seconds keep kcp out of the proxy's hot path while a
// deleted or not-ready workspace is noticed about as soon as a person would retry; errors are
// kept only long enough to spare kcp a storm of retries of one broken mount.
const (
	DefaultResolveTTL        = 5 * time.Second
	DefaultResolveErrorTTL   = time.Second
	DefaultResolveMaxEntries = 4096
	DefaultResolveTimeout    = 10 * time.Second
	// maxResolveResponseBytes bounds what is read of one answer of kcp; a Workspace is a few KiB.
	maxResolveResponseBytes = 1 << 20
)

// KcpWorkspaceResolver resolves workspace paths through kcp with the provider's credentials:
// root:org:team is the Workspace "team" in root:org, a path of one segment is the logical
// cluster of that name (its LogicalCluster "cluster"). Results are cached briefly; concurrent
// resolutions of one path share one request.
type KcpWorkspaceResolver struct {
	base   *url.URL
	client *http.Client
	opts   ResolverOptions

	mu       sync.Mutex
	cache    map[string]*resolved
	inflight map[string]*resolving
}

var _ WorkspaceResolver = &KcpWorkspaceResolver{}

type resolved struct {
	ws      Workspace
	err     error
	expires time.Time
}

type resolving struct {
	done chan struct{}
	ws   Workspace
	err  error
}

// NewWorkspaceResolver returns a resolver that asks kcp at cfg.Host (kcp's base URL, e.g. the
// front-proxy, without /clusters/) with cfg's credentials.
func NewWorkspaceResolver(cfg *rest.Config, opts ResolverOptions) (*KcpWorkspaceResolver, error) {
	base, err := BaseURL(cfg)
	if err != nil {
		return nil, err
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the kcp client: %w", err)
	}
	// A redirect would carry the provider's credentials wherever kcp, or whatever answers in
	// its place, points; kcp answers these requests itself.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if opts.TTL <= 0 {
		opts.TTL = DefaultResolveTTL
	}
	if opts.ErrorTTL <= 0 {
		opts.ErrorTTL = DefaultResolveErrorTTL
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultResolveMaxEntries
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultResolveTimeout
	}
	return &KcpWorkspaceResolver{base: base, client: client, opts: opts, cache: map[string]*resolved{}, inflight: map[string]*resolving{}}, nil
}

// BaseURL is kcp's base URL from the provider's configuration: an absolute https URL without
// /clusters/ in its path.
func BaseURL(cfg *rest.Config) (*url.URL, error) {
	if cfg == nil || cfg.Host == "" {
		return nil, fmt.Errorf("the kcp kubeconfig names no server")
	}
	base, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("the kcp kubeconfig's server does not parse as a URL: %w", err)
	}
	switch {
	case base.Scheme != "https" || base.Host == "":
		return nil, fmt.Errorf("the kcp kubeconfig's server %q is not an absolute https URL", cfg.Host)
	case base.User != nil:
		return nil, fmt.Errorf("the kcp kubeconfig's server URL must not hold credentials")
	case base.RawQuery != "" || base.Fragment != "":
		return nil, fmt.Errorf("the kcp kubeconfig's server %q must not have a query or fragment", cfg.Host)
	case strings.Contains(base.Path, "/clusters/"):
		return nil, fmt.Errorf("the kcp kubeconfig's server %q must be kcp's base URL, without /clusters/<workspace>", cfg.Host)
	}
	base.Path = strings.TrimSuffix(base.Path, "/")
	base.RawPath = ""
	return base, nil
}

// ResolveWorkspace implements WorkspaceResolver.
func (r *KcpWorkspaceResolver) ResolveWorkspace(ctx context.Context, path string) (Workspace, error) {
	if _, _, err := ParseWorkspacePath(path); err != nil {
		return Workspace{}, apierrors.NewBadRequest(err.Error())
	}
	now := time.Now()
	r.mu.Lock()
	if e, ok := r.cache[path]; ok && now.Before(e.expires) {
		r.mu.Unlock()
		return e.ws, e.err
	}
	op, waiting := r.inflight[path]
	if !waiting {
		op = &resolving{done: make(chan struct{})}
		r.inflight[path] = op
		// The request is shared by every caller waiting for this path: one caller going
		// away must not fail the others, so it runs on its own, bounded by the timeout.
		go r.resolve(klog.NewContext(context.Background(), klog.FromContext(ctx)), path, op)
	}
	r.mu.Unlock()

	select {
	case <-op.done:
		return op.ws, op.err
	case <-ctx.Done():
		return Workspace{}, fmt.Errorf("waiting for kcp to resolve workspace %s: %w", path, ctx.Err())
	}
}

// resolve asks kcp for path, caches the answer and hands it to the callers waiting on op.
func (r *KcpWorkspaceResolver) resolve(ctx context.Context, path string, op *resolving) {
	fetchCtx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	op.ws, op.err = r.fetch(fetchCtx, path)
	cancel()
	ttl := r.opts.TTL
	if op.err != nil {
		ttl = r.opts.ErrorTTL
		klog.FromContext(ctx).V(2).Info("Resolving a workspace failed", "path", path, "err", op.err.Error())
	}
	r.mu.Lock()
	delete(r.inflight, path)
	r.store(path, &resolved{ws: op.ws, err: op.err, expires: time.Now().Add(ttl)})
	r.mu.Unlock()
	close(op.done)
}

// store caches e, first dropping expired entries, or else any one, when the cache is full.
// r.mu is held.
func (r *KcpWorkspaceResolver) store(path string, e *resolved) {
	if _, ok := r.cache[path]; !ok && len(r.cache) >= r.opts.MaxEntries {
		now := time.Now()
		for k, old := range r.cache {
			if !now.Before(old.expires) {
				delete(r.cache, k)
			}
		}
		for k := range r.cache {
			if len(r.cache) < r.opts.MaxEntries {
				break
			}
			delete(r.cache, k)
		}
	}
	r.cache[path] = e
}

// Len is the number of cached resolutions.
func (r *KcpWorkspaceResolver) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cache)
}

func (r *KcpWorkspaceResolver) fetch(ctx context.Context, path string) (Workspace, error) {
	parent, name, _ := ParseWorkspacePath(path)
	if parent == "" {
		return r.fetchLogicalCluster(ctx, path)
	}
	var ws tenancyv1alpha1.Workspace
	gvr := tenancyv1alpha1.SchemeGroupVersion.WithResource("workspaces")
	if err := r.get(ctx, parent, gvr, name, &ws); err != nil {
		return Workspace{}, err
	}
	if ws.Kind != "Workspace" || ws.APIVersion != tenancyv1alpha1.SchemeGroupVersion.String() || ws.Name != name {
		return Workspace{}, fmt.Errorf("kcp answered for workspace %s with something that is not that Workspace", path)
	}
	out := Workspace{Path: path, Cluster: clusters.Name(ws.Spec.Cluster), URL: ws.Spec.URL}
	// A mounted workspace has no logical cluster: kcp serves it under its path.
	if out.Cluster != "" && !clusterNameRE.MatchString(string(out.Cluster)) {
		return Workspace{}, fmt.Errorf("kcp names %q as the logical cluster of workspace %s, which is not a logical cluster name", ws.Spec.Cluster, path)
	}
	out.Ready, out.Message = readiness(path, ws.Status.Phase, ws.Status.Conditions)
	return out, nil
}

// fetchLogicalCluster resolves a path of one segment, such as root, which no Workspace
// object describes: the logical cluster of that name describes itself in its LogicalCluster
// "cluster". Its URL is kcp's base URL (the one the provider is configured with) plus
// /clusters/<name>, which the front-proxy serves for every logical cluster.
func (r *KcpWorkspaceResolver) fetchLogicalCluster(ctx context.Context, name string) (Workspace, error) {
	var lc corev1alpha1.LogicalCluster
	gvr := corev1alpha1.SchemeGroupVersion.WithResource("logicalclusters")
	if err := r.get(ctx, name, gvr, corev1alpha1.LogicalClusterName, &lc); err != nil {
		if apierrors.IsNotFound(err) {
			return Workspace{}, apierrors.NewNotFound(tenancyv1alpha1.Resource("workspaces"), name)
		}
		return Workspace{}, err
	}
	if lc.Kind != "LogicalCluster" || lc.APIVersion != corev1alpha1.SchemeGroupVersion.String() || lc.Name != corev1alpha1.LogicalClusterName {
		return Workspace{}, fmt.Errorf("kcp answered for logical cluster %s with something that is not its LogicalCluster", name)
	}
	u := *r.base
	u.Path += "/clusters/" + name
	out := Workspace{Path: name, Cluster: clusters.Name(name), URL: u.String()}
	out.Ready, out.Message = readiness(name, lc.Status.Phase, lc.Status.Conditions)
	return out, nil
}

// readiness is Ready for phase Ready, else a message with the phase and the messages of the
// conditions that are not true, as kcp reports them.
func readiness(path string, phase corev1alpha1.LogicalClusterPhaseType, conditions conditionsv1alpha1.Conditions) (bool, string) {
	if phase == corev1alpha1.LogicalClusterPhaseReady {
		return true, ""
	}
	shown := string(phase)
	if shown == "" {
		shown = "not reported yet"
	}
	msg := fmt.Sprintf("workspace %s is not ready: its phase is %s", path, shown)
	var why []string
	for _, c := range conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			why = append(why, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	if len(why) > 0 {
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	return false, msg
}

// get reads one object of gvr in logical cluster (or workspace path) cluster into into.
func (r *KcpWorkspaceResolver) get(ctx context.Context, cluster string, gvr schema.GroupVersionResource, name string, into any) error {
	u := *r.base
	u.Path += "/clusters/" + cluster + "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource + "/" + name
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("building the request to kcp: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("asking kcp for %s %s in %s: %w", gvr.Resource, name, cluster, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResolveResponseBytes+1))
	if err != nil {
		return fmt.Errorf("reading kcp's answer for %s %s in %s: %w", gvr.Resource, name, cluster, err)
	}
	if len(body) > maxResolveResponseBytes {
		return fmt.Errorf("kcp's answer for %s %s in %s is larger than %d bytes", gvr.Resource, name, cluster, maxResolveResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return answerError(resp.StatusCode, body, gvr.GroupResource(), cluster, name)
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("kcp's answer for %s %s in %s does not decode: %w", gvr.Resource, name, cluster, err)
	}
	return nil
}

// answerError turns a failed answer of kcp into an API error: NotFound for 404 (kcp also
// answers 403 for a workspace the provider may not see, which stays Forbidden), the Status
// kcp sent otherwise.
func answerError(code int, body []byte, gr schema.GroupResource, cluster, name string) error {
	if code == http.StatusNotFound {
		return apierrors.NewNotFound(gr, cluster+":"+name)
	}
	var status metav1.Status
	if json.Unmarshal(body, &status) == nil && status.Kind == "Status" && status.Code == int32(code) {
		return &apierrors.StatusError{ErrStatus: status}
	}
	return apierrors.NewGenericServerResponse(code, http.MethodGet, gr, name, "", 0, false)
}

// IsUnresolvable reports whether err says a workspace does not exist or is hidden from the
// provider, as opposed to kcp not answering.
func IsUnresolvable(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}
