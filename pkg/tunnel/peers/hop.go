package peers

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/deadpeer"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// RelayPath is the owner's endpoint for hops; a non-resource path, so the host's aggregator
// never routes to it: only replicas that dial each other directly reach it.
const RelayPath = "/tunnel-relay"

// RelayProtocol is the Upgrade token of a hop: after 101 the connection carries the bytes of
// one connection through the owner's session.
const RelayProtocol = "mounts.kcp.io-tunnel-relay"

// DefaultHopTimeout bounds a hop from dial to 101: an owner that does not answer in time is
// treated as gone (503), and the agent's reconnect is what fixes it.
const DefaultHopTimeout = 3 * time.Second

// ErrOwnerUnreachable: the replica recorded as holding a session did not answer the hop.
var ErrOwnerUnreachable = errors.New("the replica that holds the session does not answer at")

// maxRefusalBody bounds what is read of an owner's refusal.
const maxRefusalBody = 4 << 10

// While hops to an owner are open, the dialing replica asks the owner's LivezPath every
// ownerCheckEvery; one that has not answered within ownerCheckTimeout is hung (a stopped or
// deadlocked process, whose kernel still answers TCP: neither pkg/deadpeer nor any ping sees
// it), and its hops are closed. An exec stream relayed through it would otherwise hang until
// its caller gives up. Together at most 20 s, as deadpeer.After for a vanished machine.
const (
	ownerCheckEvery   = 10 * time.Second
	ownerCheckTimeout = 10 * time.Second
)

// LivezPath is what a hop's owner is asked to show that its process still serves; any answer
// does (an owner may refuse the caller), only silence does not.
const LivezPath = "/livez"

// Hop dials the owning replica of a session: HTTPS verified against the peer CAs,
// authenticated with this replica's host credentials (bearer token or client certificate,
// which the owner's delegated authentication accepts), upgraded to a raw connection.
type Hop struct {
	tlsConfig *tls.Config
	// serverName, if set, is verified instead of the peer URL's host.
	serverName string
	wrap       func(http.RoundTripper) (http.RoundTripper, error)
	timeout    time.Duration
	metrics    *Metrics

	// checkEvery and checkTimeout pace the liveness checks of owners with open hops
	// (ownerCheckEvery, ownerCheckTimeout; shorter in tests).
	checkEvery, checkTimeout time.Duration
	// checks is the checks' client: kept connections, one per owner, so a check costs no
	// handshake.
	checks *http.Client

	mu sync.Mutex
	// open are the hops open to each owner (by URL), each owner with a watch while it has any.
	open map[string]map[*relayedConn]struct{}
}

