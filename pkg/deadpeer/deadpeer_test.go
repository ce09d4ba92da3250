package deadpeer_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/kcp-dev/mount-apiserver/pkg/deadpeer"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// vanish connects a client to a server inside a network namespace of its own, then takes the
// namespace's loopback interface down: both ends stay open, and no segment reaches either,
// as when the peer's machine is lost (a stopped process would still have its kernel answer).
// It returns the client's end, the server's, and the function that takes the interface
// down; tuneClient and tuneServer say which end gets Tune.
func vanish(t *testing.T, tuneClient, tuneServer bool) (client, server net.Conn, gone func()) {
	t.Helper()
	n := framework.NewNetns(t)
	ln, err := n.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = n.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, ok := <-accepted
	if !ok {
		t.Fatal("accepting failed")
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	for _, c := range []struct {
		conn net.Conn
		tune bool
	}{{client, tuneClient}, {server, tuneServer}} {
		if !c.tune {
			continue
		}
		if err := deadpeer.Tune(c.conn); err != nil {
			t.Fatal(err)
		}
		if ok, err := deadpeer.Tuned(c.conn); err != nil || !ok {
			t.Fatalf("Tuned = %v, %v after Tune", ok, err)
		}
	}
	return client, server, func() {
		if out, err := n.Command("ip", "link", "set", "lo", "down").CombinedOutput(); err != nil {
			t.Fatalf("ip link set lo down: %v: %s", err, out)
		}
	}
}

// ended waits up to limit for conn's reads to fail, and returns how long that took.
func ended(t *testing.T, conn net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(limit))
	_, err := conn.Read(make([]byte, 1))
	took := time.Since(start)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection to a vanished peer was still open after %s", limit)
	}
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("read %v: the peer answered, it had not vanished", err)
	}
	t.Logf("ended after %s: %v", took.Round(time.Second), err)
	return took
}

// stillOpen fails unless conn, untuned, is still open: the kernel alone keeps it for minutes,
// so what ended the tuned ones was Tune, not the interface going down.
func stillOpen(t *testing.T, conn net.Conn) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the untuned connection ended too (%v): the test shows nothing", err)
	}
}

func TestIdleConnectionToAVanishedPeerEnds(t *testing.T) {
	t.Parallel()
	// The client end tuned (a replica's hop, the proxy's dial), the server's not.
	client, server, gone := vanish(t, true, false)
	gone()
	if took := ended(t, client, deadpeer.After+15*time.Second); took < deadpeer.After/2 {
		t.Errorf("ended after %s, before the keepalive probes could have gone unanswered", took)
	}
	stillOpen(t, server)
}

func TestAcceptedConnectionToAVanishedPeerEnds(t *testing.T) {
	t.Parallel()
	// The server end tuned (the owner's side of a hop).
	client, server, gone := vanish(t, false, true)
	gone()
	ended(t, server, deadpeer.After+15*time.Second)
	stillOpen(t, client)
}

func TestUnacknowledgedWritesToAVanishedPeerEnd(t *testing.T) {
	t.Parallel()
	// A caller typing into exec: keepalive probes are not sent while data is in flight, so
	// only TCP_USER_TIMEOUT ends it.
	client, server, gone := vanish(t, true, false)
	gone()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	writeErr := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if _, err := client.Write([]byte("x")); err != nil {
				writeErr <- err
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	ended(t, client, deadpeer.After+15*time.Second)
	select {
	case err := <-writeErr:
		t.Logf("writes failed: %v", err)
	case <-time.After(5 * time.Second):
		t.Error("writes went on after reads had failed")
	}
	stillOpen(t, server)
}

func TestTuneFindsTheTCPConnectionUnderTLS(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	wrapped := wrapper{raw}
	if ok, _ := deadpeer.Tuned(wrapped); ok {
		t.Fatal("Tuned before Tune")
	}
	if err := deadpeer.Tune(wrapped); err != nil {
		t.Fatal(err)
	}
	if ok, err := deadpeer.Tuned(raw); err != nil || !ok {
		t.Fatalf("Tuned = %v, %v: Tune did not reach the TCP connection under the wrapper", ok, err)
	}
	// A connection with no TCP under it is left alone.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if err := deadpeer.Tune(a); err != nil {
		t.Fatal(err)
	}
}

// wrapper stands for connections wrapped with a NetConn method, as crypto/tls's.
type wrapper struct{ net.Conn }

func (w wrapper) NetConn() net.Conn { return w.Conn }
