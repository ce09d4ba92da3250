package tunnel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent/agenttest"
)

// hub serves the attach of one mount through an Attacher, as pkg/registry does after its
// quorum read.
type hub struct {
	sessions *tunnel.Sessions
	server   *httptest.Server
	mount    *mounts.Mount
	agent    user.Info

	mu     sync.Mutex
	allow  bool
	events []tunnel.Event
	// checks counts the authorizer's decisions; unsure makes it answer an error.
	checks int
	unsure bool
	// others are mounts served besides mount, chosen by the name in the attach path;
	// checkedNames counts the authorizer's decisions by mount name.
	others       map[string]*mounts.Mount
	checkedNames map[string]int
	// inFlight counts attach requests being served; requestsDone their contexts that ended.
	// checkedAs records the user and request verb each check's context carried.
	inFlight     int
	requestsDone int
	checkedAs    []string
}

// serve adds a mount of name to those the hub serves and allows.
func (h *hub) serve(name string) *mounts.Mount {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.mount.DeepCopy()
	m.Name, m.UID = name, types.UID("uid-"+name)
	h.others[name] = m
	return m
}

// mountOf is the mount an attach request names: one of others, else mount.
func (h *hub) mountOf(path string) *mounts.Mount {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, rest, ok := strings.Cut(path, "/mounts/"); ok {
		if m, ok := h.others[strings.TrimSuffix(rest, "/attach")]; ok {
			return m
		}
	}
	return h.mount
}

func newHub(t *testing.T, m *metrics.KubeRegistry, interval time.Duration) *hub {
	t.Helper()
	return newHubWith(t, m, interval, tunnel.Limits{})
}

func newHubWith(t *testing.T, m *metrics.KubeRegistry, interval time.Duration, limits tunnel.Limits, opts ...func(*tunnel.Attacher)) *hub {
	t.Helper()
	tm := tunnel.NewMetrics()
	if m != nil {
		tm.Register(*m)
	}
	h := &hub{
		sessions:     tunnel.NewSessions(tm, limits),
		mount:        &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge", UID: "uid-1"}, Spec: mounts.MountSpec{Tunnel: &mounts.MountTunnel{Credentials: mounts.TunnelCredentialsServer}}},
		agent:        &user.DefaultInfo{Name: "system:serviceaccount:edge:agent"},
		allow:        true,
		others:       map[string]*mounts.Mount{},
		checkedNames: map[string]int{},
	}
	h.sessions.Watch(func(e tunnel.Event) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.events = append(h.events, e)
	})
	attacher := &tunnel.Attacher{Sessions: h.sessions, Interval: interval, UndecidedFor: interval, Authorizer: authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.checks++
		h.checkedNames[a.GetName()]++
		u, _ := genericapirequest.UserFrom(ctx)
		info, _ := genericapirequest.RequestInfoFrom(ctx)
		if u != nil && info != nil {
			h.checkedAs = append(h.checkedAs, u.GetName()+" "+info.Verb)
		} else {
			h.checkedAs = append(h.checkedAs, "")
		}
		if h.unsure {
			return authorizer.DecisionNoOpinion, "", errors.New("the host did not answer in time")
		}
		if h.allow && a.GetVerb() == "create" && a.GetResource() == "mounts" && a.GetSubresource() == "attach" && (a.GetName() == h.mount.Name || h.others[a.GetName()] != nil) {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, "not allowed", nil
	})}
	for _, opt := range opts {
		opt(attacher)
	}
	h.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.mu.Lock()
		h.inFlight++
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.inFlight--
			h.mu.Unlock()
		}()
		ctx := genericapirequest.WithUser(req.Context(), h.agent)
		ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{IsResourceRequest: true, Verb: "get", Resource: "mounts", Subresource: "attach"})
		context.AfterFunc(ctx, func() {
			h.mu.Lock()
			h.requestsDone++
			h.mu.Unlock()
		})
		handler, err := attacher.Handler(ctx, h.mountOf(req.URL.Path))
		if err != nil {
			status := metav1.Status{Code: http.StatusForbidden, Message: err.Error()}
			tunnel.WriteStatus(w, &status)
			return
		}
		handler.ServeHTTP(w, req.WithContext(ctx))
	}))
	t.Cleanup(h.server.Close)
	t.Cleanup(h.sessions.CloseAll)
	return h
}

