package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rancher/remotedialer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/deadpeer"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// Config is the agent's configuration.
type Config struct {
	// Hub is how to reach and authenticate to the hub.
	Hub *rest.Config
	// AttachURL is the WebSocket URL of the mount's attach subresource.
	AttachURL string
	// Mount names the mount in logs and metrics.
	Mount string
	// Target is host:port of the agent's one target (tunnel.AddressTarget).
	Target string
	// AgentHandler serves tunnel.AddressAgent: it adds the agent's own credentials. nil
	// answers 503: this agent has no credentials for its target.
	AgentHandler http.Handler
	// HealthBindAddress serves /healthz, /readyz and /metrics; empty serves nothing.
	HealthBindAddress string
	// MaxBackoff caps the wait between connection attempts.
	MaxBackoff time.Duration
	// SilenceTimeout is how long a session may go without a pong from the hub before the
	// agent drops it; zero is DefaultSilenceTimeout.
	SilenceTimeout time.Duration
	// Registry receives the agent's metrics (sessions, reconnects, dials, bytes), served on
	// /metrics; nil makes one of the agent's own.
	Registry metrics.KubeRegistry
	// OnSession, if set, is called each time a session is up (the bench counts reconnects
	// of thousands of agents in one process with it).
	OnSession func()
}

// Agent keeps the mount's tunnel session up.
type Agent struct {
	cfg      *Config
	metrics  *tunnel.Metrics
	registry metrics.KubeRegistry
	dialer   *websocket.Dialer
	agent    *pipeListener

	connected atomic.Bool
}

