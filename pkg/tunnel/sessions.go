package tunnel

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rancher/remotedialer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// Mount names the mount a session serves.
type Mount struct {
	Cluster clusters.Name
	Name    string
	UID     types.UID
}

// Key is the session key of the mount (SessionKey).
func (m Mount) Key() string { return SessionKey(m.Cluster, m.UID) }

// Label names the mount in metrics: its name, and <cluster>/<name> for mounts of a logical
// cluster, as the proxy's metrics do.
func (m Mount) Label() string {
	if m.Cluster == clusters.DefaultCluster || m.Cluster == "" {
		return m.Name
	}
	return string(m.Cluster) + "/" + m.Name
}

// Event is a change of the session of a mount on this replica.
type Event struct {
	Mount Mount
	// Connected is true when a session started, false when the mount's last session ended.
	Connected bool
	// Since is when the session started.
	Since time.Time
}

// Sessions holds the agents' sessions on this replica and dials through them. It wraps one
// remotedialer.Server, which speaks the wire protocol; Sessions decides which session serves a
// key and closes sessions by key, which remotedialer cannot.
//
// One session per key: a new attach replaces the session the key had, on purpose. An agent
// that restarts (or whose connection died without a close, which the hub notices only when
// pings stop for a minute) is the agent that should serve now; remotedialer itself would keep
// dialing through the oldest session, a dead one, until it timed out. Two agents of one mount
// thus take the session from each other; that is an operator's mistake the AgentConnected
// condition makes visible, never a way to serve another mount, since the key is the mount's.
type Sessions struct {
	server  *remotedialer.Server
	metrics *Metrics
	limits  Limits
	// MetricsWithoutMounts leaves the mount label of the metrics empty: one series for all
	// mounts (--metrics-per-mount=false). Set before serving.
	MetricsWithoutMounts bool

	mu       sync.Mutex
	byKey    map[string]*session
	seq      uint64
	watchers []func(Event)
	// closing is set by CloseAll: the server stops, and sessions that come up later end at
	// once.
	closing bool
}

// label is the mount label of m's metric series: its Label, or empty.
func (s *Sessions) label(m Mount) string {
	if s.MetricsWithoutMounts {
		return ""
	}
	return m.Label()
}

// session is one agent connection. clientKey is unique per session (the mount's key and a
// sequence number), so remotedialer never has two sessions of one client key and this type
// alone decides which session a key dials through.
type session struct {
	mount Mount
	// agent is the user name the agent attached as ("" if not known).
	agent     string
	clientKey string
	since     time.Time
	flow      *flow

	mu     sync.Mutex
	conn   net.Conn // the hijacked connection, once the WebSocket is up
	closed bool
}

// close ends the session: closing the hijacked connection ends remotedialer's read loop,
// which removes the session and fails its connections.
func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.conn != nil {
		_ = s.conn.Close()
	}
}

func (s *session) hasConn() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil
}

func (s *session) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// hijacked records the session's connection; a session closed before it had one closes it
// at once.
func (s *session) hijacked(conn net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn = conn
	if s.closed {
		_ = conn.Close()
	}
}

type clientKeyContextKey struct{}

// NewSessions returns an empty set of sessions recording into metrics (nil: none), each
// session bounded by limits (zero fields take their defaults).
func NewSessions(metrics *Metrics, limits Limits) *Sessions {
	s := &Sessions{metrics: metrics, limits: limits.withDefaults(), byKey: map[string]*session{}}
	// No peer is ever added to the server: remotedialer's peering (a static token, TLS
	// verification off) stays unused, so its peer headers authenticate nobody. Replicas
	// reach each other's sessions through pkg/tunnel/peers instead.
	s.server = remotedialer.New(func(req *http.Request) (string, bool, error) {
		// Serve authorized the request and named the session before it reached here.
		key, ok := req.Context().Value(clientKeyContextKey{}).(string)
		return key, ok, nil
	}, writeUpgradeError)
	return s
}

// Watch registers fn to learn of sessions starting and ending. fn runs synchronously, outside
// any lock of Sessions; it must not block.
func (s *Sessions) Watch(fn func(Event)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchers = append(s.watchers, fn)
}

func (s *Sessions) notify(e Event) {
	s.mu.Lock()
	watchers := s.watchers
	s.mu.Unlock()
	for _, fn := range watchers {
		fn(e)
	}
}

