package nettest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Freezer relays TCP connections to a backend until frozen: then the connections it relays
// stay open and carry nothing, as those of a peer whose node vanished or whose process was
// stopped (no reset reaches either end). Connections accepted after Freeze are relayed as
// before: they stand for the Service's other endpoints, or the node come back.
type Freezer struct {
	ln      net.Listener
	backend string

	mu      sync.Mutex
	frozen  chan struct{}
	stopped bool
	conns   []net.Conn
	wg      sync.WaitGroup
}

// NewFreezer relays 127.0.0.1:<port> to backend until the test ends.
func NewFreezer(t testing.TB, backend string) *Freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Freezer{ln: ln, backend: backend, frozen: make(chan struct{})}
	t.Cleanup(f.close)
	f.wg.Add(1)
	go f.serve()
	return f
}

// Addr is the relay's host:port.
func (f *Freezer) Addr() string { return f.ln.Addr().String() }

// Freeze silences the connections relayed so far; later ones are relayed as before.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.frozen)
	f.frozen = make(chan struct{})
}

// Stop silences the connections relayed so far and every later one: a stopped process on a
// live machine, whose kernel still accepts connections that nothing then answers.
func (f *Freezer) Stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	f.Freeze()
}

func (f *Freezer) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		if f.stopped {
			// Held open, never relayed.
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			continue
		}
		f.mu.Unlock()
		b, err := net.Dial("tcp", f.backend)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		frozen := f.frozen
		f.conns = append(f.conns, c, b)
		f.mu.Unlock()
		f.wg.Add(2)
		go f.copy(b, c, frozen)
		go f.copy(c, b, frozen)
	}
}

// copy relays until the connection ends or the relay freezes; frozen, it leaves both
// connections open and passes nothing more.
func (f *Freezer) copy(dst, src net.Conn, frozen chan struct{}) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		_ = src.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := src.Read(buf)
		select {
		case <-frozen:
			return
		default:
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (f *Freezer) close() {
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