func (h *hub) key() string { return tunnel.SessionKey(clusters.DefaultCluster, h.mount.UID) }

func (h *hub) setAllow(allow bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.allow = allow
}

func (h *hub) eventLog() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.events {
		out = append(out, fmt.Sprintf("%s=%v", e.Mount.Name, e.Connected))
	}
	return out
}

// startAgent runs an agent of the hub's mount against target until the test ends.
func startAgent(t *testing.T, h *hub, target string, handler http.Handler) *agent.Agent {
	t.Helper()
	return runAgent(t, h, h.mount.Name, target, handler)
}

// startAgentFor runs an agent of the hub's mount name (one of serve) until the test ends.
func startAgentFor(t *testing.T, h *hub, name, target string) *agent.Agent {
	t.Helper()
	return runAgent(t, h, name, target, nil)
}

func runAgent(t *testing.T, h *hub, name, target string, handler http.Handler) *agent.Agent {
	t.Helper()
	url, err := agent.AttachURL(h.server.URL, "", name)
	if err != nil {
		t.Fatal(err)
	}
	return agenttest.Run(t, &agent.Config{Hub: &rest.Config{Host: h.server.URL}, AttachURL: url, Mount: name, Target: target, AgentHandler: handler, MaxBackoff: time.Second})
}

