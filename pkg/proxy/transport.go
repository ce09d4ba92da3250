package proxy

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
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
	key            targetKey
	lastUsed       time.Time
}

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

// targetKey identifies what a Target was built from: a change of any part rebuilds it.
type targetKey struct {
	secretResourceVersion string
	mountGeneration       int64
}

// TransportOptions bound what the cache builds.
type TransportOptions struct {
	// ConnectTimeout is the dial plus TLS handshake bound of mounts that set none.
	ConnectTimeout time.Duration
	// MaxIdleConnsPerMount bounds idle connections kept to one target.
	MaxIdleConnsPerMount int
	// IdleExpiry drops a mount's transports when it was not used for this long.
	IdleExpiry time.Duration
}

// Transports caches one Target per Mount, so requests reuse connections instead of dialing
// per request, and rebuilds it when the Mount's spec or its Secret changes.
type Transports struct {
	opts    TransportOptions
	metrics *Metrics

	mu      sync.Mutex
	targets map[types.UID]*Target
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
	return &Transports{opts: opts, metrics: metrics, targets: map[types.UID]*Target{}}
}

// Get returns the cached Target of a mount, or builds one with build when there is none or
// it was built from another secret resourceVersion or mount generation.
func (t *Transports) Get(uid types.UID, mountName, secretResourceVersion string, generation int64, connectTimeout time.Duration, build func() (*rest.Config, []byte, error)) (*Target, error) {
	key := targetKey{secretResourceVersion: secretResourceVersion, mountGeneration: generation}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.targets[uid]; ok {
		if cur.key == key {
			cur.lastUsed = time.Now()
			return cur, nil
		}
		// Rotated credentials or a changed spec: connections made with the old ones go.
		cur.close()
		delete(t.targets, uid)
	}
	cfg, caOverride, err := build()
	if err != nil {
		return nil, err
	}
	if connectTimeout == 0 {
		connectTimeout = t.opts.ConnectTimeout
	}
	target, err := t.newTarget(mountName, cfg, caOverride, connectTimeout)
	if err != nil {
		return nil, err
	}
	target.key = key
	target.lastUsed = time.Now()
	t.targets[uid] = target
	return target, nil
}

// Forget drops the Target of a deleted mount and closes its idle connections.
func (t *Transports) Forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.targets[uid]; ok {
		cur.close()
		delete(t.targets, uid)
	}
}

// Len is the number of cached targets.
func (t *Transports) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.targets)
}

// Run drops targets unused for IdleExpiry until ctx ends; it also catches mounts deleted
// through another replica.
func (t *Transports) Run(ctx context.Context) {
	ticker := time.NewTicker(t.opts.IdleExpiry / 4)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			t.mu.Lock()
			for uid, target := range t.targets {
				if now.Sub(target.lastUsed) > t.opts.IdleExpiry {
					target.close()
					delete(t.targets, uid)
				}
			}
			t.mu.Unlock()
		}
	}
}

func (t *Transports) newTarget(mountName string, cfg *rest.Config, caOverride []byte, connectTimeout time.Duration) (*Target, error) {
	base, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: server URL does not parse", ErrCredentials)
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS settings are unusable", ErrCredentials)
	}
	if len(caOverride) > 0 && tlsConfig != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caOverride) {
			return nil, fmt.Errorf("%w: spec.caBundle holds no certificate", ErrCredentials)
		}
		tlsConfig.RootCAs = pool
	}

	dialer := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err == nil {
			t.metrics.connectionOpened(mountName)
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
	}
	upgradeTLS := tlsConfig
	if upgradeTLS != nil {
		upgradeTLS = tlsConfig.Clone()
		// Upgrades (SPDY, WebSocket) need HTTP/1.1.
		upgradeTLS.NextProtos = []string{"http/1.1"}
	}
	upgrade := &http.Transport{
		Proxy:               nil,
		DialContext:         dial,
		TLSClientConfig:     upgradeTLS,
		TLSHandshakeTimeout: connectTimeout,
		MaxIdleConnsPerHost: -1,
	}

	// The mount's credentials (bearer token or basic auth) ride on every request; client
	// certificates are in the TLS configuration.
	authCfg := &rest.Config{BearerToken: cfg.BearerToken, Username: cfg.Username, Password: cfg.Password}
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
	}, nil
}

func (t *Target) close() {
	t.plain.CloseIdleConnections()
	t.upgrade.CloseIdleConnections()
}
