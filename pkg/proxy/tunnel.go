package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// TargetProviderAgent is the TargetKey provider of mounts whose agent adds its own
// credentials (spec.tunnel.credentials Agent): no Secret is involved.
const TargetProviderAgent = "tunnel-agent"

// ReasonNoAgent is the reason of the CredentialsError of a tunnel mount on a server that
// serves no tunnels.
const ReasonNoAgent = "TunnelUnavailable"

// NoAgentError says that no agent holds the tunnel session of a mount: 503, retry later.
type NoAgentError struct {
	Mount string
	Err   error
}

func (e *NoAgentError) Error() string {
	return fmt.Sprintf("mount %q: no agent is connected to its tunnel (an agent attaches at mounts/%s/attach)", e.Mount, e.Mount)
}

func (e *NoAgentError) Unwrap() error { return e.Err }

// Status makes the error an API error.
func (e *NoAgentError) Status() metav1.Status {
	return *newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, e.Error())
}

// tunnelDialer returns the dial of a tunnel mount's Target: through the session of its key,
// to address (tunnel.AddressTarget or tunnel.AddressAgent). The network address that the
// transport asks for is not used: the agent knows its one target. A missing session is
// recorded in the request's context as well, since the upgrade path loses the error's type.
func (p *Proxier) tunnelDialer(name, key, address string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		conn, err := p.Tunnels.DialContext(ctx, key, address)
		if err != nil && errors.Is(err, tunnel.ErrNoSession) {
			err = &NoAgentError{Mount: name, Err: err}
			if r, ok := ctx.Value(dialFailureKey{}).(*dialFailure); ok {
				r.set(err)
			}
		}
		return conn, err
	}
}

// tunnelTarget resolves the Target of a mount with spec.tunnel whose credentials are the
// agent's. The Target speaks plain HTTP to the agent's in-process proxy (tunnel.AddressAgent),
// which adds the agent's own credentials and passes on only the impersonation headers. The
// refusal of plain-http targets does not apply: no credential travels, and the bytes go
// inside the agent's own TLS WebSocket to this server; the hop from the agent to its cluster
// is TLS with the agent's credentials. A Target of this kind serves one mount (the key holds
// its session key).
func (p *Proxier) agentTarget(ctx context.Context, m *mounts.Mount) (*Target, error) {
	if p.Tunnels == nil {
		return nil, &CredentialsError{ReasonNoAgent, fmt.Sprintf("mount %q is reached through an agent's tunnel, which this server does not serve", m.Name)}
	}
	cluster := clusters.From(ctx)
	sessionKey := tunnel.SessionKey(cluster, m.UID)
	key := TargetKey{Provider: TargetProviderAgent, Cluster: cluster, Tunnel: sessionKey, ConnectTimeout: p.Transports.opts.ConnectTimeout}
	if t := m.Spec.Timeouts; t != nil && t.ConnectSeconds != nil {
		key.ConnectTimeout = time.Duration(*t.ConnectSeconds) * time.Second
	}
	via := p.tunnelDialer(m.Name, sessionKey, tunnel.AddressAgent)
	return p.Transports.get(ctx, m.UID, key, func() (*Target, error) {
		return p.Transports.newAgentTarget(key.ConnectTimeout, via)
	})
}

// serverTunnelTarget resolves the Target of a mount with spec.tunnel whose credentials are
// the server's: the kubeconfig of its Secret, TLS end to end (server name from the
// kubeconfig's URL), each connection dialed through the tunnel to tunnel.AddressTarget.
func (p *Proxier) serverTunnelTarget(ctx context.Context, m *mounts.Mount, key TargetKey, buildConfig func() (*rest.Config, error)) (*Target, error) {
	if p.Tunnels == nil {
		return nil, &CredentialsError{ReasonNoAgent, fmt.Sprintf("mount %q is reached through an agent's tunnel, which this server does not serve", m.Name)}
	}
	key.Tunnel = tunnel.SessionKey(key.Cluster, m.UID)
	if key.ConnectTimeout == 0 {
		key.ConnectTimeout = p.Transports.opts.ConnectTimeout
	}
	via := p.tunnelDialer(m.Name, key.Tunnel, tunnel.AddressTarget)
	return p.Transports.get(ctx, m.UID, key, func() (*Target, error) {
		cfg, err := buildConfig()
		if err != nil {
			return nil, err
		}
		return p.Transports.newTargetVia(cfg, []byte(key.CABundle), key.ConnectTimeout, via)
	})
}

