package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/felixge/httpsnoop"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/dryrun"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/rewrite"
	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// Proxier serves the mounts/<name>/proxy subresource.
type Proxier struct {
	Secrets    SecretSource
	Transports *Transports
	// Authorizer checks the extra "create" that upgrade requests need.
	Authorizer authorizer.Authorizer
	Metrics    *Metrics
	// MetricsWithoutMounts leaves the mount label of Metrics empty: one series for all mounts
	// (--metrics-per-mount=false). Set before serving.
	MetricsWithoutMounts bool
	// Probes shares health probe results between mounts of one target.
	Probes *ProbeCache
	// MaxHops is how many mount proxies a request may have passed before this one; 0 means
	// DefaultMaxHops.
	MaxHops int
	// Workspaces resolves the workspaces of Workspace and Redirect mounts (kcp mode with
	// --kcp-kubeconfig); nil serves neither type.
	Workspaces kcp.WorkspaceResolver
	// Tunnels reaches the targets of mounts with spec.tunnel through their agents' sessions
	// (tunnel.go); nil serves no tunnel mounts.
	Tunnels tunnel.Dialer
	// buffers lends the copy buffers of plain requests.
	buffers bufferPool
	// MaxUpgrades bounds the upgraded sessions (exec, attach, port-forward) open at once
	// through this server, each two connections and their buffers; beyond, 429. 0: no bound.
	MaxUpgrades int
	upgrades    atomic.Int64
	// compiled keeps the compiled spec.rewrites of renaming mounts (rewrite.go).
	compiled compiledRules
	// AdmissionRelay is where targets reach this server's admission relay; nil refuses
	// webhook configurations written through renaming mounts (webhooks.go).
	AdmissionRelay *admissionrelay.Config
	// RewriteBudget bounds the memory that renaming mounts' rewrites of whole discovery and
	// OpenAPI documents hold at once, server-wide; nil bounds only each document's size.
	RewriteBudget *rewrite.Budget

	// observer, if set (SetObserver), hears when requests through a URL mount begin to reach
	// its target or stop reaching it.
	observer atomic.Pointer[Observer]

	// Kcp is the provider's client configuration for kcp (--kcp-kubeconfig): Workspace mounts
	// are proxied to its host, kcp's base URL, with its credentials, impersonating the
	// caller. nil serves no Workspace mounts.
	Kcp *rest.Config
}

// Observer hears what requests through a mount found when it differs from what the previous
// requests to the mount's target found: reached says the target answered, false that the hop
// to it failed. It runs on the request's goroutine and must not block.
type Observer func(ctx context.Context, m *mounts.Mount, reached bool)

// SetObserver sets the observer of requests (the status controller's, which then follows the
// proxy at once instead of at the mount's next probe); nil removes it.
func (p *Proxier) SetObserver(o Observer) {
	if o == nil {
		p.observer.Store(nil)
		return
	}
	p.observer.Store(&o)
}

func (p *Proxier) maxHops() int {
	if p.MaxHops > 0 {
		return p.MaxHops
	}
	return DefaultMaxHops
}

// Reasons of a CredentialsError, also the reasons of the CredentialsResolved condition.
const (
	ReasonUnsupportedType    = "UnsupportedType"
	ReasonSecretNotFound     = "SecretNotFound"
	ReasonSecretUnavailable  = "SecretUnavailable"
	ReasonInvalidCredentials = "InvalidKubeconfig"
	// ReasonTargetNotAllowed: the server's target policy refuses the kubeconfig's server.
	ReasonTargetNotAllowed = "TargetNotAllowed"
)

// CredentialsError says why a Mount's target credentials could not be resolved. It answers
// proxied requests with 503, or 403 when the target policy refuses the target (no retry
// helps); its message never contains credential bytes.
type CredentialsError struct {
	Reason  string
	Message string
}

func (e *CredentialsError) Error() string { return e.Message }

// Status makes the error an API error: 503, or 403 for ReasonTargetNotAllowed.
func (e *CredentialsError) Status() metav1.Status {
	if e.Reason == ReasonTargetNotAllowed {
		return *newStatus(http.StatusForbidden, metav1.StatusReasonForbidden, e.Message)
	}
	return apierrors.NewServiceUnavailable(e.Message).Status()
}

