package tunnel_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/nettest"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent/agenttest"
)

// An agent leaves a hub that stopped answering within its silence timeout, not after
// remotedialer's 60 s, and attaches again (to another replica behind the Service, here the
// same hub through a new connection); a hub that answers its pings is never left.
func TestAgentLeavesASilentHub(t *testing.T) {
	t.Parallel()
	h, relay, cfg := behindFreezer(t)
	var sessions atomic.Int32
	silence := agent.MinSilenceTimeout
	cfg.SilenceTimeout, cfg.OnSession = silence, func() { sessions.Add(1) }
	a := agenttest.Run(t, cfg)
	waitFor(t, "the first session", a.Connected)

	// Pongs keep the session: it outlives its silence timeout while the hub answers.
	time.Sleep(silence + silence/4)
	if n := sessions.Load(); n != 1 || !a.Connected() {
		t.Fatalf("an answered session was dropped: %d sessions started, connected %v", n, a.Connected())
	}

	relay.Freeze()
	frozen := time.Now()
	// remotedialer alone would keep the silent session for 60 s; waitFor gives up at 30 s.
	waitFor(t, "a new session after the hub went silent", func() bool { return sessions.Load() == 2 && a.Connected() })
	t.Logf("new session %v after the hub went silent (silence timeout %v)", time.Since(frozen).Round(100*time.Millisecond), silence)
	resp, err := get(t.Context(), h, tunnel.AddressTarget, "/version")
	if err != nil {
		t.Fatalf("GET through the new session: %v", err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET through the new session: %s", resp.Status)
	}
}

// The hub ends the session of an agent that went silent (its node lost) within agentSilence
// (20 s), not after remotedialer's 60 s: until then the replica would serve the mount
// through that session first, even once the agent is back on another replica.
func TestHubLeavesASilentAgent(t *testing.T) {
	t.Parallel()
	h, relay, cfg := behindFreezer(t)
	// The agent itself waits as long as remotedialer does: the hub must be the one to leave.
	cfg.SilenceTimeout = time.Minute
	a := agenttest.Run(t, cfg)
	waitFor(t, "the session", func() bool { return a.Connected() && len(h.eventLog()) == 1 })
	relay.Freeze()
	frozen := time.Now()
	// waitFor gives up at 30 s, before remotedialer's 60 s.
	waitFor(t, "the hub to end the silent agent's session", func() bool {
		events := h.eventLog()
		return len(events) == 2 && events[1] == h.mount.Name+"=false"
	})
	t.Logf("the hub ended the session %v after the agent went silent", time.Since(frozen).Round(100*time.Millisecond))
	if _, err := get(t.Context(), h, tunnel.AddressTarget, "/version"); err == nil {
		t.Error("a dial through the ended session succeeded")
	}
}

// behindFreezer starts a hub, a target, and a relay to the hub that can go silent; it returns
// the config of an agent that attaches through the relay.
func behindFreezer(t *testing.T) (*hub, *nettest.Freezer, *agent.Config) {
	t.Helper()
	h := newHub(t, nil, time.Minute)
	target := targetServer(t)
	relay := nettest.NewFreezer(t, strings.TrimPrefix(h.server.URL, "http://"))
	hubURL := "http://" + relay.Addr()
	url, err := agent.AttachURL(hubURL, "", h.mount.Name)
	if err != nil {
		t.Fatal(err)
	}
	return h, relay, &agent.Config{
		Hub: &rest.Config{Host: hubURL}, AttachURL: url, Mount: h.mount.Name,
		Target: target.Listener.Addr().String(), MaxBackoff: time.Second,
	}
}