// checkTunnelURL checks the server URL of a kubeconfig reached through a tunnel. The target
// policy (which addresses this server may dial) does not apply: this server dials nothing,
// the agent dials its one configured target, and the URL is only the name TLS verifies. It
// must be https: the mount's credentials travel to the target, and the tunnel promises TLS
// end to end.
func checkTunnelURL(u *url.URL) error {
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%w: a mount reached through a tunnel with the server's credentials needs an https server URL (TLS runs end to end through the tunnel)", ErrCredentials)
	}
	return nil
}

// newAgentTarget builds the Target of an agent-credential tunnel.
func (t *Transports) newAgentTarget(connectTimeout time.Duration, via func(ctx context.Context) (net.Conn, error)) (*Target, error) {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		conn, err := via(ctx)
		if err == nil {
			t.metrics.connectionOpened(ctx)
		}
		return conn, err
	}
	plain := &http.Transport{
		Proxy:                 nil,
		DialContext:           dial,
		MaxIdleConns:          t.opts.MaxIdleConnsPerMount,
		MaxIdleConnsPerHost:   t.opts.MaxIdleConnsPerMount,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	// The guard bounds the agent's answer to an upgrade in time and size, as a target's: an
	// agent is a tenant.
	upgrade := &http.Transport{Proxy: nil, DialContext: guardUpgradeDial(dial), MaxIdleConnsPerHost: -1}
	return &Target{
		Base:           &url.URL{Scheme: "http", Host: "agent"},
		ConnectTimeout: connectTimeout,
		transport:      anonymousUnlessImpersonating{plain},
		upgradeAuth:    anonymousUnlessImpersonating{utilproxy.MirrorRequest},
		plain:          plain,
		upgrade:        upgrade,
		errorLog:       newErrorLog(),
	}, nil
}

// anonymousUnlessImpersonating makes a request that impersonates nobody (the status probe)
// impersonate the anonymous user: the agent acts only for someone, never as itself, and
// anonymous may read /readyz and /version on a Kubernetes API server by default.
type anonymousUnlessImpersonating struct {
	next http.RoundTripper
}

func (a anonymousUnlessImpersonating) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get(transport.ImpersonateUserHeader) != "" {
		return a.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set(transport.ImpersonateUserHeader, user.Anonymous)
	req.Header.Set(transport.ImpersonateGroupHeader, user.AllUnauthenticated)
	return a.next.RoundTrip(req)
}

// WrappedRoundTripper lets k8s.io/apimachinery's upgrade dialer find the transport's dialer.
func (a anonymousUnlessImpersonating) WrappedRoundTripper() http.RoundTripper { return a.next }

// dialFailure keeps the tunnel error of one request's dial, for the upgrade path, whose
// errors reach the responder as text only.
type dialFailure struct {
	mu  sync.Mutex
	err error
}

type dialFailureKey struct{}

func (d *dialFailure) set(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

func (d *dialFailure) get() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// withDialFailure returns a context in which a tunnel dial records a missing session.
func withDialFailure(ctx context.Context) context.Context {
	return context.WithValue(ctx, dialFailureKey{}, &dialFailure{})
}

// noAgent returns the NoAgentError behind err, from err itself or recorded in ctx.
func noAgent(ctx context.Context, err error) (*NoAgentError, bool) {
	var e *NoAgentError
	if errors.As(err, &e) {
		return e, true
	}
	if r, ok := ctx.Value(dialFailureKey{}).(*dialFailure); ok {
		if errors.As(r.get(), &e) {
			return e, true
		}
	}
	return nil, false
}
