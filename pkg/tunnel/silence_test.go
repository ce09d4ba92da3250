package tunnel_test

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent/agenttest"
)

// freezer relays TCP connections to a backend until frozen: then the connections it relays
// stay open and carry nothing, as those of a replica whose node vanished or whose process was
// stopped (no reset reaches the agent). Connections accepted after freezing are relayed:
// they stand for the Service's other replicas.
type freezer struct {
	ln      net.Listener
	backend string
	mu      sync.Mutex
	frozen  chan struct{}
	conns   []net.Conn
}

func newFreezer(t *testing.T, backend string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, backend: backend, frozen: make(chan struct{})}
	t.Cleanup(f.close)
	go f.serve()
	return f
}

func (f *freezer) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", f.backend)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		frozen := f.frozen
		f.conns = append(f.conns, c, b)
		f.mu.Unlock()
		go f.copy(b, c, frozen)
		go f.copy(c, b, frozen)
	}
}

// copy relays until the connection ends or the freezer freezes; frozen, it keeps both
// connections open and reads nothing more.
func (f *freezer) copy(dst, src net.Conn, frozen chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		select {
		case <-frozen:
			return
		default:
		}
		_ = src.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-frozen:
				return
			default:
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil && !isTimeout(err) {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// freeze silences the connections relayed so far; later ones are relayed as before.
func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.frozen)
	f.frozen = make(chan struct{})
}

func (f *freezer) close() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

// An agent leaves a hub that stopped answering within its silence timeout, not after
// remotedialer's 60 s, and attaches again (to another replica behind the Service, here the
// same hub through a new connection); a hub that answers its pings is never left.
func TestAgentLeavesASilentHub(t *testing.T) {
	h := newHub(t, nil, time.Minute)
	target := targetServer(t)
	relay := newFreezer(t, strings.TrimPrefix(h.server.URL, "http://"))
	hubURL := "http://" + relay.ln.Addr().String()
	url, err := agent.AttachURL(hubURL, "", h.mount.Name)
	if err != nil {
		t.Fatal(err)
	}
	var sessions atomic.Int32
	silence := agent.MinSilenceTimeout
	a := agenttest.Run(t, &agent.Config{
		Hub: &rest.Config{Host: hubURL}, AttachURL: url, Mount: h.mount.Name,
		Target: target.Listener.Addr().String(), MaxBackoff: time.Second,
		SilenceTimeout: silence, OnSession: func() { sessions.Add(1) },
	})
	waitFor(t, "the first session", a.Connected)

	// Pongs keep the session: it outlives its silence timeout while the hub answers.
	time.Sleep(silence + silence/4)
	if n := sessions.Load(); n != 1 || !a.Connected() {
		t.Fatalf("an answered session was dropped: %d sessions started, connected %v", n, a.Connected())
	}

	relay.freeze()
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