// Serve upgrades req to the tunnel WebSocket and starts the session of mount; see ServeAgent.
// The caller has authenticated and authorized the agent for mount.
func (s *Sessions) Serve(w http.ResponseWriter, req *http.Request, mount Mount) {
	s.ServeAgent(w, req, mount, "", nil)
}

// ServeAgent upgrades req to the tunnel WebSocket and starts the session of mount, for an agent
// known by its user name, which CloseOthers compares. It returns once the session is up or
// the upgrade failed: the session goes on in a goroutine of its own until the agent goes, or
// it is closed, replaced, or ended. started, if set, runs once the session is up, with the
// session's context (sessionContext: the request's values, not its end) and the function
// that ends the session.
//
// Not the request's goroutine: that one is deep in the server's handler chain (its stack,
// grown by the TLS handshake too, was most of the 44 KiB per idle session at 10,000 agents),
// and while it runs, the chain keeps the request, its context and the HTTP connection's
// buffers. The attach request thus ends (audit, request metrics) when its session is up;
// the session's own end is logged and counted by Sessions.
func (s *Sessions) ServeAgent(w http.ResponseWriter, req *http.Request, mount Mount, agent string, started func(ctx context.Context, end context.CancelFunc)) {
	ctx, end := context.WithCancel(sessionContext(req.Context()))
	logger := klog.FromContext(ctx).WithValues("mount", mount.Label())
	key := mount.Key()
	s.mu.Lock()
	s.seq++
	sess := &session{mount: mount, agent: agent, clientKey: key + "#" + strconv.FormatUint(s.seq, 10), flow: newFlow(s.limits)}
	s.mu.Unlock()
	sess.flow.dropped = func() {
		logger.V(2).Info("Dropped a tunnel connection: the agent's session holds as many unread bytes as it may")
		s.metrics.Dropped(s.label(mount))
	}

	// handedOver is closed once the request's ResponseWriter is no longer used: at the
	// hijack, or when the upgrade failed and its answer is written.
	handedOver := make(chan struct{})
	handOver := sync.OnceFunc(func() { close(handedOver) })
	reqCtx := req.Context()
	hw := &hijackRecorder{ResponseWriter: w, session: sess, hijacked: func() {
		// The session counts from the upgrade on (sess has its connection): a request that
		// never becomes a WebSocket replaces nothing and reports nothing.
		releaseAttachSlot(reqCtx)
		sess.since = time.Now()
		s.mu.Lock()
		old := s.byKey[key]
		s.byKey[key] = sess
		closing := s.closing
		s.mu.Unlock()
		if old != nil {
			logger.Info("A new agent session replaces the mount's previous one")
			old.close()
		}
		s.metrics.SessionStarted(s.label(mount))
		logger.Info("Agent attached")
		s.notify(Event{Mount: mount, Connected: true, Since: sess.since})
		if closing {
			// CloseAll ran (the server stops): the agent goes to another replica.
			sess.close()
		}
		if started != nil {
			started(ctx, end)
		}
		handOver()
	}}
	go s.serve(ctx, end, sess, logger, hw, req.WithContext(context.WithValue(ctx, clientKeyContextKey{}, sess.clientKey)), handOver)
	<-handedOver
}

// serve serves one session (ServeAgent) until it ends. w and req are not used once
// remotedialer serves the session, so neither they nor what they hold stay live.
func (s *Sessions) serve(ctx context.Context, end context.CancelFunc, sess *session, logger klog.Logger, w *hijackRecorder, req *http.Request, handOver func()) {
	defer end()
	stop := context.AfterFunc(ctx, sess.close)
	defer stop()
	s.serveWebSocket(logger, w, req)
	sess.close()
	handOver()
	if !sess.hasConn() {
		return
	}
	mount := sess.mount
	if v := sess.flow.failed(); v != nil {
		// One line per session: the agent is a tenant breaking the bounds, not an error of
		// the hub's.
		logger.Info("Closed an agent session: the agent broke a bound of the tunnel", "reason", v.reason, "detail", v.Error())
		s.metrics.Violated(s.label(mount), v.reason)
	}

	key := mount.Key()
	s.mu.Lock()
	last := s.byKey[key] == sess
	if last {
		delete(s.byKey, key)
	}
	s.mu.Unlock()
	s.metrics.SessionEnded(s.label(mount))
	logger.Info("Agent session ended")
	if last {
		s.notify(Event{Mount: mount, Connected: false, Since: sess.since})
	}
}

