package peers

import (
	"context"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/deadpeer"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// Both ends of a hop give up on a peer whose node vanished after deadpeer.After: the relayed
// bytes may be an exec's stream, which nothing pings. pkg/deadpeer's tests show what the
// options do when the peer vanishes; this one that a hop's two connections have them.
func TestHopConnectionsGiveUpOnVanishedPeers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	relay := &Relay{
		Local: dialFunc(func(context.Context, string, string) (net.Conn, error) {
			session, target := net.Pipe()
			go func() { _, _ = io.Copy(target, target) }() // an echoing target
			return session, nil
		}),
		Authenticator: authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return &authenticator.Response{User: &user.DefaultInfo{Name: "replica"}}, true, nil
		}),
		Metrics: NewMetrics(),
	}
	relay.SetPeerIdentity("replica")
	srv := httptest.NewUnstartedServer(relay.Serve(ctx, http.NotFoundHandler()))
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
