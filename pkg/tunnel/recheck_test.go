package tunnel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// gate is a tunnel.RecheckLimiter that lets a check through only for a token the test gives.
type gate struct {
	tokens  chan struct{}
	mu      sync.Mutex
	waiting int
}

func (g *gate) Wait(ctx context.Context) error {
	g.mu.Lock()
	g.waiting++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
	}()
	select {
	case <-g.tokens:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) waiters() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// TestRechecksWaitForTheLimiter: the re-checks of every session wait on the one limiter, so
// what they cost the host is bounded by its rate, not by the number of sessions: with five
// sessions due every 10ms and no token, none is checked again; three tokens are three
// checks; the two sessions held back are the next two checked, before the three checked
// already come round again. The sessions wait in one schedule, not in a goroutine each: one
// waits for the limiter however many are due.
func TestRechecksWaitForTheLimiter(t *testing.T) {
	g := &gate{tokens: make(chan struct{})}
	target := targetServer(t)
	var hubs []*hub
	for i := range 5 {
		h := newHubWith(t, nil, 10*time.Millisecond, tunnel.Limits{}, func(a *tunnel.Attacher) { a.Limiter = g })
		h.mount.Name = fmt.Sprintf("edge-%d", i)
		h.mount.UID = types.UID("uid-" + h.mount.Name)
		startAgent(t, h, target.Listener.Addr().String(), nil)
		hubs = append(hubs, h)
	}
	checksOf := func(h *hub) int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.checks
	}
	checks := func() int {
		n := 0
		for _, h := range hubs {
			n += checksOf(h)
		}
		return n
	}
	for _, h := range hubs {
		waitFor(t, "the session of "+h.mount.Name, func() bool { _, ok := h.sessions.Connected(h.key()); return ok })
	}
	// Every hub has an Attacher of its own, so a schedule of its own: each waits for the
	// limiter with its session due; only the attaches were checked.
	waitFor(t, "every schedule waiting for the limiter", func() bool { return g.waiters() == 5 })
	if n := checks(); n != 5 {
		t.Fatalf("%d checks while every session waits for the limiter, want the 5 of the attaches", n)
	}
	for range 3 {
		g.tokens <- struct{}{}
	}
	waitFor(t, "three checks again", func() bool { return checks() == 8 })
	waitFor(t, "every schedule waiting again", func() bool { return g.waiters() == 5 })
	if n := checks(); n != 8 {
		t.Fatalf("%d checks after three tokens, want 8", n)
	}
	for _, h := range hubs {
		if _, ok := h.sessions.Connected(h.key()); !ok {
			t.Fatalf("the session of %s ended", h.mount.Name)
		}
	}
}

// TestOneScheduleForManySessions: many sessions of one Attacher, all due, wait behind the
// limiter as entries of one schedule, with one waiter; tokens check them oldest due first,
// so a session held back is checked before one checked a moment ago comes round again.
func TestOneScheduleForManySessions(t *testing.T) {
	g := &gate{tokens: make(chan struct{})}
	target := targetServer(t)
	h := newHubWith(t, nil, 10*time.Millisecond, tunnel.Limits{}, func(a *tunnel.Attacher) { a.Limiter = g })
	const sessions = 4
	mounts := make([]string, sessions)
	for i := range sessions {
		mounts[i] = fmt.Sprintf("edge-%d", i)
		m := h.serve(mounts[i])
		startAgentFor(t, h, m.Name, target.Listener.Addr().String())
		key := tunnel.SessionKey(clusters.DefaultCluster, m.UID)
		waitFor(t, "the session of "+m.Name, func() bool { _, ok := h.sessions.Connected(key); return ok })
	}
	waitFor(t, "one waiter for every due session", func() bool { return g.waiters() == 1 })
	time.Sleep(50 * time.Millisecond)
	if n := g.waiters(); n != 1 {
		t.Fatalf("%d waiting for the limiter, want one (the schedule)", n)
	}
	h.mu.Lock()
	attaches := h.checks
	h.mu.Unlock()
	if attaches != sessions {
		t.Fatalf("%d checks before any token, want the %d of the attaches", attaches, sessions)
	}
	checked := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.checks - attaches
	}
	for i := range 2 * sessions {
		g.tokens <- struct{}{}
		waitFor(t, fmt.Sprintf("check %d", i+1), func() bool { return checked() == i+1 })
	}
	// Oldest due first: eight tokens were two rounds of the four, each mount checked twice
	// after its attach.
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range mounts {
		if n := h.checkedNames[name] - 1; n != 2 {
			t.Errorf("mount %s checked %d times in two rounds, want 2 (all: %v)", name, n, h.checkedNames)
		}
	}
}

// TestRecheckThatCannotDecideIsTriedAgain: a re-check whose authorizer answers an error (the
// host did not answer in time) does not end the session at once: it is tried again, and the
// session lives on if a later check allows it; checks that keep failing for an interval end
// it. A refusal still ends it at the first check (TestRevokedAgentIsClosed).
func TestRecheckThatCannotDecideIsTriedAgain(t *testing.T) {
	const interval = 2 * time.Second
	h := newHub(t, nil, interval)
	target := targetServer(t)
	startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the session", func() bool { _, ok := h.sessions.Connected(h.key()); return ok })
	checks := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.checks
	}
	setUnsure := func(unsure bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.unsure = unsure
	}
	connected := func() bool { _, ok := h.sessions.Connected(h.key()); return ok }

	setUnsure(true)
	first := checks()
	// Two checks that could not decide, a quarter interval apart: the session lives on.
	waitFor(t, "two undecided checks", func() bool { return checks() >= first+2 })
	if !connected() {
		t.Fatal("the session ended on checks that could not decide")
	}
	setUnsure(false)
	allowed := checks()
	waitFor(t, "a check that allows", func() bool { return checks() > allowed })
	if !connected() {
		t.Fatal("the session ended")
	}
	// Undecided for UndecidedFor (here the interval): the session ends.
	setUnsure(true)
	waitFor(t, "the session to end", func() bool { return !connected() })
}