// waitFor polls cond; tests assert outcomes, never how long they took.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// get sends a GET through a connection dialed via the tunnel.
func get(ctx context.Context, h *hub, address, path string) (*http.Response, error) {
	conn, err := h.sessions.DialContext(ctx, h.key(), address)
	if err != nil {
		return nil, err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://target"+path, nil)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	conn.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp, err
}

func targetServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprintf(w, "target %s", req.URL.Path)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestDialThroughSession(t *testing.T) {
	registry := metrics.NewKubeRegistry()
	h := newHub(t, &registry, 0)
	ctx := context.Background()
	if _, err := h.sessions.DialContext(ctx, h.key(), tunnel.AddressTarget); !errors.Is(err, tunnel.ErrNoSession) {
		t.Fatalf("dial without an agent: %v, want ErrNoSession", err)
	}
	target := targetServer(t)
	a := startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the session", func() bool { _, ok := h.sessions.Connected(h.key()); return ok && a.Connected() })

	resp, err := get(ctx, h, tunnel.AddressTarget, "/version")
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := io.ReadAll(resp.Body); string(body) != "target /version" {
		t.Fatalf("through the tunnel: %q", body)
	}

	// The hub never asks for anything else: the agent would end the whole session.
	if _, err := h.sessions.DialContext(ctx, h.key(), "10.0.0.1:443"); err == nil {
		t.Fatal("dialing another address was not refused")
	}
	// Without credentials, the agent's own address answers 503 (the session lives on).
	resp, err = get(ctx, h, tunnel.AddressAgent, "/api")
	if err != nil {
		t.Fatal(err)
	}
	var status metav1.Status
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &status); err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(status.Message, "no credentials") {
		t.Fatalf("agent address without credentials: %d %s", resp.StatusCode, body)
	}
	if _, err := get(ctx, h, tunnel.AddressTarget, "/still"); err != nil {
		t.Fatalf("the session did not survive: %v", err)
	}

	// Metrics name the mount, nothing else.
	if err := testutil.GatherAndCompare(registry, strings.NewReader(`
# HELP mount_tunnel_sessions [ALPHA] Agent sessions held by this process, by mount.
# TYPE mount_tunnel_sessions gauge
mount_tunnel_sessions{mount="edge"} 1
# HELP mount_tunnel_attaches_total [ALPHA] Sessions established (agent connects and reconnects), by mount.
# TYPE mount_tunnel_attaches_total counter
mount_tunnel_attaches_total{mount="edge"} 1
`), "mount_tunnel_sessions", "mount_tunnel_attaches_total"); err != nil {
		t.Error(err)
	}
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), string(h.mount.UID)) || strings.Contains(l.GetValue(), ":") {
					t.Errorf("metric %s has label %s=%q", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// TestCloseAndReplace: closing a session by key ends it (the agent reconnects); a second
// agent of the mount takes the session over at once.
func TestCloseAndReplace(t *testing.T) {
	h := newHub(t, nil, 0)
	target := targetServer(t)
	first := startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the first session", first.Connected)
	since, _ := h.sessions.Connected(h.key())

	if !h.sessions.Close(h.key()) {
		t.Fatal("Close found no session")
	}
	waitFor(t, "the reconnect", func() bool {
		s, ok := h.sessions.Connected(h.key())
		return ok && s.After(since) && first.Connected()
	})
	if _, err := get(context.Background(), h, tunnel.AddressTarget, "/after-close"); err != nil {
		t.Fatalf("after the reconnect: %v", err)
	}

	second := startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the second session", second.Connected)
	// The agents take the session from each other; each dial goes through one of them.
	if _, err := get(context.Background(), h, tunnel.AddressTarget, "/replaced"); err != nil {
		t.Fatalf("after the replacement: %v", err)
	}
	if h.sessions.Len() != 1 {
		t.Fatalf("%d sessions for one key", h.sessions.Len())
	}
	if log := h.eventLog(); len(log) < 2 || log[0] != "edge=true" {
		t.Fatalf("events: %v", log)
	}
}

// TestCloseOthers: a mount that names another agent closes the session of the one it held,
// and only that one.
func TestCloseOthers(t *testing.T) {
	h := newHub(t, nil, 0)
	target := targetServer(t)
	a := startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the session", a.Connected)
	since, _ := h.sessions.Connected(h.key())
	m := tunnel.Mount{Cluster: clusters.DefaultCluster, Name: h.mount.Name, UID: h.mount.UID}
	if h.sessions.CloseOthers(m, h.agent.GetName()) {
		t.Fatal("closed the session of the agent the mount names")
	}
	if s, ok := h.sessions.Connected(h.key()); !ok || !s.Equal(since) {
		t.Fatal("the named agent's session did not last")
	}
	if !h.sessions.CloseOthers(m, "system:serviceaccount:edge:another") {
		t.Fatal("kept the session of an agent the mount no longer names")
	}
	waitFor(t, "a new session", func() bool { s, ok := h.sessions.Connected(h.key()); return ok && s.After(since) })
	if h.sessions.CloseOthers(tunnel.Mount{Cluster: clusters.DefaultCluster, Name: "other", UID: "uid-2"}, "x") {
		t.Fatal("closed a session of a mount that has none")
	}
}

// TestRevokedAgentIsClosed: an agent that loses "create" on mounts/attach loses its session
// at the next check, and cannot attach again.
func TestRevokedAgentIsClosed(t *testing.T) {
	h := newHub(t, nil, 50*time.Millisecond)
	target := targetServer(t)
	a := startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the session", a.Connected)
	h.setAllow(false)
	waitFor(t, "the session to close", func() bool { _, ok := h.sessions.Connected(h.key()); return !ok && !a.Connected() })
	if _, err := h.sessions.DialContext(context.Background(), h.key(), tunnel.AddressTarget); !errors.Is(err, tunnel.ErrNoSession) {
		t.Fatalf("dial after the revocation: %v", err)
	}
	if log := h.eventLog(); log[len(log)-1] != "edge=false" {
		t.Fatalf("events: %v", log)
	}
}

// TestSessionOutlivesItsAttachRequest: the attach request returns (and its context ends) once
// the session is up, so no goroutine deep in the handler chain stays per session; the session
// goes on serving, its checks still run with the request's user and request info, and a
// revoked agent's session still ends.
func TestSessionOutlivesItsAttachRequest(t *testing.T) {
	h := newHub(t, nil, 50*time.Millisecond)
	target := targetServer(t)
	a := startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the session", a.Connected)
	waitFor(t, "the attach request to return", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.inFlight == 0 && h.requestsDone == 1
	})
	h.mu.Lock()
	checked := h.checks
	h.mu.Unlock()
	waitFor(t, "checks after the request returned", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.checks >= checked+3
	})
	resp, err := get(context.Background(), h, tunnel.AddressTarget, "/after")
	if err != nil {
		t.Fatalf("through the session after its request returned: %v", err)
	}
	if body, _ := io.ReadAll(resp.Body); string(body) != "target /after" {
		t.Fatalf("through the session after its request returned: %q", body)
	}
	h.mu.Lock()
	for _, as := range h.checkedAs {
		if as != h.agent.GetName()+" get" {
			t.Errorf("a check saw user and verb %q, want the attach request's", as)
		}
	}
	h.mu.Unlock()
	h.setAllow(false)
	waitFor(t, "the revoked session to close", func() bool { _, ok := h.sessions.Connected(h.key()); return !ok })
}

