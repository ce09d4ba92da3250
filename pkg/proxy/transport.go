package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"k8s.io/apimachinery/pkg/types"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/deadpeer"
	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
)

// Target is how to reach one Mount's target: where, and through which transports.
type Target struct {
	// Base is the target's URL; its path is the base under which proxied paths are joined.
	Base *url.URL
	// ConnectTimeout bounds dial plus TLS handshake.
	ConnectTimeout time.Duration

	// transport carries plain requests: keep-alives, HTTP/2 where the target speaks it, and
	// the mount's credentials. upgrade dials upgrade requests (exec, attach, port-forward)
	// over HTTP/1.1; upgradeAuth adds the mount's credentials to them.
	transport      http.RoundTripper
	upgradeAuth    http.RoundTripper
	plain, upgrade *http.Transport
	// errorLog is the plain reverse proxy's (servePlain).
	errorLog *log.Logger
	key      TargetKey
	users    int
	lastUsed time.Time
	// found is what the last request through a mount found of the target: targetReached or
	// targetFailed, 0 before the first (requestHandler.observe).
	found atomic.Int32
}

// What a request found of its target.
const (
	targetReached int32 = iota + 1
	targetFailed
)

// RoundTrippers returns the round trippers of one request: the shared ones, with the caller's
// identity impersonated on top when imp is not nil.
func (t *Target) RoundTrippers(imp *transport.ImpersonationConfig) (http.RoundTripper, utilproxy.UpgradeRequestRoundTripper) {
	rt, upgradeAuth := t.transport, t.upgradeAuth
	if imp != nil {
		rt = transport.NewImpersonatingRoundTripper(*imp, rt)
		upgradeAuth = transport.NewImpersonatingRoundTripper(*imp, upgradeAuth)
	}
	return rt, utilproxy.NewUpgradeRequestRoundTripper(t.upgrade, upgradeAuth)
}

// PlainRoundTripper returns the round tripper of one plain request whose headers are h (the
// request's own copy): the shared one, with the caller's identity impersonated when imp is not
// nil. The impersonation headers are set on h directly, as client-go's impersonating round
// tripper would set them (TestPlainImpersonationAsClientGo), which saves that round tripper's
// copy of every request.
func (t *Target) PlainRoundTripper(h http.Header, imp *transport.ImpersonationConfig) http.RoundTripper {
	if imp == nil {
		return t.transport
	}
	h.Set(transport.ImpersonateUserHeader, imp.UserName)
	if imp.UID != "" {
		h.Set(transport.ImpersonateUIDHeader, imp.UID)
	}
	for _, g := range imp.Groups {
		h.Add(transport.ImpersonateGroupHeader, g)
	}
	for k, values := range imp.Extra {
		name := transport.ImpersonateUserExtraHeaderPrefix + escapeExtraKey(k)
		for _, v := range values {
			h.Add(name, v)
		}
	}
	return t.transport
}