// New builds the agent.
func New(cfg *Config) (*Agent, error) {
	if cfg.Hub == nil || cfg.AttachURL == "" || cfg.Target == "" {
		return nil, errors.New("the agent needs the hub, the attach URL and a target")
	}
	tlsConfig, err := rest.TLSConfigFor(cfg.Hub)
	if err != nil {
		return nil, fmt.Errorf("hub TLS settings: %w", err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	// A WebSocket is HTTP/1.1.
	tlsConfig.NextProtos = []string{"http/1.1"}
	registry := cfg.Registry
	if registry == nil {
		registry = metrics.NewKubeRegistry()
	}
	m := tunnel.NewMetrics()
	m.Register(registry)
	handler := cfg.AgentHandler
	if handler == nil {
		handler = http.HandlerFunc(noCredentials)
	}
	return &Agent{
		cfg:      cfg,
		metrics:  m,
		registry: registry,
		dialer: &websocket.Dialer{
			// Agents behind an egress proxy reach the hub through HTTPS_PROXY.
			Proxy:            http.ProxyFromEnvironment,
			TLSClientConfig:  tlsConfig,
			HandshakeTimeout: 10 * time.Second,
		},
		agent: newPipeListener(handler),
	}, nil
}

// Connected says whether a session is up.
func (a *Agent) Connected() bool { return a.connected.Load() }

// Run keeps a session up until ctx ends, reconnecting with exponential backoff and jitter.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("mount", a.cfg.Mount)
	ctx = klog.NewContext(ctx, logger)
	defer a.agent.stop()
	if a.cfg.HealthBindAddress != "" {
		stop, err := a.serveHealth(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	initialBackoff := min(500*time.Millisecond, a.cfg.MaxBackoff)
	backoff := initialBackoff
	for ctx.Err() == nil {
		start := time.Now()
		up, err := a.connectOnce(ctx)
		if ctx.Err() != nil {
			break
		}
		if time.Since(start) > a.cfg.MaxBackoff {
			// A session that lasted starts the backoff anew.
			backoff = initialBackoff
		}
		// Full jitter on the upper half: agents of a failed replica do not come back at once.
		wait := backoff/2 + rand.N(backoff/2+1)
		var refused *refusedError
		busy := errors.As(err, &refused) && refused.retryAfter > 0
		if busy {
			// The hub said when to come back (tunnel.LimitAttaching spaces its turned-away
			// agents over the time it needs for them); within that second, at random.
			wait = min(refused.retryAfter, tunnel.MaxAttachRetryAfter) + rand.N(time.Second)
		}
		after := wait.Round(time.Millisecond)
		switch {
		case up:
			logger.Info("Tunnel session ended; reconnecting", "err", errString(err), "after", after)
		case busy:
			logger.Info("The hub is busy attaching other agents; coming back when it said", "after", after)
		case refused != nil:
			// What an operator must act on: the agent's hub credentials, its RBAC, the mount.
			logger.Error(err, "The hub refused the attach; retrying", "after", after)
		default:
			logger.Info("Cannot attach to the hub; retrying", "err", errString(err), "after", after)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		backoff = min(2*backoff, a.cfg.MaxBackoff)
	}
	logger.Info("Agent stopped")
	return nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// connectOnce holds one session until it ends. It does what remotedialer's
// ConnectToProxyWithDialer does (same protocol, same library), but closes the session only
// after its Serve returned: ConnectToProxyWithDialer of v0.6.1 races with its own ping
// start when ctx ends right after the connect (go test -race), and it logs the hub's answer
// to a refused attach without returning it.
// It says whether the session was up.
func (a *Agent) connectOnce(ctx context.Context) (bool, error) {
	headers, err := a.authHeaders()
	if err != nil {
		return false, err
	}
	ws, resp, err := a.dialer.DialContext(ctx, a.cfg.AttachURL, headers)
	if err != nil {
		if resp != nil {
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return false, &refusedError{status: resp.Status, message: statusMessage(body), retryAfter: retryAfter(resp)}
		}
		return false, fmt.Errorf("connecting to the hub: %w", err)
	}
	defer ws.Close()
	session := remotedialer.NewClientSessionWithDialer(allowed, ws, a.dial)
	// Serve's context also ends the session's pinger. Once Serve returned, the pinger is told
	// to stop and the WebSocket closed before the session's Close waits for the pinger: a
	// hub that stopped reading could hold a ping's write until remotedialer's 60 s deadline.
	serveCtx, stopServing := context.WithCancel(ctx)
	defer func() {
		stopServing()
		_ = ws.Close()
		session.Close()
	}()
	a.watchSilence(ws)
	// Ending ctx closes the WebSocket, which ends Serve.
	stop := context.AfterFunc(ctx, func() { _ = ws.Close() })
	defer stop()

	a.connected.Store(true)
	a.metrics.SessionStarted(a.cfg.Mount)
	if a.cfg.OnSession != nil {
		a.cfg.OnSession()
	}
	klog.FromContext(ctx).Info("Tunnel session up")
	defer func() {
		a.connected.Store(false)
		a.metrics.SessionEnded(a.cfg.Mount)
	}()
	_, err = session.Serve(serveCtx)
	return true, err
}

// watchSilence ends the session when the hub has not answered the agent's pings for
// SilenceTimeout: the read that waits for the hub's next frame fails, and Serve with it.
// NewClientSessionWithDialer has just set remotedialer's handlers, which allow 60 s; the
// pong handler set here replaces its own. A hub that vanished without resetting the
// connection (its node lost, the process stopped) is left within SilenceTimeout instead of a
// minute; a hub that answers is never left.
//
// Unlike remotedialer's, the handler sets no write deadline: it runs on the reading goroutine
// while the session's writers use the WebSocket, and gorilla's deadline is not guarded (a
// data race under -race). None is needed: a hub that stops reading stops answering pings
// too, and the silence closes the connection, which fails every write held up on it.
func (a *Agent) watchSilence(ws *websocket.Conn) {
	silence := a.cfg.SilenceTimeout
	if silence <= 0 {
		silence = DefaultSilenceTimeout
	}
	_ = ws.SetReadDeadline(time.Now().Add(silence))
	ws.SetPongHandler(func(string) error {
		return ws.SetReadDeadline(time.Now().Add(silence))
	})
}

// refusedError is the hub's answer to an attach it refused; retryAfter is when a busy hub (429)
// said to come back, 0 when it did not.
type refusedError struct {
	status, message string
	retryAfter      time.Duration
}

// retryAfter is the Retry-After (in seconds) of a 429, or 0.
func retryAfter(resp *http.Response) time.Duration {
	if resp.StatusCode != http.StatusTooManyRequests {
		return 0
	}
	seconds, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After")))
	if err != nil || seconds < 1 {
		return 0
	}
	return time.Duration(min(seconds, int(tunnel.MaxAttachRetryAfter/time.Second))) * time.Second
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("the hub refused the attach: %s: %s", e.status, e.message)
}

// statusMessage is the message of a metav1.Status body, or the body itself, in one line.
func statusMessage(body []byte) string {
	var status metav1.Status
	if json.Unmarshal(body, &status) == nil && status.Message != "" {
		return status.Message
	}
	return strings.Join(strings.Fields(string(body)), " ")
}

// authHeaders authenticate the WebSocket request with the hub kubeconfig's bearer token (a
// token file is read again on every attempt, so a rotated ServiceAccount token works);
// client certificates are in the TLS configuration.
func (a *Agent) authHeaders() (http.Header, error) {
	h := http.Header{}
	token := a.cfg.Hub.BearerToken
	if f := a.cfg.Hub.BearerTokenFile; f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading the hub token file: %w", err)
		}
		token = strings.TrimSpace(string(data))
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return h, nil
}

// allowed is the agent's answer to every connect the hub asks for: only the two addresses.
// remotedialer ends the whole session on a refused one, which a hub that follows the
// protocol never causes.
func allowed(proto, address string) bool {
	return proto == "tcp" && (address == tunnel.AddressTarget || address == tunnel.AddressAgent)
}

// dial maps the hub's addresses to what this agent was configured with.
func (a *Agent) dial(ctx context.Context, network, address string) (net.Conn, error) {
	start := time.Now()
	var conn net.Conn
	var err error
	switch address {
	case tunnel.AddressTarget:
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", a.cfg.Target)
		if err == nil {
			// The hub's exec streams to a target whose node vanished end like the hub's own.
			conn = deadpeer.TuneOrLog(ctx, conn)
		}
	case tunnel.AddressAgent:
		conn, err = a.agent.dial()
	default:
		a.metrics.Dialed(a.cfg.Mount, tunnel.DialRefused, 0)
		return nil, fmt.Errorf("refusing to dial %s %q: this agent dials only %s and %s", network, address, tunnel.AddressTarget, tunnel.AddressAgent)
	}
	if err != nil {
		a.metrics.Dialed(a.cfg.Mount, tunnel.DialError, time.Since(start))
		klog.FromContext(ctx).V(2).Info("Dial for the hub failed", "address", address, "err", err.Error())
		return nil, err
	}
	a.metrics.Dialed(a.cfg.Mount, tunnel.DialOK, time.Since(start))
	return a.metrics.CountBytes(a.cfg.Mount, conn), nil
}

// noCredentials answers tunnel.AddressAgent on an agent without credentials for its target.
// No Retry-After: the hub passes the answer on, and client-go would wait for it ten times.
func noCredentials(w http.ResponseWriter, _ *http.Request) {
	tunnel.WriteStatus(w, &metav1.Status{
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: "this agent has no credentials for its target: the mount's spec.tunnel.credentials Agent needs an agent run with --kubeconfig or in a pod with a ServiceAccount that may impersonate",
	})
}
