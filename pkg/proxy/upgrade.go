package proxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultUpgradeAnswerTimeout bounds the wait for a target's answer to an upgrade (the dial,
// TLS handshake, request and the answer's headers) of mounts without
// spec.timeouts.requestSeconds: kube-apiserver's default request timeout.
const DefaultUpgradeAnswerTimeout = time.Minute

// MaxUpgradeAnswerBytes bounds what a target (or a tunnel's agent) may send before its answer to
// an upgrade is in: the handshake and the answer's headers, as net/http's server bounds a
// request's headers (DefaultMaxHeaderBytes). The upgrade-aware handler reads the answer's
// headers with no bound of its own and keeps a copy of every byte: an answer whose headers
// never end grew the server's memory at the link's speed until the answer's deadline.
const MaxUpgradeAnswerBytes = 1 << 20

// errUpgradeAnswerTooLarge ends an upgrade whose answer's headers passed MaxUpgradeAnswerBytes.
var errUpgradeAnswerTooLarge = fmt.Errorf("the target's answer to the upgrade sent more than %d bytes before its headers ended", MaxUpgradeAnswerBytes)

// upgradeGuard bounds an upgrade until its answer is in. The upgrade-aware handler dials the
// target, handshakes and reads the answer without a deadline and without looking at the
// request's context: a target that accepts and never answers held the request, its goroutine
// and both connections for ever, even after the caller had gone. The guard sets a deadline on
// the connections dialed for the request, clears it once the handler hijacks the caller's
// connection (the answer is in, the session begins), and closes them when the request ends.
type upgradeGuard struct {
	deadline time.Time

	mu       sync.Mutex
	conns    []net.Conn
	answered bool
	// answeredFlag is answered, for reads that do not take mu.
	answeredFlag atomic.Bool
}

type upgradeGuardKey struct{}

func withUpgradeGuard(ctx context.Context, g *upgradeGuard) context.Context {
	return context.WithValue(ctx, upgradeGuardKey{}, g)
}

// guardUpgradeDial wraps the dial of a target's upgrade transport: connections dialed for a
// request with a guard are watched by it.
func guardUpgradeDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if g, ok := ctx.Value(upgradeGuardKey{}).(*upgradeGuard); ok {
			g.watch(ctx, conn)
			return &answerBound{Conn: conn, guard: g}, nil
		}
		return conn, nil
	}
}

func (g *upgradeGuard) watch(ctx context.Context, conn net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.answered {
		_ = conn.SetDeadline(g.deadline)
	}
	g.conns = append(g.conns, conn)
	// Once the request ends (its caller went away, the server shuts down, or the session is
	// over), so does its connection to the target.
	context.AfterFunc(ctx, func() { _ = conn.Close() })
}

// hijacked lifts the deadline: the answer is in and the session may last.
func (g *upgradeGuard) hijacked() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.answered = true
	g.answeredFlag.Store(true)
	for _, c := range g.conns {
		_ = c.SetDeadline(time.Time{})
	}
}

// timedOut says whether the deadline passed before the answer: the failure the handler
// reports then is the deadline's, however the handler words it.
func (g *upgradeGuard) timedOut() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.answered && !time.Now().Before(g.deadline)
}

// answerBound is a connection dialed for a guarded upgrade: until the answer is in, at most
// MaxUpgradeAnswerBytes may be read from it.
type answerBound struct {
	net.Conn
	guard *upgradeGuard
	read  int64
}

func (c *answerBound) Read(b []byte) (int, error) {
	if c.guard.answeredFlag.Load() {
		return c.Conn.Read(b)
	}
	if c.read >= MaxUpgradeAnswerBytes {
		_ = c.Conn.Close()
		return 0, errUpgradeAnswerTooLarge
	}
	if rest := MaxUpgradeAnswerBytes - c.read; int64(len(b)) > rest {
		b = b[:rest]
	}
	n, err := c.Conn.Read(b)
	c.read += int64(n)
	return n, err
}

// refusedUpgradeConn is the caller's hijacked connection of an upgrade. The upgrade-aware
// handler writes the target's answer to it as it is, in its first write the status line;
// an answer of 401 refused the mount's credentials, never the caller's, and is replaced by
// this server's answer (credentialsRefused): the rest of the target's answer is dropped.
type refusedUpgradeConn struct {
	net.Conn
	replace func() []byte

	mu      sync.Mutex
	checked bool
	dropped bool
}

func (c *refusedUpgradeConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.dropped:
		return len(p), nil
	case !c.checked:
		c.checked = true
		if isStatusLine(p, http.StatusUnauthorized) {
			c.dropped = true
			if _, err := c.Conn.Write(c.replace()); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return c.Conn.Write(p)
}

// isStatusLine says whether p begins with an HTTP/1.x status line of code.
func isStatusLine(p []byte, code int) bool {
	prefix := fmt.Sprintf(" %03d ", code)
	return len(p) >= len("HTTP/1.1 401 ") && bytes.HasPrefix(p, []byte("HTTP/1.")) && string(p[8:13]) == prefix
}