// Target resolves the Mount's target and its cached transports.
func (p *Proxier) Target(ctx context.Context, m *mounts.Mount) (*Target, error) {
	if m.Spec.Type != mounts.MountTypeURL {
		return nil, unsupportedType(m)
	}
	if t := m.Spec.Tunnel; t != nil && t.Credentials == mounts.TunnelCredentialsAgent {
		return p.agentTarget(ctx, m)
	}
	ref := m.Spec.Ref
	secret, err := p.Secrets.GetSecret(ctx, ref.Namespace, ref.Name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &CredentialsError{ReasonSecretNotFound, fmt.Sprintf("mount %q: its Secret %s/%s does not exist", m.Name, ref.Namespace, ref.Name)}
		}
		return nil, &CredentialsError{ReasonSecretUnavailable, fmt.Sprintf("mount %q: %v", m.Name, err)}
	}
	key := TargetKey{Cluster: clusters.From(ctx), SecretNamespace: ref.Namespace, SecretName: ref.Name, SecretResourceVersion: secret.ResourceVersion, CABundle: string(m.Spec.CABundle)}
	if t := m.Spec.Timeouts; t != nil && t.ConnectSeconds != nil {
		key.ConnectTimeout = time.Duration(*t.ConnectSeconds) * time.Second
	}
	buildConfig := func() (*rest.Config, error) {
		data, ok := secret.Data[v1alpha1.SecretKeyKubeconfig]
		if !ok {
			return nil, fmt.Errorf("%w: no key %q", ErrCredentials, v1alpha1.SecretKeyKubeconfig)
		}
		return ConfigFromKubeconfig(data)
	}
	var target *Target
	if m.Spec.Tunnel != nil {
		target, err = p.serverTunnelTarget(ctx, m, key, buildConfig)
	} else {
		target, err = p.Transports.Get(ctx, m.UID, key, buildConfig)
	}
	if err != nil {
		reason := ReasonInvalidCredentials
		if errors.Is(err, targetpolicy.ErrNotAllowed) {
			reason = ReasonTargetNotAllowed
		}
		return nil, &CredentialsError{reason, fmt.Sprintf("mount %q: Secret %s/%s: %v", m.Name, ref.Namespace, ref.Name, err)}
	}
	return target, nil
}

func unsupportedType(m *mounts.Mount) *CredentialsError {
	return &CredentialsError{ReasonUnsupportedType, fmt.Sprintf("mount %q has type %s, which is served only in kcp mode with --kcp-kubeconfig; this server proxies type URL", m.Name, m.Spec.Type)}
}

// Forget lets go of what the proxy keeps for a deleted mount of cluster: its share of a
// Target and its metric series. The registry calls it on the replica that served the delete,
// the status controller's informer on every replica; a second call does nothing.
func (p *Proxier) Forget(cluster clusters.Name, name string, uid types.UID) {
	if p.Transports != nil {
		p.Transports.Forget(uid)
	}
	p.compiled.forget(uid)
	if !p.MetricsWithoutMounts {
		// Without mount labels the series are every mount's: they stay.
		p.Metrics.Forget(MountLabel(cluster, name), uid)
	}
}

// metricsLabel is the mount label of a mount's metric series: MountLabel, or empty.
func (p *Proxier) metricsLabel(cluster clusters.Name, name string) string {
	if p.MetricsWithoutMounts {
		return ""
	}
	return MountLabel(cluster, name)
}

// MountLabel is the value of the mount label of a mount's metric series: its name, and for
// mounts of a logical cluster <cluster>/<name>, so that two clusters' mounts of one name
// never share (or delete) each other's series. Mount names cannot contain a slash, so the
// value is unambiguous, and outside kcp mode it is the plain name as before.
func MountLabel(cluster clusters.Name, name string) string {
	if cluster == clusters.DefaultCluster || cluster == "" {
		return name
	}
	return string(cluster) + "/" + name
}

