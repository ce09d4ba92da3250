package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// A connection dialed for a guarded upgrade times out before the answer, not after the
// hijack, and is closed when the request's context ends.
func TestUpgradeGuard(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accepts and never answers
		}
	}()
	var d net.Dialer
	dial := guardUpgradeDial(d.DialContext)

	g := &upgradeGuard{deadline: time.Now().Add(50 * time.Millisecond)}
	conn, err := dial(withUpgradeGuard(context.Background(), g), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read before the answer: %v, want the deadline", err)
	}
	if !g.timedOut() {
		t.Error("timedOut() is false after the deadline")
	}

	ctx, cancel := context.WithCancel(context.Background())
	g = &upgradeGuard{deadline: time.Now().Add(50 * time.Millisecond)}
	conn, err = dial(withUpgradeGuard(ctx, g), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	g.hijacked()
	if g.timedOut() {
		t.Error("timedOut() after the hijack")
	}
	read := make(chan error, 1)
	go func() { _, err := conn.Read(make([]byte, 1)); read <- err }()
	select {
	case err := <-read:
		t.Fatalf("read after the hijack ended: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-read; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after the request ended: %v, want a closed connection", err)
	}

	// Without a guard (probes, plain requests) nothing changes.
	conn, err = dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

// A target whose answer to an upgrade never ends its headers is cut off after
// MaxUpgradeAnswerBytes; after the hijack, the session's bytes are not counted.
func TestUpgradeAnswerBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				chunk := make([]byte, 64<<10)
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	var d net.Dialer
	dial := guardUpgradeDial(d.DialContext)
	g := &upgradeGuard{deadline: time.Now().Add(time.Minute)}
	conn, err := dial(withUpgradeGuard(context.Background(), g), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n, err := io.Copy(io.Discard, conn)
	if !errors.Is(err, errUpgradeAnswerTooLarge) || n != MaxUpgradeAnswerBytes {
		t.Fatalf("read %d bytes before the answer, then %v; want %d and the bound's error", n, err, MaxUpgradeAnswerBytes)
	}

	g = &upgradeGuard{deadline: time.Now().Add(time.Minute)}
	conn, err = dial(withUpgradeGuard(context.Background(), g), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.ReadFull(conn, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	g.hijacked()
	if n, err := io.CopyN(io.Discard, conn, 4*MaxUpgradeAnswerBytes); err != nil || n != 4*MaxUpgradeAnswerBytes {
		t.Fatalf("after the hijack: %d bytes, %v", n, err)
	}
}