// serveWebSocket runs remotedialer on one session. A panic ends that session only, as the
// server's panic filter and net/http did while sessions ran on their request's goroutine: an
// agent is a tenant, and no session may take the replica down.
func (s *Sessions) serveWebSocket(logger klog.Logger, w http.ResponseWriter, req *http.Request) {
	defer func() {
		if r := recover(); r != nil {
			logger.Error(fmt.Errorf("panic: %v", r), "Serving an agent session panicked; it is closed", "stack", string(debug.Stack()))
		}
	}()
	s.server.ServeHTTP(w, req)
}

// sessionContext is the context of a session, which outlives its attach request: the
// request's logger, logical cluster, request info, user and authentication audiences, which
// the session's logs and checks (authenticators, authorizers) read, but not its end, nor its
// other values: those hold the request, its whole handler chain and the HTTP connection's
// buffers (the HTTP log keeps the request and its ResponseWriter), and its audit event, which
// is complete once the request returned.
func sessionContext(req context.Context) context.Context {
	ctx := klog.NewContext(context.Background(), klog.FromContext(req))
	ctx = clusters.WithCluster(ctx, clusters.From(req))
	if info, ok := genericapirequest.RequestInfoFrom(req); ok {
		ctx = genericapirequest.WithRequestInfo(ctx, info)
	}
	if u, ok := genericapirequest.UserFrom(req); ok {
		ctx = genericapirequest.WithUser(ctx, u)
	}
	if audiences, ok := authenticator.AudiencesFrom(req); ok {
		ctx = authenticator.WithAudiences(ctx, audiences)
	}
	return ctx
}

