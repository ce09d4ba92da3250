package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/deadpeer"
	"github.com/kcp-dev/mount-apiserver/pkg/nettest"
)

// A kept HTTP/2 connection to a target that went silent without a reset (a hop to a replica
// whose node vanished, a tunnel whose agent did) is pinged and closed: the request that
// reuses it fails within PingAfter + PingTimeout instead of hanging until its caller gives
// up, and the next request dials afresh. The bench saw every request of 993 mounts hang for
// its whole timeout through a replica whose kept hop connections led to a stopped one.
func TestSilentTargetConnectionIsClosed(t *testing.T) {
	server := okServer(t)
	relay := nettest.NewFreezer(t, server.Listener.Addr().String())
	const pingAfter, pingTimeout = 300 * time.Millisecond, 300 * time.Millisecond
	tr := NewTransports(TransportOptions{PingAfter: pingAfter, PingTimeout: pingTimeout}, nil)
	via := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", relay.Addr())
	}
	cfg := &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM(server)}}
	target, err := tr.newTargetVia(cfg, nil, time.Second, via)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.close)
	mustGet := func(what string) {
		t.Helper()
		resp, err := get(t, target, "/version")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || string(body) != "ok" {
			t.Fatalf("%s: %s %q, want HTTP/2 and ok", what, resp.Proto, body)
		}
	}
	mustGet("before the silence")
	// Idle pings are answered: the connection outlives several of them.
	time.Sleep(3 * pingAfter)
	mustGet("after idle pings")

	relay.Freeze()
	// getWith gives up after 10 s: a request on the silent connection must end long before.
	begin := time.Now()
	resp, err := get(t, target, "/version")
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the request on the silent connection hung for %v", time.Since(begin).Round(time.Millisecond))
	}
	if err == nil {
		resp.Body.Close()
	}
	t.Logf("the request on the silent connection ended after %v: %v", time.Since(begin).Round(time.Millisecond), err)
	mustGet("on a new connection")
}

// Connections to a target give up on it once its node vanished (deadpeer.After): upgraded
// streams (exec, attach, port-forward) have no HTTP/2 pings, and without the options a write
// into one is retried for the kernel's 15 minutes. pkg/deadpeer's tests show the options
// ending connections to a vanished peer; this one that the Target's dials set them.
func TestTargetConnectionsGiveUpOnVanishedPeers(t *testing.T) {
	server := okServer(t)
	tr := NewTransports(TransportOptions{}, nil)
	cfg := &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM(server)}}
	target, err := tr.newTarget(cfg, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.close)
	for name, dial := range map[string]func(context.Context, string, string) (net.Conn, error){
		"plain":   target.plain.DialContext,
		"upgrade": target.upgrade.DialContext,
	} {
		conn, err := dial(context.Background(), "tcp", server.Listener.Addr().String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ok, err := deadpeer.Tuned(conn)
		_ = conn.Close()
		if err != nil || !ok {
			t.Errorf("%s connection: tuned %v, %v", name, ok, err)
		}
	}
	// And a request through it still works.
	resp, err := get(t, target, "/version")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// okServer is a TLS target speaking HTTP/2 that answers every request with "ok".
func okServer(t *testing.T) *httptest.Server {
	t.Helper()
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	server.EnableHTTP2 = true
	server.StartTLS()
	t.Cleanup(server.Close)
	return server
}