// Handler returns the handler of one proxied request to m at innerPath. Errors returned here
// are API errors the caller writes as they are; failures of the hop to the target are
// answered by the handler (hopFailure). The handler sends the caller's dryRun, which the
// server carried past the connect handler under another name (pkg/dryrun), as dryRun.
func (p *Proxier) Handler(ctx context.Context, m *mounts.Mount, innerPath string) (http.Handler, error) {
	h, err := p.handler(ctx, m, innerPath)
	var ce *CredentialsError
	switch {
	case errors.As(err, &ce):
		// A failure of the hop: answered as the proxy answers the others.
		status := ce.Status()
		return newHopFailure(m.Name, &status, innerPath), nil
	case err != nil:
		return nil, err
	}
	return h, nil
}

func (p *Proxier) handler(ctx context.Context, m *mounts.Mount, innerPath string) (http.Handler, error) {
	caller, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewUnauthorized("no user in the request")
	}
	// Everything below judges the path that is sent.
	innerPath, err := CleanPath(innerPath)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	// The true reason first: a mount this server cannot serve is not a matter of identity.
	switch m.Spec.Type {
	case mounts.MountTypeURL:
	case mounts.MountTypeWorkspace:
		return p.workspaceHandler(ctx, m, caller, innerPath)
	case mounts.MountTypeRedirect:
		return p.redirectHandler(ctx, m, innerPath)
	default:
		return nil, unsupportedType(m)
	}
	imp, err := impersonation(m, caller)
	if err != nil {
		return nil, err
	}
	target, err := p.Target(ctx, m)
	if err != nil {
		return nil, err
	}
	joined, err := JoinPath(target.Base.Path, innerPath)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	location := &url.URL{Scheme: target.Base.Scheme, Host: target.Base.Host, Path: joined}
	// Only a renaming mount compiles or calls anything of pkg/rewrite.
	var rules *rewrite.Rules
	if m.Spec.Rewrites != nil {
		if rules, err = p.rewriteRules(m); err != nil {
			return nil, err
		}
	}
	var requestTimeout time.Duration
	if t := m.Spec.Timeouts; t != nil && t.RequestSeconds != nil {
		requestTimeout = time.Duration(*t.RequestSeconds) * time.Second
	}
	return &requestHandler{proxier: p, mount: m, label: p.metricsLabel(clusters.From(ctx), m.Name), caller: caller, imp: imp, target: target, location: location, innerPath: innerPath, requestTimeout: requestTimeout, rules: rules}, nil
}

// impersonation returns how the caller is carried to the target: nil for MountCredentials,
// the caller's identity (prefixed) for Impersonate. system:masters is never impersonated: a
// host's superuser is no superuser of every mounted cluster. A request kcp forwarded without
// naming its caller has nobody to impersonate. This server's own marker group of requests
// kcp authorized means nothing to a target and is not sent.
func impersonation(m *mounts.Mount, caller user.Info) (*transport.ImpersonationConfig, error) {
	id := m.Spec.Identity
	if id.Mode == mounts.IdentityModeMountCredentials {
		return nil, nil
	}
	if kcp.HasNoIdentity(caller) {
		return nil, apierrors.NewForbidden(mounts.Resource("mounts/proxy"), m.Name,
			fmt.Errorf("mount %q impersonates its callers, and kcp forwarded this request without naming its caller (kcp v0.32.3 sends no X-Remote-* headers): it is never sent with the mount's credentials alone. Reach the mount through a path that carries your identity (kcp with X-Remote-* forwarding, the front-proxy's mount URL, or this server directly), or use a mount with identity mode %s",
				m.Name, mounts.IdentityModeMountCredentials))
	}
	if slices.Contains(caller.GetGroups(), user.SystemPrivilegedGroup) {
		return nil, apierrors.NewForbidden(mounts.Resource("mounts/proxy"), m.Name,
			fmt.Errorf("mount %q impersonates callers and refuses to impersonate members of %s; use an identity outside %s, or a mount with identity mode %s",
				m.Name, user.SystemPrivilegedGroup, user.SystemPrivilegedGroup, mounts.IdentityModeMountCredentials))
	}
	// Names Kubernetes reserves (system:serviceaccount:<ns>:<n>, system:node:<n>, their groups)
	// are identities of the cluster that issued them: carried as they are, a hub tenant who
	// may create a ServiceAccount in a namespace named like one on the target would act as
	// the target's. Only a prefix makes them the hub's.
	if id.UserPrefix == "" && strings.HasPrefix(caller.GetName(), reservedPrefix) {
		return nil, apierrors.NewForbidden(mounts.Resource("mounts/proxy"), m.Name,
			fmt.Errorf("mount %q impersonates callers without spec.identity.userPrefix and refuses to carry the reserved name %q to its target, where it would name the target's own identity; set spec.identity.userPrefix (and groupPrefix), or call as a user whose name does not start with %q", m.Name, caller.GetName(), reservedPrefix))
	}
	groups := make([]string, 0, len(caller.GetGroups()))
	for _, g := range caller.GetGroups() {
		if kcp.IsServerGroup(g) {
			continue
		}
		if id.GroupPrefix == "" && strings.HasPrefix(g, reservedPrefix) && g != user.AllAuthenticated {
			return nil, apierrors.NewForbidden(mounts.Resource("mounts/proxy"), m.Name,
				fmt.Errorf("mount %q impersonates callers without spec.identity.groupPrefix and refuses to carry the reserved group %q to its target, where it would name the target's own group; set spec.identity.groupPrefix", m.Name, g))
		}
		groups = append(groups, id.GroupPrefix+g)
	}
	return &transport.ImpersonationConfig{
		UserName: id.UserPrefix + caller.GetName(),
		UID:      caller.GetUID(),
		Groups:   groups,
		Extra:    caller.GetExtra(),
	}, nil
}