// DialContext dials address through the session of key on this replica. It implements Dialer
// for the sessions this replica holds.
func (s *Sessions) DialContext(ctx context.Context, key, address string) (net.Conn, error) {
	s.mu.Lock()
	sess := s.byKey[key]
	s.mu.Unlock()
	if sess == nil {
		return nil, ErrNoSession
	}
	label := s.label(sess.mount)
	if address != AddressTarget && address != AddressAgent {
		// The agent would refuse it and end the whole session.
		s.metrics.Dialed(label, DialRefused, 0)
		return nil, fmt.Errorf("refusing to ask an agent to dial %q: only %s and %s are dialed through tunnels", address, AddressTarget, AddressAgent)
	}
	// Between the upgrade and remotedialer's registration of the session there is a moment
	// in which the session is ours but not yet remotedialer's: wait it out, briefly.
	for wait := time.Millisecond; !s.server.HasSession(sess.clientKey); wait *= 2 {
		if sess.isClosed() || wait > 256*time.Millisecond {
			s.metrics.Dialed(label, DialNoSession, 0)
			return nil, ErrNoSession
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the agent's session: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
	start := time.Now()
	if _, ok := ctx.Deadline(); !ok {
		// remotedialer writes the Connect in the dial's own goroutine only with a deadline
		// (otherwise it may write it after giving up); its own default is a minute.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	conn, err := sess.flow.dial(func() (net.Conn, error) { return s.server.Dialer(sess.clientKey)(ctx, "tcp", address) })
	if err != nil {
		s.metrics.Dialed(label, DialError, time.Since(start))
		return nil, fmt.Errorf("dialing through the agent's tunnel: %w", err)
	}
	s.metrics.Dialed(label, DialOK, time.Since(start))
	return s.metrics.CountBytes(label, &sessionConn{Conn: conn, sess: sess}), nil
}

// sessionConn marks the failures of a connection whose session ended under it as ErrLost:
// remotedialer fails such a connection with "tunnel disconnect", which the proxy would
// otherwise take for its target's answer. It also says why the agent could not connect to
// its target (fromAgent).
type sessionConn struct {
	net.Conn
	sess *session
	// used is set once a byte went either way.
	used atomic.Bool
}

func (c *sessionConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.markUsed(n)
	return n, c.lost(err)
}

func (c *sessionConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.markUsed(n)
	if err == io.ErrClosedPipe && !c.used.Load() {
		// remotedialer fails writes to a connection the agent closed with io.ErrClosedPipe,
		// and keeps the agent's reason (its failed dial of the target, say) for reads, which
		// return it at once: a connection that never carried a byte has nothing else to read.
		// The first write of a connection whose dial failed comes here, a TLS ClientHello.
		if _, why := c.Conn.Read(make([]byte, 1)); why != nil && why != io.EOF {
			err = why
		}
	}
	return n, c.lost(err)
}

// markUsed notes that n bytes went. Only the first store matters: loading first keeps the
// reading and the writing goroutine from writing the same cache line on every call.
func (c *sessionConn) markUsed(n int) {
	if n > 0 && !c.used.Load() {
		c.used.Store(true)
	}
}

// lost marks err as ErrLost when it ended the connection because its session ended, and
// otherwise names the failure of the agent's dial it stands for (fromAgent). remotedialer
// fails the session's connections before this package marks the session closed, so its own
// error ("tunnel disconnect", a constant of v0.6.1) counts as well. An agent may send that
// text as a connection's error itself: it then picks one fixed 502 message over another for
// its own mount's callers, which it could as well by ending its session.
func (c *sessionConn) lost(err error) error {
	if err == nil || err == io.EOF || errors.Is(err, ErrLost) {
		return err
	}
	if err.Error() == "tunnel disconnect" || c.sess.isClosed() {
		return Lost(err)
	}
	return fromAgent(err)
}

// Connected says whether this replica holds a session for key, and since when.
func (s *Sessions) Connected(key string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess, ok := s.byKey[key]; ok {
		return sess.since, true
	}
	return time.Time{}, false
}

// Close closes the session of key, if this replica holds one; it says whether it did.
func (s *Sessions) Close(key string) bool {
	s.mu.Lock()
	sess := s.byKey[key]
	s.mu.Unlock()
	if sess == nil {
		return false
	}
	sess.close()
	return true
}

// CloseOthers closes the session of m unless the user agent holds it: m now names agent as the
// only one that may (spec.tunnel.agentUser), and another one's session would otherwise last
// until its next re-check (minutes at thousands of sessions). It says whether it closed one.
func (s *Sessions) CloseOthers(m Mount, agent string) bool {
	s.mu.Lock()
	sess := s.byKey[m.Key()]
	s.mu.Unlock()
	if sess == nil || sess.agent == agent {
		return false
	}
	sess.close()
	return true
}

// Forget closes the session of a deleted mount and drops its metric series (but the
// sessions gauge, which its closing session takes to zero).
func (s *Sessions) Forget(m Mount) {
	s.Close(m.Key())
	if !s.MetricsWithoutMounts {
		// Without mount labels the series are every mount's: they stay.
		s.metrics.Forget(m.Label())
	}
}

// CloseAll closes every session, as the server stops: hijacked connections outlive the HTTP
// server's shutdown otherwise.
func (s *Sessions) CloseAll() {
	s.mu.Lock()
	s.closing = true
	all := make([]*session, 0, len(s.byKey))
	for _, sess := range s.byKey {
		all = append(all, sess)
	}
	s.mu.Unlock()
	for _, sess := range all {
		sess.close()
	}
}

// Len is the number of sessions held.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}

// hijackRecorder keeps the connection the WebSocket upgrade hijacks, so that the session can
// be closed by key.
type hijackRecorder struct {
	http.ResponseWriter
	session *session
	// hijacked runs once the connection is the session's, before the WebSocket is served.
	hijacked func()
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.session.hijacked(conn)
	h.hijacked()
	// remotedialer reads and writes the WebSocket through the session's guard (bounds.go).
	g, grw := guard(conn, rw, h.session.flow)
	return g, grw, nil
}

func (h *hijackRecorder) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// writeUpgradeError answers a failed WebSocket upgrade with a metav1.Status.
func writeUpgradeError(w http.ResponseWriter, _ *http.Request, code int, err error) {
	if h, ok := w.(*hijackRecorder); ok && h.session.hasConn() {
		// The upgrade failed after the hijack (the session was closed meanwhile): there
		// is no HTTP response to write any more.
		return
	}
	status := apierrors.NewBadRequest(fmt.Sprintf("the attach subresource needs a WebSocket upgrade: %v", err)).Status()
	if code != http.StatusBadRequest {
		status.Code = int32(code)
	}
	WriteStatus(w, &status)
}

// IsNoSession says whether err means that no agent is connected.
func IsNoSession(err error) bool { return errors.Is(err, ErrNoSession) }

// WriteStatus writes status as a JSON metav1.Status with its code.
func WriteStatus(w http.ResponseWriter, status *metav1.Status) {
	status.Kind, status.APIVersion = "Status", "v1"
	if status.Status == "" {
		status.Status = metav1.StatusFailure
	}
	code := int(status.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	body, err := json.Marshal(status)
	if err != nil {
		code, body = http.StatusInternalServerError, []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
