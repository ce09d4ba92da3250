package proxy

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent/agenttest"
)

// recordingAgent stands for the agent's credential handler (pkg/tunnel/agent's hook): it
// records what the hub sent over the tunnel.
type recordingAgent struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (r *recordingAgent) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req.Clone(context.Background()))
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
}

func (r *recordingAgent) last() *http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs[len(r.reqs)-1]
}

func agentMount(name string, uid types.UID) *mounts.Mount {
	return &mounts.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid},
		Spec: mounts.MountSpec{
			Type:     mounts.MountTypeURL,
			Identity: mounts.MountIdentity{Mode: mounts.IdentityModeImpersonate, UserPrefix: "hub:"},
			Tunnel:   &mounts.MountTunnel{Credentials: mounts.TunnelCredentialsAgent},
		},
	}
}

// startTunnel runs a hub serving mount m's tunnel sessions and an agent attached to it,
// with target and handler as its target and its own credential handler, and waits until both
// ends hold the session.
func startTunnel(t *testing.T, m *mounts.Mount, target string, handler http.Handler) (*tunnel.Sessions, string, *agent.Agent) {
	t.Helper()
	sessions := tunnel.NewSessions(nil, tunnel.Limits{})
	t.Cleanup(sessions.CloseAll)
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sessions.Serve(w, req, tunnel.Mount{Cluster: clusters.DefaultCluster, Name: m.Name, UID: m.UID})
	}))
	t.Cleanup(hub.Close)
	url, err := agent.AttachURL(hub.URL, "", m.Name)
	if err != nil {
		t.Fatal(err)
	}
	a := agenttest.Run(t, &agent.Config{Hub: &rest.Config{Host: hub.URL}, AttachURL: url, Mount: m.Name, Target: target, AgentHandler: handler, MaxBackoff: time.Second})
	key := tunnel.SessionKey(clusters.DefaultCluster, m.UID)
	waitTunnel(t, sessions, key, a)
	return sessions, key, a
}

// waitTunnel waits until the hub and the agent both hold the session of key, as after an
// agent attached again.
func waitTunnel(t *testing.T, sessions *tunnel.Sessions, key string, a *agent.Agent) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := sessions.Connected(key); ok && a.Connected() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent did not connect")
		}
	}
}

// TestAgentCredentialsTunnel: a mount with the agent's credentials sends plain HTTP through
// the tunnel to the agent's own address with the caller's impersonation and nothing of the
// caller's credentials; its probe impersonates the anonymous user; a mount without an agent
// answers 503 with Retry-After naming the mount, for plain and upgrade requests alike.
func TestAgentCredentialsTunnel(t *testing.T) {
	m := agentMount("edge", "uid-edge")
	recorder := &recordingAgent{}
	sessions, _, _ := startTunnel(t, m, "127.0.0.1:1", recorder)

	p := &Proxier{Transports: NewTransports(TransportOptions{}, nil), Tunnels: sessions}
	caller := &user.DefaultInfo{Name: "alice", Groups: []string{"team"}, UID: "alice-uid"}
	reqCtx := genericapirequest.WithUser(context.Background(), caller)
	serveAt := func(m *mounts.Mount, path string, upgrade bool) *httptest.ResponseRecorder {
		t.Helper()
		h, err := p.Handler(reqCtx, m, path)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, "/apis/mounts.kcp.io/v1alpha1/mounts/"+m.Name+"/proxy"+path, nil).WithContext(reqCtx)
		req.Header.Set("Authorization", "Bearer the-callers-token")
		req.Header.Set("Impersonate-User", "system:admin")
		req.Header.Set("Cookie", "session=1")
		if upgrade {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	serve := func(m *mounts.Mount, upgrade bool) *httptest.ResponseRecorder {
		t.Helper()
		return serveAt(m, "/api", upgrade)
	}

	rec := serve(m, false)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "APIVersions") {
		t.Fatalf("through the agent: %d %s", rec.Code, rec.Body)
	}
	got := recorder.last()
	if got.URL.Path != "/api" || got.Header.Get("Impersonate-User") != "hub:alice" || got.Header.Get("Impersonate-Group") != "team" || got.Header.Get("Impersonate-Uid") != "alice-uid" {
		t.Errorf("the agent got %s with %v", got.URL.Path, got.Header)
	}
	for _, h := range []string{"Authorization", "Cookie"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("the agent got %s: %q", h, v)
		}
	}

	// The probe impersonates nobody in particular: anonymous, never the agent itself.
	if r := p.Probe(clusters.WithCluster(context.Background(), clusters.DefaultCluster), m); r.ReachErr != nil || r.CredentialsErr != nil {
		t.Fatalf("probe: %+v", r)
	}
	if got := recorder.last(); got.Header.Get("Impersonate-User") != user.Anonymous || got.Header.Get("Impersonate-Group") != user.AllUnauthenticated {
		t.Errorf("the probe impersonated %v", got.Header)
	}

	// No agent for this mount: 503 naming it, plain and upgrade alike, and no Retry-After,
	// which client-go would obey ten times.
	lonely := agentMount("lonely", "uid-lonely")
	for _, upgrade := range []bool{false, true} {
		rec := serveAt(lonely, "/api/v1/namespaces", upgrade)
		var status metav1.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
			t.Fatalf("upgrade %v: %v: %s", upgrade, err, rec.Body)
		}
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "" || !strings.Contains(status.Message, `mount "lonely": no agent is connected`) {
			t.Errorf("upgrade %v without an agent: %d %v %s", upgrade, rec.Code, rec.Header(), rec.Body)
		}
	}
	// A discovery root gets the text that client-go's discovery shows (isDiscoveryRoot).
	if rec := serve(lonely, false); rec.Code != http.StatusBadGateway || rec.Header().Get("Content-Type") != "text/plain; charset=utf-8" ||
		rec.Body.String() != "mount 'lonely': no agent is connected to its tunnel (an agent attaches at mounts/lonely/attach)\n" {
		t.Errorf("discovery root without an agent: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}
	if r := p.Probe(context.Background(), lonely); r.ReachErr == nil || !strings.Contains(r.ReachErr.Error(), "no agent") {
		t.Errorf("probe without an agent: %+v", r)
	}
}

// TestTunnelLostUnderARequest: a request whose tunnel session ends before the target answered
// gets a 502 that says so, not one blaming the target (remotedialer fails the connection with
// an error of its own, which read as a target that "did not answer as a Kubernetes API
// server").
func TestTunnelLostUnderARequest(t *testing.T) {
	m := agentMount("edge", "uid-edge")
	got, release := make(chan struct{}, 4), make(chan struct{})
	t.Cleanup(func() { close(release) })
	// The agent's handler takes the request and answers only when the test ends.
	slow := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		got <- struct{}{}
		select {
		case <-release:
		case <-req.Context().Done():
		}
	})
	sessions, key, a := startTunnel(t, m, "127.0.0.1:1", slow)
	reqCtx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		waitTunnel(t, sessions, key, a)
		// A new Proxier: the request's connection is its first, which net/http does not retry.
		p := &Proxier{Transports: NewTransports(TransportOptions{}, nil), Tunnels: sessions}
		h, err := p.Handler(reqCtx, m, "/api/v1/namespaces/default/configmaps")
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			req := httptest.NewRequest(method, "/apis/mounts.kcp.io/v1alpha1/mounts/edge/proxy/api/v1/namespaces/default/configmaps", strings.NewReader(`{}`)).WithContext(reqCtx)
			h.ServeHTTP(rec, req)
		}()
		select {
		case <-got:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the agent got no request", method)
		}
		sessions.Close(key)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the request outlived its session", method)
		}
		var status metav1.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil {
			t.Fatalf("%s: %v: %s", method, err, rec.Body)
		}
		if rec.Code != http.StatusBadGateway || !strings.Contains(status.Message, `mount "edge": the tunnel to the mount's target`) ||
			!strings.Contains(status.Message, "was lost before the target answered") || strings.Contains(status.Message, "tunnel disconnect") {
			t.Errorf("%s: %d %s", method, rec.Code, rec.Body)
		}
	}
}