// NewHop returns a Hop that authenticates as host (the replica's host kubeconfig or
// ServiceAccount) and trusts peerCAs only, verifying serverName in peers' certificates (empty:
// the host of their peer URL). timeout 0 takes DefaultHopTimeout.
func NewHop(host *rest.Config, peerCAs *x509.CertPool, serverName string, timeout time.Duration, m *Metrics) (*Hop, error) {
	if peerCAs == nil {
		return nil, errors.New("the hop to other replicas needs the CAs of their serving certificates")
	}
	tc, err := host.TransportConfig()
	if err != nil {
		return nil, fmt.Errorf("host credentials: %w", err)
	}
	// The client certificate (reloaded as client-go does) comes from the host config; whom
	// to trust does not: only the peer CAs, and always verified.
	tlsConfig, err := transport.TLSConfigFor(tc)
	if err != nil {
		return nil, fmt.Errorf("host credentials: %w", err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{}
	}
	tlsConfig.RootCAs = peerCAs
	tlsConfig.InsecureSkipVerify = false
	tlsConfig.ServerName = ""
	tlsConfig.MinVersion = tls.VersionTLS12
	// Upgrades are HTTP/1.1.
	tlsConfig.NextProtos = []string{"http/1.1"}
	if timeout <= 0 {
		timeout = DefaultHopTimeout
	}
	h := &Hop{
		tlsConfig:    tlsConfig,
		serverName:   serverName,
		wrap:         func(rt http.RoundTripper) (http.RoundTripper, error) { return transport.HTTPWrappersForConfig(tc, rt) },
		timeout:      timeout,
		metrics:      m,
		checkEvery:   ownerCheckEvery,
		checkTimeout: ownerCheckTimeout,
		open:         map[string]map[*relayedConn]struct{}{},
	}
	checksTLS := tlsConfig.Clone()
	checksTLS.ServerName = serverName
	checks, err := h.wrap(&http.Transport{
		Proxy:               nil,
		TLSClientConfig:     checksTLS,
		TLSHandshakeTimeout: timeout,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     3 * ownerCheckEvery,
	})
	if err != nil {
		return nil, fmt.Errorf("host credentials: %w", err)
	}
	h.checks = &http.Client{Transport: checks}
	return h, nil
}

// Dial asks peer to relay a connection to address through its session of key. Errors wrap
// tunnel.ErrNoSession when the owner does not answer or holds no session.
func (h *Hop) Dial(ctx context.Context, peer Peer, key, address string) (net.Conn, error) {
	start := time.Now()
	conn, result, err := h.dial(ctx, peer, key, address)
	h.metrics.hop(result, time.Since(start))
	if err != nil {
		return nil, err
	}
	h.track(ctx, peer, conn)
	return conn, nil
}

// track records c as open to peer until it is closed, and watches peer while any is.
func (h *Hop) track(ctx context.Context, peer Peer, c *relayedConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	conns, watched := h.open[peer.URL]
	if !watched {
		conns = map[*relayedConn]struct{}{}
		h.open[peer.URL] = conns
		// Not the dial's context: the watch outlives the request that dialed.
		go h.watch(klog.FromContext(ctx), peer)
	}
	conns[c] = struct{}{}
	c.release = func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.open[peer.URL], c)
	}
}

// watch checks peer every checkEvery while hops to it are open; when it does not answer, it
// closes them all. It ends once none is open.
func (h *Hop) watch(logger klog.Logger, peer Peer) {
	t := time.NewTicker(h.checkEvery)
	defer t.Stop()
	for range t.C {
		h.mu.Lock()
		if len(h.open[peer.URL]) == 0 {
			delete(h.open, peer.URL)
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		err := h.check(peer)
		if !silent(err) {
			// An answer, or a refused or reset connection, which ends the hops by itself.
			if err != nil {
				logger.V(2).Info("Liveness check of a replica that holds tunnel sessions failed", "owner", peer.Identity, "err", err.Error())
			}
			continue
		}
		h.mu.Lock()
		conns := h.open[peer.URL]
		delete(h.open, peer.URL)
		h.mu.Unlock()
		logger.Info("The replica that holds tunnel sessions did not answer its liveness check; closing the connections relayed through it", "owner", peer.Identity, "connections", len(conns), "err", err.Error())
		h.metrics.ownerHung(len(conns))
		for c := range conns {
			_ = c.Close()
		}
		return
	}
}

// silent says whether a check's error is that nothing answered in time.
func silent(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// check asks peer's LivezPath within checkTimeout. Any answer shows a process that serves.
func (h *Hop) check(peer Peer) error {
	ctx, cancel := context.WithTimeout(context.Background(), h.checkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(peer.URL, "/")+LivezPath, nil)
	if err != nil {
		return err
	}
	resp, err := h.checks.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxRefusalBody))
	return resp.Body.Close()
}