// escapeExtraKey percent-encodes (RFC 3986, 2.1) the bytes of an extra field's name that
// cannot be part of a header name, and '%' itself, so that the target's unescaping gives the
// name back.
func escapeExtraKey(k string) string {
	plain := func(c byte) bool { return c < utf8.RuneSelf && c != '%' && httpguts.IsTokenRune(rune(c)) }
	i := 0
	for i < len(k) && plain(k[i]) {
		i++
	}
	if i == len(k) {
		return k
	}
	var b strings.Builder
	b.WriteString(k[:i])
	for ; i < len(k); i++ {
		if c := k[i]; plain(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// TargetKey identifies what a Target is built from. Mounts with equal keys share one Target,
// so 10,000 mounts of one cluster share one connection pool; any change of a part (a rotated
// Secret, another CA override or connect timeout) means another Target.
type TargetKey struct {
	// Provider, when set, names credentials of the server's own instead of a Secret:
	// TargetProviderKcp for kcp (Workspace mounts).
	Provider string
	// Cluster is the logical cluster the Secret was read from: two clusters' Secrets of equal
	// namespace, name and resourceVersion are different credentials.
	Cluster                                            clusters.Name
	SecretNamespace, SecretName, SecretResourceVersion string
	// CABundle is spec.caBundle as a string (comparable).
	CABundle       string
	ConnectTimeout time.Duration
	// Tunnel is the session key of a mount reached through its agent (tunnel.go): such a
	// Target dials through the tunnel, and belongs to that one mount.
	Tunnel string
}

// TransportOptions bound what the cache builds.
type TransportOptions struct {
	// ConnectTimeout is the dial plus TLS handshake bound of mounts that set none.
	ConnectTimeout time.Duration
	// MaxIdleConnsPerMount bounds idle connections kept to one target.
	MaxIdleConnsPerMount int
	// IdleExpiry drops a mount's transports, and a remembered build failure, when it was not
	// used for this long.
	IdleExpiry time.Duration
	// Policy decides which targets may be reached; nil is the default policy.
	Policy *targetpolicy.Policy
	// MaxFailures bounds the build failures remembered (0: DefaultMaxFailures).
	MaxFailures int
	// PingAfter is how long an HTTP/2 connection to a target may go without a frame from it
	// before it is pinged; PingTimeout how long the ping may go unanswered before the
	// connection is closed. 0 takes DefaultPingAfter and DefaultPingTimeout.
	PingAfter, PingTimeout time.Duration
}

// DefaultPingAfter and DefaultPingTimeout find a kept connection to a target that went silent
// without a reset within 20 s: a hop to a replica whose node vanished, a tunnel whose agent
// did. Without them Go's HTTP/2 transport keeps such a connection until the kernel gives up
// on it (minutes), and every request of the mount that reuses it hangs meanwhile. client-go
// uses 30 s and 15 s; the tunnels' failover is promised within 30 s. Go's HTTP/2 transport
// keeps a closed connection (about 20 KiB) until its ping timer fires once more: with probes'
// connections closed after each probe (10,000 tunnel mounts), 100 probes a second hold about
// 1,000 of them.
const (
	DefaultPingAfter   = 10 * time.Second
	DefaultPingTimeout = 10 * time.Second
)

// targetSessionCacheSize bounds the TLS sessions a Target keeps for resumption: a target is
// one server name, so a few are plenty.
const targetSessionCacheSize = 4

// DefaultMaxFailures bounds the remembered build failures: one per failing Secret version, a
// few hundred bytes each.
const DefaultMaxFailures = 4096

// Transports caches Targets, so requests reuse connections instead of dialing per request: one
// per TargetKey, shared by the mounts that have it, rebuilt when the Secret or the spec
// changes the key.
//
// Building a Target (parsing the kubeconfig, loading certificates) happens outside the lock:
// a slow or failing kubeconfig delays only the mounts of its own key, which wait for the one
// build in flight. A failed build is remembered for its key, and since the key holds the
// Secret's resourceVersion, a broken Secret is parsed once per version, not per request or
// probe, and a fixed one is built at once.
type Transports struct {
	opts    TransportOptions
	metrics *Metrics

	mu       sync.Mutex
	targets  map[TargetKey]*Target
	building map[TargetKey]*pendingBuild
	failures map[TargetKey]*failure
	mounts   map[types.UID]TargetKey
	// caPools shares the parsed CA bundles of the Targets.
	caPools *caPools
}

// pendingBuild is a Target being built; done is closed when target or err is set.
type pendingBuild struct {
	done   chan struct{}
	target *Target
	err    error
}

// failure is a remembered failed build.
type failure struct {
	err      error
	lastUsed time.Time
}

// NewTransports returns an empty cache.
func NewTransports(opts TransportOptions, metrics *Metrics) *Transports {
	if opts.ConnectTimeout == 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	if opts.MaxIdleConnsPerMount == 0 {
		opts.MaxIdleConnsPerMount = 16
	}
	if opts.IdleExpiry == 0 {
		opts.IdleExpiry = 10 * time.Minute
	}
	if opts.Policy == nil {
		opts.Policy = targetpolicy.New(targetpolicy.Config{})
	}
	if opts.MaxFailures <= 0 {
		opts.MaxFailures = DefaultMaxFailures
	}
	if opts.PingAfter <= 0 {
		opts.PingAfter = DefaultPingAfter
	}
	if opts.PingTimeout <= 0 {
		opts.PingTimeout = DefaultPingTimeout
	}
	return &Transports{
		opts:     opts,
		metrics:  metrics,
		targets:  map[TargetKey]*Target{},
		building: map[TargetKey]*pendingBuild{},
		failures: map[TargetKey]*failure{},
		mounts:   map[types.UID]TargetKey{},
		caPools:  newCAPools(),
	}
}

// Get returns the Target of a mount: the cached one of its key, or one built with build; or
// the error of the key's last build. A mount whose key changed (a rotated Secret, a changed
// spec) lets go of its old Target, which closes when no mount uses it any more. Waiting for
// another caller's build of the same key ends with ctx.
func (t *Transports) Get(ctx context.Context, uid types.UID, key TargetKey, buildConfig func() (*rest.Config, error)) (*Target, error) {
	if key.ConnectTimeout == 0 {
		key.ConnectTimeout = t.opts.ConnectTimeout
	}
	return t.get(ctx, uid, key, func() (*Target, error) { return t.build(key, buildConfig) })
}

// get is Get with the build of the Target of key (whose connect timeout is set) given.
func (t *Transports) get(ctx context.Context, uid types.UID, key TargetKey, build func() (*Target, error)) (*Target, error) {
	t.mu.Lock()
	for {
		if old, ok := t.mounts[uid]; ok && old != key {
			t.release(uid)
		}
		now := time.Now()
		if cur, ok := t.targets[key]; ok {
			if _, had := t.mounts[uid]; !had {
				cur.users++
				t.mounts[uid] = key
			}
			cur.lastUsed = now
			t.mu.Unlock()
			return cur, nil
		}
		if f, ok := t.failures[key]; ok {
			f.lastUsed = now
			t.mu.Unlock()
			return nil, f.err
		}
		if b, ok := t.building[key]; ok {
			t.mu.Unlock()
			select {
			case <-b.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("waiting for the transport of the mount's target: %w", ctx.Err())
			}
			if b.err != nil {
				return nil, b.err
			}
			t.mu.Lock()
			continue // the built Target is in targets now (or already expired: build again)
		}

		b := &pendingBuild{done: make(chan struct{})}
		t.building[key] = b
		t.mu.Unlock()
		b.target, b.err = build()
		t.mu.Lock()
		delete(t.building, key)
		if b.err != nil {
			t.remember(key, b.err, time.Now())
			t.mu.Unlock()
			close(b.done)
			return nil, b.err
		}
		// No user yet: this caller registers itself in the next round, under the same lock.
		b.target.key, b.target.lastUsed = key, time.Now()
		t.targets[key] = b.target
		close(b.done)
	}
}

// build builds the Target of key; it runs without the lock.
func (t *Transports) build(key TargetKey, buildConfig func() (*rest.Config, error)) (*Target, error) {
	cfg, err := buildConfig()
	if err != nil {
		return nil, err
	}
	return t.newTarget(cfg, []byte(key.CABundle), key.ConnectTimeout)
}

// remember records a failed build, dropping failures idle for IdleExpiry, or else any one,
// when MaxFailures are remembered. Dropping one only costs a build again. t.mu is held.
func (t *Transports) remember(key TargetKey, err error, now time.Time) {
	if len(t.failures) >= t.opts.MaxFailures {
		t.expireFailures(now)
	}
	for k := range t.failures {
		if len(t.failures) < t.opts.MaxFailures {
			break
		}
		delete(t.failures, k)
	}
	t.failures[key] = &failure{err: err, lastUsed: now}
}

func (t *Transports) expireFailures(now time.Time) {
	for k, f := range t.failures {
		if now.Sub(f.lastUsed) > t.opts.IdleExpiry {
			delete(t.failures, k)
		}
	}
}

// Forget lets go of a deleted mount's Target, closing it when no other mount uses it.
func (t *Transports) Forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.release(uid)
}

// closeIdle closes the idle connections of the Target of the mount of uid, if cached and
// that mount's alone: a Target shared by mounts of one key (one Secret's, or kcp's) keeps
// them for the others' probes and requests.
func (t *Transports) closeIdle(uid types.UID) {
	t.mu.Lock()
	target, ok := t.targets[t.mounts[uid]]
	alone := ok && target.users == 1
	t.mu.Unlock()
	if alone {
		target.plain.CloseIdleConnections()
	}
}

func (t *Transports) release(uid types.UID) {
	key, ok := t.mounts[uid]
	if !ok {
		return
	}
	delete(t.mounts, uid)
	if cur, ok := t.targets[key]; ok {
		if cur.users--; cur.users <= 0 {
			cur.close()
			delete(t.targets, key)
		}
	}
}

// Len is the number of cached targets.
func (t *Transports) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.targets)
}