// TestTunnelLostUnderAnHTTP2Request: the same with the server's credentials, HTTP/2 over TLS
// end to end through the tunnel: the loss reaches the proxy through TLS and HTTP/2 as ErrLost.
func TestTunnelLostUnderAnHTTP2Request(t *testing.T) {
	got, release := make(chan string, 4), make(chan struct{})
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		got <- req.Proto
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	target.EnableHTTP2 = true
	target.StartTLS()
	t.Cleanup(target.Close)
	t.Cleanup(func() { close(release) })
	sessions, key, _ := startTunnel(t, agentMount("edge", "uid-edge"), target.Listener.Addr().String(), nil)
	p := &Proxier{Transports: NewTransports(TransportOptions{}, nil), Tunnels: sessions}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: target.Certificate().Raw})
	tgt, err := p.Transports.newTargetVia(&rest.Config{Host: "https://example.com", TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, nil, 5*time.Second, p.tunnelDialer("edge", key, tunnel.AddressTarget))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := getWith(context.Background(), t, tgt, "/api")
		if err == nil {
			err = fmt.Errorf("answered %s %s", resp.Proto, resp.Status)
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case proto := <-got:
		if proto != "HTTP/2.0" {
			t.Errorf("the request reached the target over %s, want HTTP/2.0", proto)
		}
	case err := <-done:
		t.Fatalf("no request reached the target: %v", err)
	}
	sessions.Close(key)
	err = <-done
	if s := statusForError("example.com", err); !errors.Is(err, tunnel.ErrLost) || s.Code != http.StatusBadGateway || !strings.Contains(s.Message, "was lost before the target answered") {
		t.Errorf("HTTP/2 through a tunnel lost under it: %v -> %d %q", err, s.Code, s.Message)
	}
}

// TestTunnelTargetUnreachable: an agent that cannot connect to its target sends the hub
// nothing but its dial error's text; the proxy still says what failed: the agent could not
// reach the target, which is unreachable (502, as the agent that adds its own credentials
// answers), not that the target "did not answer as a Kubernetes API server", which sent users
// to look at a healthy target's certificates and TLS.
func TestTunnelTargetUnreachable(t *testing.T) {
	closed, _ := acceptCounter(t)
	address := closed.Addr().String()
	closed.Close()
	sessions, key, _ := startTunnel(t, agentMount("edge", "uid-edge"), address, nil)
	p := &Proxier{Transports: NewTransports(TransportOptions{}, nil), Tunnels: sessions}
	tgt, err := p.Transports.newTargetVia(&rest.Config{Host: "https://example.com"}, nil, 5*time.Second, p.tunnelDialer("edge", key, tunnel.AddressTarget))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := getWith(context.Background(), t, tgt, "/api")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a target nobody listens at answered %s", resp.Status)
	}
	s := statusForError("example.com", err)
	if s.Code != http.StatusBadGateway || s.Message != "the agent could not reach the mount's target example.com: it is unreachable" {
		t.Errorf("through an agent whose target refuses connections: %v -> %d %q", err, s.Code, s.Message)
	}
	if strings.Contains(s.Message, address) {
		t.Errorf("the Status names the agent's own address of the target: %q", s.Message)
	}
}
