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

// lossy is a network namespace of the test whose loopback interface can be taken down under
// open connections: both ends stay open and no segment reaches either, as when the peer's
// machine is lost (a stopped process would still have its kernel answer).
type lossy struct {
	t *testing.T
	n *framework.Netns
}

func newLossy(t *testing.T) *lossy {
	t.Helper()
	return &lossy{t: t, n: framework.NewNetns(t)}
}

// pair connects a dialed end to an accepted one inside the namespace; tuneDialed and
// tuneAccepted say which gets Tune.
func (l *lossy) pair(tuneDialed, tuneAccepted bool) (dialed, accepted net.Conn) {
	t := l.t
	t.Helper()
	ln, err := l.n.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(done)
			return
		}
		done <- c
	}()
	dialed, err = l.n.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, ok := <-done
	if !ok {
		t.Fatal("accepting failed")
	}
	t.Cleanup(func() { _ = dialed.Close(); _ = accepted.Close() })
	for _, c := range []struct {
		conn net.Conn
		tune bool
	}{{dialed, tuneDialed}, {accepted, tuneAccepted}} {
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
	return dialed, accepted
}

// vanish takes the namespace's loopback interface down.
func (l *lossy) vanish() {
	l.t.Helper()
	if out, err := l.n.Command("ip", "link", "set", "lo", "down").CombinedOutput(); err != nil {
		l.t.Fatalf("ip link set lo down: %v: %s", err, out)
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
	// Dialed and accepted ends tuned (a replica's hop or the proxy's dial; the owner's side of
	// a hop), each with an untuned peer, in one namespace: one wait for both.
	l := newLossy(t)
	dialed, dialedPeer := l.pair(true, false)
	acceptedPeer, accepted := l.pair(false, true)
	l.vanish()
	if took := ended(t, dialed, deadpeer.After+15*time.Second); took < deadpeer.After/2 {
		t.Errorf("ended after %s, before the keepalive probes could have gone unanswered", took)
	}
	ended(t, accepted, 15*time.Second)
	stillOpen(t, dialedPeer)
	stillOpen(t, acceptedPeer)
}

func TestUnacknowledgedWritesToAVanishedPeerEnd(t *testing.T) {
	t.Parallel()
	// A caller typing into exec: keepalive probes are not sent while data is in flight, so
	// only TCP_USER_TIMEOUT ends it.
	l := newLossy(t)
	client, server := l.pair(true, false)
	l.vanish()
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