// reservedPrefix starts the user and group names Kubernetes reserves for its own identities.
const reservedPrefix = "system:"

type requestHandler struct {
	proxier *Proxier
	mount   *mounts.Mount
	// label names the mount in metrics (MountLabel).
	label          string
	caller         user.Info
	imp            *transport.ImpersonationConfig
	target         *Target
	location       *url.URL
	innerPath      string
	requestTimeout time.Duration
	// rules are the renames of a renaming mount, nil otherwise; rewriting is what the
	// response of a rewritten request needs (rewrite.go).
	rules     *rewrite.Rules
	rewriting *rewriting
	// answered: the target's response was replaced by this server's answer (refusedCredentials).
	answered bool
	// reached: the target answered; hopFailed: the hop failed (responder, refusedCredentials).
	// Only the request's own goroutines set them, before ServeHTTP reads them at its end.
	reached, hopFailed atomic.Bool
}

// scrubbedHeaders never travel from the caller to the target: the caller's credentials and
// identity claims belong to this server, not to the mount's target; hop-by-hop headers
// describe the caller's connection, not the request (RFC 9110, 7.6.1).
var scrubbedHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie",
	"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// X-Kcp-* are kcp's own (X-Kcp-Virtual-Resource-Hops, X-Kcp-Mount-Hops): they count kcp's
// hops, not the target's.
var scrubbedPrefixes = []string{"Impersonate-", "X-Remote-", "X-Kcp-"}