// Failures is the number of remembered build failures.
func (t *Transports) Failures() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.failures)
}

// Run drops targets and remembered failures unused for IdleExpiry until ctx ends; it also
// catches mounts deleted through another replica.
func (t *Transports) Run(ctx context.Context) {
	ticker := time.NewTicker(t.opts.IdleExpiry / 4)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			t.expire(now)
		}
	}
}

func (t *Transports) expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, target := range t.targets {
		if now.Sub(target.lastUsed) > t.opts.IdleExpiry {
			target.close()
			delete(t.targets, key)
		}
	}
	for uid, key := range t.mounts {
		if _, ok := t.targets[key]; !ok {
			delete(t.mounts, uid)
		}
	}
	t.expireFailures(now)
}

func (t *Transports) newTarget(cfg *rest.Config, caOverride []byte, connectTimeout time.Duration) (*Target, error) {
	return t.newTargetVia(cfg, caOverride, connectTimeout, nil)
}

// newTargetVia builds a Target that dials with via instead of the network when via is set
// (a tunnel, tunnel.go).
func (t *Transports) newTargetVia(cfg *rest.Config, caOverride []byte, connectTimeout time.Duration, via func(ctx context.Context) (net.Conn, error)) (*Target, error) {
	base, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: server URL does not parse", ErrCredentials)
	}
	// Scheme and literal host now; every address actually connected to when dialing.
	policy := t.opts.Policy
	if via == nil {
		if err := policy.CheckURL(base); err != nil {
			return nil, err
		}
	} else if err := checkTunnelURL(base); err != nil {
		return nil, err
	}
	// The CA bundle is parsed once for all Targets that hold it (caPools), not by client-go for
	// each; client-go still checks the rest (it refuses a CA beside insecure, which a Secret's
	// kubeconfig may not set anyway).
	shareCA := len(cfg.CAData) > 0 && cfg.CAFile == "" && !cfg.Insecure
	tlsCfg := cfg
	if shareCA {
		tlsCfg = rest.CopyConfig(cfg)
		tlsCfg.CAData = nil
	}
	tlsConfig, err := rest.TLSConfigFor(tlsCfg)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS settings are unusable", ErrCredentials)
	}
	if shareCA {
		if tlsConfig == nil {
			tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		pool, ok := t.caPools.get(cfg.CAData)
		if !ok {
			// client-go refuses a bundle without a certificate too.
			return nil, fmt.Errorf("%w: TLS settings are unusable", ErrCredentials)
		}
		tlsConfig.RootCAs = pool
	}
	if tlsConfig == nil && base.Scheme == "https" {
		// client-go has no TLS configuration without CA data or a client certificate. Make
		// one anyway: the upgrade dialer turns verification off on a nil one, spec.caBundle
		// needs one to replace the roots in, and the own-certificate check lives in it.
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if tlsConfig != nil {
		tlsConfig.VerifyConnection = refuseOwnCertificate(policy)
		// A new connection to a target resumes the Target's last TLS session: a Kubernetes
		// API server closes idle connections after 90 s, and past 9,000 mounts the status
		// probes come less often than that (--status-probes-qps), so each probe dialed
		// afresh. Full handshakes were a quarter of the CPU of a replica idling with 10,000
		// tunnel mounts; a resumed one skips the certificates' verification and signatures.
		// The cache is the Target's own, so a session is only ever resumed with the
		// credentials and trust it was made with (VerifyConnection runs on resumption too).
		tlsConfig.ClientSessionCache = tls.NewLRUClientSessionCache(targetSessionCacheSize)
	}
	if len(caOverride) > 0 && tlsConfig != nil {
		pool, ok := t.caPools.get(caOverride)
		if !ok {
			return nil, fmt.Errorf("%w: spec.caBundle holds no certificate", ErrCredentials)
		}
		tlsConfig.RootCAs = pool
	}

	dialer := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		var err error
		if via != nil {
			conn, err = via(ctx)
		} else {
			conn, err = dialAllowed(ctx, *dialer, policy, network, addr)
		}
		if err == nil {
			// A Target serves all mounts of its key: the connection counts for the mount
			// whose request or probe dialed it.
			t.metrics.connectionOpened(ctx)
			// An upgraded stream (exec, port-forward) has no HTTP/2 pings: a target whose
			// node vanished would hold it for the kernel's minutes. Plain connections share
			// this dial; their pings would end them as soon.
			conn = deadpeer.TuneOrLog(ctx, conn)
		}
		return conn, err
	}
	plain := &http.Transport{
		// Never through an environment proxy: targets are reached as the kubeconfig says.
		Proxy:                 nil,
		DialContext:           dial,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   connectTimeout,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          t.opts.MaxIdleConnsPerMount,
		MaxIdleConnsPerHost:   t.opts.MaxIdleConnsPerMount,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		HTTP2:                 &http.HTTP2Config{SendPingTimeout: t.opts.PingAfter, PingTimeout: t.opts.PingTimeout},
	}
	upgradeTLS := tlsConfig
	if upgradeTLS != nil {
		upgradeTLS = tlsConfig.Clone()
		// Upgrades (SPDY, WebSocket) need HTTP/1.1.
		upgradeTLS.NextProtos = []string{"http/1.1"}
		// Not the plain transport's sessions, made for HTTP/2: an upgrade resuming one of
		// them did not reach the target (TestUpgradeCannotSmuggleAwayImpersonation). Upgrades
		// are few; they make full handshakes.
		upgradeTLS.ClientSessionCache = nil
	}
	upgrade := &http.Transport{
		Proxy:               nil,
		DialContext:         guardUpgradeDial(dial),
		TLSClientConfig:     upgradeTLS,
		TLSHandshakeTimeout: connectTimeout,
		MaxIdleConnsPerHost: -1,
	}

	// The mount's credentials (bearer token or basic auth) ride on every request; client
	// certificates are in the TLS configuration. A token file is only possible in the
	// server's own kubeconfigs (a Secret's kubeconfig may not name files); it is re-read as
	// it rotates.
	authCfg := &rest.Config{BearerToken: cfg.BearerToken, BearerTokenFile: cfg.BearerTokenFile, Username: cfg.Username, Password: cfg.Password}
	rt, err := rest.HTTPWrappersForConfig(authCfg, plain)
	if err != nil {
		return nil, fmt.Errorf("%w: credentials are unusable", ErrCredentials)
	}
	upgradeAuth, err := rest.HTTPWrappersForConfig(authCfg, utilproxy.MirrorRequest)
	if err != nil {
		return nil, fmt.Errorf("%w: credentials are unusable", ErrCredentials)
	}
	return &Target{
		Base:           base,
		ConnectTimeout: connectTimeout,
		transport:      rt,
		upgradeAuth:    upgradeAuth,
		plain:          plain,
		upgrade:        upgrade,
		errorLog:       newErrorLog(),
	}, nil
}

func (t *Target) close() {
	t.plain.CloseIdleConnections()
	t.upgrade.CloseIdleConnections()
}
