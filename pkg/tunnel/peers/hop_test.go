package peers

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	componentmetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/kcp-dev/mount-apiserver/pkg/deadpeer"
	"github.com/kcp-dev/mount-apiserver/pkg/nettest"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// Both ends of a hop give up on a peer whose node vanished after deadpeer.After: the relayed
// bytes may be an exec's stream, which nothing pings. pkg/deadpeer's tests show what the
// options do when the peer vanishes; this one that a hop's two connections have them.
func TestHopConnectionsGiveUpOnVanishedPeers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := httptest.NewUnstartedServer(echoRelay(ctx, http.NotFoundHandler()))
	accepted := &recordingListener{Listener: srv.Listener}
	srv.Listener = accepted
	srv.StartTLS()
	t.Cleanup(srv.Close)

	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	hop, err := NewHop(&rest.Config{BearerToken: "replica-token"}, pool, "example.com", 0, NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := hop.Dial(ctx, Peer{Identity: "replica", URL: srv.URL}, "cluster/uid", tunnel.AddressTarget)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "ping" {
		t.Fatalf("read %q, %v through the hop, want the echo", got, err)
	}
	if ok, err := deadpeer.Tuned(conn.(*relayedConn).Conn); err != nil || !ok {
		t.Errorf("the hop's connection to the owner: tuned %v, %v", ok, err)
	}
	for _, c := range accepted.conns() {
		if ok, err := deadpeer.Tuned(c); err != nil || !ok {
			t.Errorf("the owner's end of the hop: tuned %v, %v", ok, err)
		}
	}
	if n := len(accepted.conns()); n != 1 {
		t.Errorf("the owner accepted %d connections, want the hop's one", n)
	}
}

// echoRelay is the handler of an owner whose every session leads to an echoing target, for
// hops authenticated as "replica"; other requests go to next.
func echoRelay(ctx context.Context, next http.Handler) http.Handler {
	relay := &Relay{
		Local: dialFunc(func(context.Context, string, string) (net.Conn, error) {
			session, target := net.Pipe()
			go func() { _, _ = io.Copy(target, target) }()
			return session, nil
		}),
		Authenticator: authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return &authenticator.Response{User: &user.DefaultInfo{Name: "replica"}}, true, nil
		}),
		Metrics: NewMetrics(),
	}
	relay.SetPeerIdentity("replica")
	return relay.Serve(ctx, next)
}

type dialFunc func(ctx context.Context, key, address string) (net.Conn, error)

func (f dialFunc) DialContext(ctx context.Context, key, address string) (net.Conn, error) {
	return f(ctx, key, address)
}

// recordingListener keeps the connections it accepts.
type recordingListener struct {
	net.Listener
	mu       sync.Mutex
	accepted []net.Conn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.accepted = append(l.accepted, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *recordingListener) conns() []net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]net.Conn(nil), l.accepted...)
}

// A hop through an owner whose process stopped (its kernel still holds the connections, so
// neither pkg/deadpeer nor a ping sees it) is closed once the owner has not answered its
// liveness check: an exec stream relayed through it ended only with its caller's timeout.
// An owner that answers keeps its hops, and the watch ends with the last one. The owner is
// a real Relay behind TLS; nettest.Freezer stops it as SIGSTOP would.
func TestHopsThroughAHungOwnerAreClosed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var livez atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc(LivezPath, func(w http.ResponseWriter, _ *http.Request) {
		livez.Add(1)
		w.WriteHeader(http.StatusForbidden) // any answer shows a live owner
	})
	srv := httptest.NewTLSServer(echoRelay(ctx, mux))
	t.Cleanup(srv.Close)
	owner := nettest.NewFreezer(t, srv.Listener.Addr().String())

	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	metrics := NewMetrics()
	componentmetrics.NewKubeRegistry().MustRegister(metrics.hungClosed)
	hop, err := NewHop(&rest.Config{BearerToken: "replica-token"}, pool, "example.com", 0, metrics)
	if err != nil {
		t.Fatal(err)
	}
	if hop.checkEvery != 10*time.Second || hop.checkTimeout != 10*time.Second {
		t.Errorf("checks every %v within %v, want 10 s and 10 s", hop.checkEvery, hop.checkTimeout)
	}
	hop.checkEvery, hop.checkTimeout = 100*time.Millisecond, 300*time.Millisecond
	peer := Peer{Identity: "replica", URL: "https://" + owner.Addr()}
	echo := func(conn net.Conn) error {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte("ping")); err != nil {
			return err
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(conn, got); err != nil {
			return err
		}
		if string(got) != "ping" {
			return fmt.Errorf("read %q", got)
		}
		return nil
	}
	watched := func() int {
		hop.mu.Lock()
		defer hop.mu.Unlock()
		return len(hop.open)
	}

	// A live owner keeps its hop through many checks; closing the last hop ends the watch.
	conn, err := hop.Dial(ctx, peer, "cluster/uid", tunnel.AddressTarget)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := echo(conn); err != nil {
		t.Fatalf("a hop through a live owner: %v", err)
	}
	if n := livez.Load(); n < 3 {
		t.Fatalf("the owner was checked %d times in a second, want about 10", n)
	}
	conn.Close()
	if err := wait(2*time.Second, func() bool { return watched() == 0 }); err != nil {
		t.Fatalf("the owner is still watched without hops: %v", err)
	}

	// Stopped: the hop ends within checkEvery + checkTimeout, not at the reader's deadline.
	conn, err = hop.Dial(ctx, peer, "cluster/uid", tunnel.AddressTarget)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := echo(conn); err != nil {
		t.Fatal(err)
	}
	owner.Stop()
	stopped := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a hop through a stopped owner: read %v after %v, want it closed", err, time.Since(stopped))
	}
	if !errors.Is(err, tunnel.ErrLost) {
		t.Errorf("a hop through a stopped owner: read %v, want tunnel.ErrLost (the proxy then blames the tunnel, not the target)", err)
	}
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("the hop was closed %v after the owner stopped, want within about 0.4 s", took)
	}
	if got, _ := testutil.GetCounterMetricValue(metrics.hungClosed); got != 1 {
		t.Errorf("hops closed for a hung owner: %v, want 1", got)
	}
	if watched() != 0 {
		t.Errorf("the hung owner is still watched")
	}
}

// wait polls cond every 10 ms until it holds or within passes.
func wait(within time.Duration, cond func() bool) error {
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %v", within)
		}
	}
	return nil
}