// TestSessionsAfterCloseAllEnd: once CloseAll ran (the server stops), a session that comes
// up ends at once, and its agent goes elsewhere.
func TestSessionsAfterCloseAllEnd(t *testing.T) {
	h := newHub(t, nil, time.Minute)
	target := targetServer(t)
	h.sessions.CloseAll()
	startAgent(t, h, target.Listener.Addr().String(), nil)
	// Nothing else closes sessions here.
	waitFor(t, "two sessions started and ended by themselves", func() bool {
		n := 0
		for _, e := range h.eventLog() {
			if e == "edge=false" {
				n++
			}
		}
		return n >= 2
	})
}

// TestAPanicEndsOnlyItsSession: a panic while a session is served (here in the code that runs
// once it is up) closes that session and is logged; the process and the attach request live
// on, and the agent's next session is served.
func TestAPanicEndsOnlyItsSession(t *testing.T) {
	sessions := tunnel.NewSessions(nil, tunnel.Limits{})
	t.Cleanup(sessions.CloseAll)
	m := tunnel.Mount{Cluster: clusters.DefaultCluster, Name: "edge", UID: "uid-1"}
	var mu sync.Mutex
	attaches, returned := 0, 0
	hubServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		attaches++
		first := attaches == 1
		mu.Unlock()
		sessions.ServeAgent(w, req, m, "", func(context.Context, context.CancelFunc) {
			if first {
				panic("a bug while serving a session")
			}
		})
		mu.Lock()
		returned++
		mu.Unlock()
	}))
	t.Cleanup(hubServer.Close)
	target := targetServer(t)
	url, err := agent.AttachURL(hubServer.URL, "", m.Name)
	if err != nil {
		t.Fatal(err)
	}
	a := agenttest.Run(t, &agent.Config{Hub: &rest.Config{Host: hubServer.URL}, AttachURL: url, Mount: m.Name, Target: target.Listener.Addr().String(), MaxBackoff: time.Second})
	waitFor(t, "the agent's second session", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return attaches >= 2 && returned >= 2 && a.Connected()
	})
	if _, ok := sessions.Connected(m.Key()); !ok {
		t.Fatal("no session after the agent came back")
	}
}

// TestAttachNeedsTunnelAndPermission: the attach handler refuses mounts without spec.tunnel,
// agents without "create" on mounts/attach for the name, and agents other than the one a
// mount names, before any upgrade.
func TestAttachNeedsTunnelAndPermission(t *testing.T) {
	sessions := tunnel.NewSessions(nil, tunnel.Limits{})
	deny := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionDeny, "no", nil
	})
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "agent"})
	a := &tunnel.Attacher{Sessions: sessions, Authorizer: deny}
	plain := &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "direct"}}
	if _, err := a.Handler(ctx, plain); err == nil || !strings.Contains(err.Error(), "spec.tunnel") {
		t.Fatalf("mount without spec.tunnel: %v", err)
	}
	m := &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: mounts.MountSpec{Tunnel: &mounts.MountTunnel{}}}
	if _, err := a.Handler(ctx, m); err == nil || !strings.Contains(err.Error(), `"create" on mounts/attach`) {
		t.Fatalf("agent without permission: %v", err)
	}
	// A mount that names its agent decides by what storage read a moment ago, before any
	// authorizer: the named user attaches without the permission, and nobody else, not even
	// one the authorizer allows.
	named := m.DeepCopy()
	named.Spec.Tunnel.AgentUser = "agent"
	if _, err := a.Handler(ctx, named); err != nil {
		t.Fatalf("the named agent: %v", err)
	}
	named.Spec.Tunnel.AgentUser = "another"
	a.Authorizer = nil
	if _, err := a.Handler(ctx, named); err == nil || !strings.Contains(err.Error(), "names another user as its agent") {
		t.Fatalf("an agent the mount does not name: %v", err)
	}
	// A permitted agent that does not upgrade gets a Status, not a hang.
	handler, err := a.Handler(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/apis/mounts.kcp.io/v1alpha1/mounts/edge/attach", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "WebSocket") {
		t.Fatalf("plain GET: %d %s", rec.Code, rec.Body)
	}
}

