package proxy

import (
	"context"
	"net"
	"sync"
	"time"
)

// DefaultUpgradeAnswerTimeout bounds the wait for a target's answer to an upgrade (the dial,
// TLS handshake, request and the answer's headers) of mounts without
// spec.timeouts.requestSeconds: kube-apiserver's default request timeout.
const DefaultUpgradeAnswerTimeout = time.Minute

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