func (h *Hop) dial(ctx context.Context, peer Peer, key, address string) (*relayedConn, string, error) {
	u := strings.TrimSuffix(peer.URL, "/") + RelayPath + "?" + url.Values{"key": {key}, "address": {address}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, ResultError, fmt.Errorf("hop to %s: %w", peer.URL, err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", RelayProtocol)
	rt, err := h.wrap(&upgrader{hop: h})
	if err != nil {
		return nil, ResultError, fmt.Errorf("hop to %s: %w", peer.URL, err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		// Dead, restarting or partitioned: the agent reconnects elsewhere; meanwhile, retry.
		return nil, ResultUnreachable, fmt.Errorf("%w: %w %s: %v", tunnel.ErrNoSession, ErrOwnerUnreachable, peer.URL, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if c, ok := resp.Body.(*relayedConn); ok {
			return c, ResultOK, nil
		}
		_ = resp.Body.Close()
		return nil, ResultError, fmt.Errorf("hop to %s: upgraded connection lost", peer.URL)
	}
	msg := refusalMessage(resp)
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusServiceUnavailable:
		return nil, ResultNoSession, fmt.Errorf("%w: the replica %s recorded as holding the session has none: %s", tunnel.ErrNoSession, peer.URL, msg)
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusBadRequest:
		return nil, ResultRefused, fmt.Errorf("the replica %s refused the hop (%d): %s", peer.URL, resp.StatusCode, msg)
	default:
		return nil, ResultError, fmt.Errorf("the replica %s answered the hop with %d: %s", peer.URL, resp.StatusCode, msg)
	}
}

// refusalMessage is the Status message of a refusal, or its code.
func refusalMessage(resp *http.Response) string {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
	var s metav1.Status
	if json.Unmarshal(body, &s) == nil && s.Message != "" {
		return s.Message
	}
	return http.StatusText(resp.StatusCode)
}

// upgrader is the innermost RoundTripper of a hop: its own TLS connection per request, kept
// after 101 (as the response body) for the relayed bytes.
type upgrader struct {
	hop *Hop
}

func (u *upgrader) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), u.hop.timeout)
	defer cancel()
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "443")
	}
	cfg := u.hop.tlsConfig.Clone()
	cfg.ServerName = req.URL.Hostname()
	if u.hop.serverName != "" {
		cfg.ServerName = u.hop.serverName
	}
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// The relayed bytes may be an exec's stream, which nothing pings: an owner whose node
	// vanished ends it after deadpeer.After, not the kernel's minutes.
	deadpeer.TuneOrLog(ctx, conn)
	// Until the answer, ctx bounds the exchange.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	resp, err := exchange(conn, req)
	if !stop() || err != nil {
		_ = conn.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
		_ = conn.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, nil
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), RelayProtocol) {
		_ = conn.Close()
		return nil, fmt.Errorf("the peer switched to %q, not %q", resp.Header.Get("Upgrade"), RelayProtocol)
	}
	resp.Body = &relayedConn{Conn: conn, r: resp.Body.(bufferedBody).r}
	return resp, nil
}

// exchange writes req and reads the answer's head.
func exchange(conn net.Conn, req *http.Request) (*http.Response, error) {
	if err := req.Write(conn); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Bytes the owner sent right after the head are in br.
		resp.Body = bufferedBody{r: br}
	}
	return resp, nil
}

type bufferedBody struct{ r *bufio.Reader }

func (b bufferedBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b bufferedBody) Close() error               { return nil }

// relayedConn is the hop's connection after 101, reading first what was buffered.
type relayedConn struct {
	net.Conn
	r *bufio.Reader
	// release, set by track before the connection is handed out, forgets it when closed.
	release   func()
	closeOnce sync.Once
}

// Close closes the connection and forgets it.
func (c *relayedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		if release := c.release; release != nil {
			release()
		}
	})
	return err
}

func (c *relayedConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	n, err := c.Conn.Read(p)
	return n, hopLost(err)
}

func (c *relayedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	return n, hopLost(err)
}

// hopLost marks a failure of the hop's connection as tunnel.ErrLost: the owner reset it, went
// silent (pkg/deadpeer, the watch of hung owners) or its machine went away. A clean end
// (io.EOF: the owner ends its relay with a TLS close_notify, and so does a killed owner's
// kernel's FIN at a record boundary, which Go's TLS cannot tell apart) and a deadline the
// caller set stay what they are.
func hopLost(err error) error {
	if err == nil || err == io.EOF || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, tunnel.ErrLost) {
		return err
	}
	return tunnel.Lost(err)
}