// TestHubNeverAsksForOtherAddresses: the hub asks an agent only for the two addresses (a refused connect would end the session).
func TestHubNeverAsksForOtherAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h := newHub(t, nil, 0)
	a := startAgent(t, h, ln.Addr().String(), nil)
	waitFor(t, "the session", a.Connected)
	if _, err := h.sessions.DialContext(context.Background(), h.key(), ln.Addr().String()); err == nil {
		t.Fatal("a raw address was dialed")
	}
}

// TestBrokenUpgradeReplacesNothing: an attach that never becomes a WebSocket answers a
// Status, and neither replaces the mount's session nor reports one.
func TestBrokenUpgradeReplacesNothing(t *testing.T) {
	h := newHub(t, nil, 0)
	target := targetServer(t)
	a := startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the session", a.Connected)
	since, _ := h.sessions.Connected(h.key())
	events := len(h.eventLog())

	req, _ := http.NewRequest(http.MethodGet, h.server.URL+"/attach", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket") // no Sec-WebSocket-Key, no version
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"kind":"Status"`) {
		t.Fatalf("broken upgrade: %d %s", resp.StatusCode, body)
	}
	if now, ok := h.sessions.Connected(h.key()); !ok || !now.Equal(since) || !a.Connected() {
		t.Fatal("a broken upgrade replaced the session")
	}
	if got := len(h.eventLog()); got != events {
		t.Fatalf("a broken upgrade was reported: %v", h.eventLog())
	}
	if _, err := get(context.Background(), h, tunnel.AddressTarget, "/still-there"); err != nil {
		t.Fatal(err)
	}
}

// TestNoLeakOverReconnects: 50 sessions closed by key (the agent reconnects each time), each
// with a dial through it, leave no goroutine behind once hub and agent are gone.
func TestNoLeakOverReconnects(t *testing.T) {
	baseline := runtime.NumGoroutine()
	func() {
		h := newHub(t, nil, time.Hour)
		defer h.server.Close()
		defer h.sessions.CloseAll()
		target := targetServer(t)
		defer target.Close()
		url, err := agent.AttachURL(h.server.URL, "", h.mount.Name)
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(&agent.Config{Hub: &rest.Config{Host: h.server.URL}, AttachURL: url, Mount: h.mount.Name, Target: target.Listener.Addr().String(), MaxBackoff: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(ctx) }()
		defer func() { cancel(); <-done }()
		for i := range 50 {
			var since time.Time
			waitFor(t, "a session", func() bool {
				var ok bool
				since, ok = h.sessions.Connected(h.key())
				return ok && a.Connected()
			})
			if _, err := get(context.Background(), h, tunnel.AddressTarget, fmt.Sprintf("/round-%d", i)); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			h.sessions.Close(h.key())
			waitFor(t, "the session to end", func() bool {
				now, ok := h.sessions.Connected(h.key())
				return !ok || !now.Equal(since)
			})
		}
	}()
	http.DefaultClient.CloseIdleConnections()
	var now int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if now = runtime.NumGoroutine(); now <= baseline+2 {
			return
		}
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("goroutines: %d before, %d after\n%s", baseline, now, buf[:runtime.Stack(buf, true)])
}

// With MetricsWithoutMounts (--metrics-per-mount=false) a session and its dials count in
// series without a mount, and a deleted mount leaves them (they are every mount's).
func TestMetricsWithoutMounts(t *testing.T) {
	registry := metrics.NewKubeRegistry()
	h := newHub(t, &registry, 0)
	h.sessions.MetricsWithoutMounts = true
	target := targetServer(t)
	a := startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the session", func() bool { _, ok := h.sessions.Connected(h.key()); return ok && a.Connected() })
	if _, err := get(context.Background(), h, tunnel.AddressTarget, "/version"); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP mount_tunnel_sessions [ALPHA] Agent sessions held by this process, by mount.
# TYPE mount_tunnel_sessions gauge
mount_tunnel_sessions{mount=""} 1
# HELP mount_tunnel_dials_total [ALPHA] Connections dialed through tunnels, by mount and result (ok, no_session, error, refused).
# TYPE mount_tunnel_dials_total counter
mount_tunnel_dials_total{mount="",result="ok"} 1
`
	if err := testutil.GatherAndCompare(registry, strings.NewReader(want), "mount_tunnel_sessions", "mount_tunnel_dials_total"); err != nil {
		t.Error(err)
	}
	h.sessions.Forget(tunnel.Mount{Cluster: clusters.DefaultCluster, Name: h.mount.Name, UID: h.mount.UID})
	waitFor(t, "the session to end", func() bool { _, ok := h.sessions.Connected(h.key()); return !ok })
	if err := testutil.GatherAndCompare(registry, strings.NewReader(strings.Replace(want, `{mount=""} 1`, `{mount=""} 0`, 1)), "mount_tunnel_sessions", "mount_tunnel_dials_total"); err != nil {
		t.Errorf("after the mount was deleted: %v", err)
	}
}

// TestConnectionsOfAnEndedSessionAreLost: a connection whose session ends under it fails with
// ErrLost (remotedialer's own error would read as the target's answer to the proxy), whether
// the hub ends the session or the agent goes away; one its target closes ends with io.EOF.
func TestConnectionsOfAnEndedSessionAreLost(t *testing.T) {
	held := make(chan net.Conn, 8)
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
			held <- c
		}
	}()
	h := newHub(t, nil, 0)
	url, err := agent.AttachURL(h.server.URL, "", h.mount.Name)
	if err != nil {
		t.Fatal(err)
	}
	a, stop := agenttest.Start(t, &agent.Config{Hub: &rest.Config{Host: h.server.URL}, AttachURL: url, Mount: h.mount.Name, Target: ln.Addr().String(), MaxBackoff: time.Second})
	waitFor(t, "the session", a.Connected)

	dial := func() (net.Conn, net.Conn) {
		t.Helper()
		c, err := h.sessions.DialContext(context.Background(), h.key(), tunnel.AddressTarget)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		select {
		case tc := <-held:
			return c, tc
		case <-time.After(30 * time.Second):
			t.Fatal("the target got no connection")
		}
		return nil, nil
	}
	read := func(c net.Conn) error {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err
	}

	c, tc := dial()
	_ = tc.Close()
	if err := read(c); err != io.EOF {
		t.Errorf("closed by its target: %v, want io.EOF", err)
	}

	c, _ = dial()
	since, _ := h.sessions.Connected(h.key())
	h.sessions.Close(h.key())
	if err := read(c); !errors.Is(err, tunnel.ErrLost) {
		t.Errorf("the hub ended the session: %v, want ErrLost", err)
	}
	waitFor(t, "the agent back", func() bool { s, ok := h.sessions.Connected(h.key()); return ok && s.After(since) && a.Connected() })

	c, _ = dial()
	stop()
	if err := read(c); !errors.Is(err, tunnel.ErrLost) {
		t.Errorf("the agent went away: %v, want ErrLost", err)
	}
	waitFor(t, "the session gone", func() bool { _, ok := h.sessions.Connected(h.key()); return !ok })
	if _, err := c.Write([]byte("x")); !errors.Is(err, tunnel.ErrLost) {
		t.Errorf("a write after the agent went away: %v, want ErrLost", err)
	}
}