// scrubHeaders removes from h what the caller may not send to the target. Headers that the
// caller names in Connection go too: a proxy in front of the target drops them, and the
// caller must not be able to make it drop the impersonation headers this proxy adds (a
// request would then run with the mount's bare credentials). An upgrade keeps exactly the
// Connection this proxy means, "Upgrade", and the caller's protocol.
func scrubHeaders(h http.Header, upgrade bool) {
	protocols := h.Values("Upgrade")
	for _, value := range h.Values("Connection") {
		for name := range strings.SplitSeq(value, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range scrubbedHeaders {
		h.Del(name)
	}
	for name := range h {
		for _, prefix := range scrubbedPrefixes {
			if strings.HasPrefix(name, prefix) {
				h.Del(name)
			}
		}
	}
	if upgrade {
		h.Set("Connection", "Upgrade")
		h["Upgrade"] = protocols
	}
}

// HopsHeader counts the mount proxies a request has passed. Each proxy refuses a request that
// has passed MaxHops already and sends the count plus one, so a mount whose target leads back
// to a mount proxy (this server, directly or through an aggregator) cannot fan one request out
// into an unbounded chain of held requests. kcp bounds its virtual-resource hops alike.
const HopsHeader = "X-Mount-Proxy-Hops"

// DefaultMaxHops allows a mount of a mount of a mount (kcp workspace mounts nest), no more.
const DefaultMaxHops = 3

// hops reads the hop count of a request; a missing header is 0, anything but one
// non-negative number is an error.
func hops(h http.Header) (int, error) {
	values := h.Values(HopsHeader)
	switch len(values) {
	case 0:
		return 0, nil
	case 1:
		if n, err := strconv.Atoi(values[0]); err == nil && n >= 0 {
			return n, nil
		}
	}
	return 0, fmt.Errorf("header %s must be one non-negative number", HopsHeader)
}

func (h *requestHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	req = dryrun.Restored(req)
	start := time.Now()
	metrics := h.proxier.Metrics
	recording := metrics.start(h.label, h.mount.UID)
	code := http.StatusOK
	var written int64
	w = httpsnoop.Wrap(w, httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			return func(c int) { code = c; next(c) }
		},
		Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
			return func(b []byte) (int, error) { n, err := next(b); written += int64(n); return n, err }
		},
		ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
			return func(src io.Reader) (int64, error) { n, err := next(src); written += n; return n, err }
		},
	})
	defer func() { metrics.finish(recording, req.Method, code, written, time.Since(start)) }()
	defer h.observe(req.Context())

	ctx := withMount(req.Context(), h.label, h.mount.UID)
	if h.mount.Spec.Tunnel != nil {
		ctx = withDialFailure(ctx)
	}
	hop, err := hops(req.Header)
	if err != nil {
		code = http.StatusBadRequest
		writeStatus(w, newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error()))
		return
	}
	if maxHops := h.proxier.maxHops(); hop >= maxHops {
		code = http.StatusLoopDetected
		writeStatus(w, newStatus(http.StatusLoopDetected, ReasonLoopDetected, fmt.Sprintf(
			"the request has passed %d mount proxies already, at most %d are allowed: does the target of mount %q lead back to a mount proxy?", hop, maxHops, h.mount.Name)))
		return
	}
	upgrade := httpstream.IsUpgradeRequest(req)
	if upgrade {
		// A WebSocket exec is a GET; "get" on mounts/proxy must not be enough to run
		// commands on the target, so upgrades also need "create".
		if status := h.authorizeUpgrade(ctx); status != nil {
			s := status.Status()
			code = int(s.Code)
			writeStatus(w, &s)
			return
		}
		if max := int64(h.proxier.MaxUpgrades); max > 0 {
			if n := h.proxier.upgrades.Add(1); n > max {
				h.proxier.upgrades.Add(-1)
				code = http.StatusTooManyRequests
				w.Header().Set("Retry-After", RetryAfterSeconds)
				writeStatus(w, newStatus(http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, fmt.Sprintf(
					"this server has %d upgraded sessions (exec, attach, port-forward) open, its bound (--proxy-max-upgrades); try again later", max)))
				return
			}
			defer h.proxier.upgrades.Add(-1)
		}
	}
	longRunning := IsLongRunning(req, h.innerPath)
	if h.requestTimeout > 0 && !longRunning {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.requestTimeout)
		defer cancel()
	}

	out := req.Clone(ctx)
	scrubHeaders(out.Header, upgrade)
	out.Header.Set(HopsHeader, strconv.Itoa(hop+1))

	// The upgrade path dials Location as it is; only the plain path copies the query itself.
	location := *h.location
	location.RawQuery = req.URL.RawQuery
	if h.rules != nil && !h.rewriteRequest(w, out, &location, upgrade) {
		return
	}
	if !upgrade {
		h.servePlain(w, out, h.target.PlainRoundTripper(out.Header, h.imp), location, longRunning)
		return
	}
	answerTimeout := h.requestTimeout
	if answerTimeout == 0 {
		answerTimeout = DefaultUpgradeAnswerTimeout
	}
	guard := &upgradeGuard{deadline: time.Now().Add(answerTimeout)}
	out = out.WithContext(withUpgradeGuard(ctx, guard))
	// The handler hijacks the caller's connection once the target's answer is in.
	w = httpsnoop.Wrap(w, httpsnoop.Hooks{
		Hijack: func(next httpsnoop.HijackFunc) httpsnoop.HijackFunc {
			return func() (net.Conn, *bufio.ReadWriter, error) {
				guard.hijacked()
				h.reached.Store(true)
				conn, rw, err := next()
				if err != nil {
					return conn, rw, err
				}
				// The handler echoes a target's refusal of the upgrade as it is.
				return &refusedUpgradeConn{Conn: conn, replace: func() []byte {
					h.hopFailed.Store(true)
					klog.FromContext(ctx).V(2).Info("The target refused the mount's credentials", "mount", h.mount.Name, "target", h.target.Base.Host)
					var b bytes.Buffer
					res := newHopFailure(h.mount.Name, credentialsRefused(h.mount, h.target.Base.Host), h.innerPath).response(out)
					res.Close = true
					_ = res.Write(&b)
					return b.Bytes()
				}}, rw, nil
			}
		},
	})
	rt, upgradeRT := h.target.RoundTrippers(h.imp)
	proxy := utilproxy.NewUpgradeAwareHandler(&location, rt, false, false, responder{mount: h.mount.Name, target: h.target.Base.Host, innerPath: h.innerPath, guard: guard, failed: &h.hopFailed})
	proxy.UpgradeTransport = upgradeRT
	proxy.UseLocationHost = true
	proxy.ServeHTTP(w, out)
}

