package agent

import (
	"context"
	"net"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/deadpeer"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// The agent's connections to its target give up on it once its node vanished
// (deadpeer.After), as the hub's own do: the hub's exec streams ride them, and nothing pings
// inside those. pkg/deadpeer's tests show what the options do; this one that they are set.
func TestTargetConnectionsGiveUpOnVanishedPeers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	a := &Agent{cfg: &Config{Mount: "edge", Target: ln.Addr().String()}, metrics: tunnel.NewMetrics()}
	conns := map[string]net.Conn{}
	conns["the hub's"], err = a.dial(context.Background(), "tcp", tunnel.AddressTarget)
	if err != nil {
		t.Fatal(err)
	}
	// Agent-credential mounts: the agent's own upgrades (exec, attach, port-forward).
	p, err := NewCredentialsProxy(&rest.Config{Host: "https://" + ln.Addr().String(), BearerToken: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	conns["the credentials proxy's upgrade"], err = p.upgrade.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for name, conn := range conns {
		ok, err := deadpeer.Tuned(conn)
		_ = conn.Close()
		if err != nil || !ok {
			t.Errorf("%s connection: tuned %v, %v", name, ok, err)
		}
	}
}
