package proxy

import (
	"context"
	"crypto/tls"
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
	key            TargetKey
	users          int
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

// TargetKey identifies what a Target is built from. Mounts with equal keys share one Target,
// so 10,000 mounts of one cluster share one connection pool; any change of a part (a rotated
// Secret, another CA override or connect timeout) means another Target.
type TargetKey struct {
	SecretNamespace, SecretName, SecretResourceVersion string
	// CABundle is spec.caBundle as a string (comparable).
	CABundle       string
	ConnectTimeout time.Duration
}

// TransportOptions bound what the cache builds.
type TransportOptions struct {
	// ConnectTimeout is the dial plus TLS handshake bound of mounts that set none.
	ConnectTimeout time.Duration
	// MaxIdleConnsPerMount bounds idle connections kept to one target.
	MaxIdleConnsPerMount int
	// IdleExpiry drops a mount's transports when it was not used for this long.
	IdleExpiry time.Duration
	// Policy decides which targets may be reached; nil is the default policy.
	Policy *targetpolicy.Policy
}

// Transports caches Targets, so requests reuse connections instead of dialing per request: one
// per TargetKey, shared by the mounts that have it, rebuilt when the Secret or the spec
// changes the key.
type Transports struct {
	opts    TransportOptions
	metrics *Metrics

	mu      sync.Mutex
	targets map[TargetKey]*Target
	mounts  map[types.UID]TargetKey
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
	return &Transports{opts: opts, metrics: metrics, targets: map[TargetKey]*Target{}, mounts: map[types.UID]TargetKey{}}
}

// Get returns the Target of a mount: the cached one of its key, or one built with build. A
// mount whose key changed (a rotated Secret, a changed spec) lets go of its old Target, which
// closes when no mount uses it any more.
func (t *Transports) Get(uid types.UID, mountName string, key TargetKey, build func() (*rest.Config, error)) (*Target, error) {
	if key.ConnectTimeout == 0 {
		key.ConnectTimeout = t.opts.ConnectTimeout
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.mounts[uid]; ok && old != key {
		t.release(uid)
	}
	if cur, ok := t.targets[key]; ok {
		if _, had := t.mounts[uid]; !had {
			cur.users++
			t.mounts[uid] = key
		}
		cur.lastUsed = time.Now()
		return cur, nil
	}
	cfg, err := build()
	if err != nil {
		return nil, err
	}
	target, err := t.newTarget(mountName, cfg, []byte(key.CABundle), key.ConnectTimeout)
	if err != nil {
		return nil, err
	}
	target.key, target.users, target.lastUsed = key, 1, time.Now()
	t.targets[key] = target
	t.mounts[uid] = key
	return target, nil
}

// Forget lets go of a deleted mount's Target, closing it when no other mount uses it.
func (t *Transports) Forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.release(uid)
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
			t.mu.Unlock()
		}
	}
}

func (t *Transports) newTarget(mountName string, cfg *rest.Config, caOverride []byte, connectTimeout time.Duration) (*Target, error) {
	base, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: server URL does not parse", ErrCredentials)
	}
	// Scheme and literal host now; every address actually connected to when dialing.
	policy := t.opts.Policy
	if err := policy.CheckURL(base); err != nil {
		return nil, err
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS settings are unusable", ErrCredentials)
	}
	if tlsConfig == nil && base.Scheme == "https" {
		// client-go has no TLS configuration without CA data or a client certificate. Make
		// one anyway: the upgrade dialer turns verification off on a nil one, spec.caBundle
		// needs one to replace the roots in, and the own-certificate check lives in it.
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if tlsConfig != nil {
		tlsConfig.VerifyConnection = refuseOwnCertificate(policy)
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
		conn, err := dialAllowed(ctx, *dialer, policy, network, addr)
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