func (h *requestHandler) authorizeUpgrade(ctx context.Context) apierrors.APIStatus {
	if h.proxier.Authorizer == nil {
		return nil
	}
	attrs := authorizer.AttributesRecord{
		User:            h.caller,
		Verb:            "create",
		APIGroup:        mounts.GroupName,
		APIVersion:      v1alpha1.SchemeGroupVersion.Version,
		Resource:        "mounts",
		Subresource:     "proxy",
		Name:            h.mount.Name,
		ResourceRequest: true,
	}
	decision, reason, err := h.proxier.Authorizer.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		reason = err.Error()
	}
	return apierrors.NewForbidden(mounts.Resource("mounts/proxy"), h.mount.Name,
		fmt.Errorf("upgrade requests (exec, attach, port-forward) also need verb \"create\" on mounts/proxy: %s", reason))
}

// responder writes failures to reach the target as metav1.Status naming the mount.
type responder struct {
	mount, target, innerPath string
	// guard, for upgrades, knows when the answer's deadline passed.
	guard *upgradeGuard
	// failed, if set, is set when the responder answers a failure.
	failed *atomic.Bool
}

func (r responder) Error(w http.ResponseWriter, req *http.Request, err error) {
	if errors.Is(err, context.Canceled) && req.Context().Err() != nil {
		return // the caller went away; nobody reads an answer
	}
	if r.guard != nil && r.guard.timedOut() {
		// The upgrade handler flattens its dial errors into text.
		err = fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
	}
	var status *metav1.Status
	switch {
	case errors.Is(err, rewrite.ErrBusy):
		status = newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf("mount %q renames APIs: %v (--rewrite-document-memory-budget); retry", r.mount, err))
		// This server's own bound, not the hop: clients wait as for its 429s.
		w.Header().Set("Retry-After", RetryAfterSeconds)
	case errors.Is(err, errUnrewritable):
		status = newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("mount %q: %v", r.mount, err))
	default:
		status = statusForError(r.target, err)
	}
	if e, ok := noAgent(req.Context(), err); ok {
		s := e.Status()
		status = &s
	}
	klog.FromContext(req.Context()).V(2).Info("Proxying failed", "mount", r.mount, "code", status.Code, "err", err.Error())
	if r.failed != nil {
		r.failed.Store(true)
	}
	newHopFailure(r.mount, status, r.innerPath).ServeHTTP(w, req)
}

// observe tells the Observer what this request found when that differs from what the
// previous request to the mount's Target found: the Target keeps the last finding, so a
// mount under steady use costs its observer nothing. Workspace mounts share one Target (kcp)
// and their status comes from their workspace, not from requests.
func (h *requestHandler) observe(ctx context.Context) {
	observer := h.proxier.observer.Load()
	if observer == nil || h.mount.Spec.Type != mounts.MountTypeURL {
		return
	}
	var found int32
	switch {
	case h.hopFailed.Load():
		found = targetFailed
	case h.reached.Load():
		found = targetReached
	default:
		return // the caller went away first: nothing was found
	}
	if h.target.found.Swap(found) != found {
		(*observer)(ctx, h.mount, found == targetReached)
	}
}
