package tunnel_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/component-base/metrics"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// The message types of remotedialer's wire protocol.
const (
	typeData         = 1
	typeConnect      = 2
	typeError        = 3
	typeAddClient    = 4
	typeRemoveClient = 5
	typePause        = 6
	typeResume       = 7
	typeSync         = 8
)

// hostileAgent attaches to h's mount as an agent may, then speaks remotedialer's wire
// protocol by hand: it sends what a tenant chooses.
type hostileAgent struct {
	ws *websocket.Conn

	mu       sync.Mutex
	connects []int64 // connection IDs the hub asked for
	pauses   int
	closed   bool
	changed  chan struct{}
}

func attachHostile(t *testing.T, h *hub) *hostileAgent {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.server.URL, "http")+"/attach", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	a := &hostileAgent{ws: ws, changed: make(chan struct{}, 1)}
	go a.read()
	waitFor(t, "the hostile session", func() bool { _, ok := h.sessions.Connected(h.key()); return ok })
	return a
}

// read reads the hub's messages: Connects and Pauses are noted, nothing is obeyed.
func (a *hostileAgent) read() {
	defer func() {
		a.mu.Lock()
		a.closed = true
		a.mu.Unlock()
		a.notify()
	}()
	for {
		_, r, err := a.ws.NextReader()
		if err != nil {
			return
		}
		br := &byteReader{r: r}
		_, _ = binary.ReadVarint(br)
		connID, _ := binary.ReadVarint(br)
		msgType, err := binary.ReadVarint(br)
		if err != nil {
			return
		}
		a.mu.Lock()
		switch msgType {
		case typeConnect:
			a.connects = append(a.connects, connID)
		case typePause:
			a.pauses++
		}
		a.mu.Unlock()
		a.notify()
	}
}

func (a *hostileAgent) notify() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

type byteReader struct{ r io.Reader }

func (b *byteReader) ReadByte() (byte, error) {
	var p [1]byte
	_, err := io.ReadFull(b.r, p[:])
	return p[0], err
}

// connect waits for the hub's n-th Connect and returns its connection ID.
func (a *hostileAgent) connect(t *testing.T, n int) int64 {
	t.Helper()
	waitFor(t, "the hub's Connect", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.connects) >= n
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.connects[n-1]
}

func (a *hostileAgent) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// send writes one remotedialer message.
func (a *hostileAgent) send(connID, msgType int64, body []byte) error {
	b := binary.AppendVarint(nil, rand.Int64())
	b = binary.AppendVarint(b, connID)
	b = binary.AppendVarint(b, msgType)
	if msgType == typeData || msgType == typeConnect {
		b = binary.AppendVarint(b, 15000)
	}
	_ = a.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return a.ws.WriteMessage(websocket.BinaryMessage, append(b, body...))
}

// flood sends Data for connID, ignoring Pause, until the hub closes the session or max
// bytes went; it returns what was sent.
func (a *hostileAgent) flood(connID int64, max int) int {
	chunk := bytes.Repeat([]byte("z"), 32<<10)
	sent := 0
	for sent < max && !a.isClosed() {
		if err := a.send(connID, typeData, chunk); err != nil {
			break
		}
		sent += len(chunk)
	}
	return sent
}

func newBoundedHub(t *testing.T, limits tunnel.Limits) (*hub, metrics.KubeRegistry) {
	t.Helper()
	registry := metrics.NewKubeRegistry()
	h := newHubWith(t, &registry, 0, limits)
	return h, registry
}

func violations(t *testing.T, registry metrics.KubeRegistry, reason string) string {
	t.Helper()
	return counter(t, registry, "mount_tunnel_session_violations_total", reason)
}

// counter is the value of a counter (with the given reason label, if any).
func counter(t *testing.T, registry metrics.KubeRegistry, name, reason string) string {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if reason == "" {
				return fmt.Sprint(m.GetCounter().GetValue())
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return fmt.Sprint(m.GetCounter().GetValue())
				}
			}
		}
	}
	return "0"
}

// TestAgentIgnoringPauseLosesItsSession: an agent that answers a connection with more than
// the connection's bound while the proxy does not read, ignoring the hub's Pause, has its
// session closed; the hub buffered no more than the bound.
func TestAgentIgnoringPauseLosesItsSession(t *testing.T) {
	h, registry := newBoundedHub(t, tunnel.Limits{ConnectionBuffer: 4 << 20, SessionBuffer: 16 << 20})
	a := attachHostile(t, h)
	conn, err := h.sessions.DialContext(context.Background(), h.key(), tunnel.AddressTarget)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sent := a.flood(a.connect(t, 1), 64<<20)
	waitFor(t, "the session to close", func() bool { _, ok := h.sessions.Connected(h.key()); return !ok && a.isClosed() })
	if sent >= 64<<20 {
		t.Fatalf("the hub took all %d bytes", sent)
	}
	if got := violations(t, registry, tunnel.ViolationConnectionBuffer); got != "1" {
		t.Errorf("connection_buffer violations: %s", got)
	}
	a.mu.Lock()
	pauses := a.pauses
	a.mu.Unlock()
	if pauses == 0 {
		t.Error("the hub never asked the agent to pause")
	}
	// The proxy reads what was buffered, within the bound, then the end.
	n, _ := io.Copy(io.Discard, conn)
	if n > 4<<20 {
		t.Errorf("the hub buffered %d bytes of one connection, bound 4 MiB", n)
	}
	t.Logf("the agent sent %d bytes before the hub closed its session; %d reached the proxy", sent, n)
}

// TestAgentSessionBound: connections each under their bound, together past the session's:
// the connection that takes the session past it is dropped, the session and the other
// connection live.
func TestAgentSessionBound(t *testing.T) {
	h, registry := newBoundedHub(t, tunnel.Limits{ConnectionBuffer: 8 << 20, SessionBuffer: 6 << 20})
	a := attachHostile(t, h)
	var conns []io.ReadCloser
	for i := 1; i <= 2; i++ {
		conn, err := h.sessions.DialContext(context.Background(), h.key(), tunnel.AddressAgent)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns = append(conns, conn)
		a.flood(a.connect(t, i), 4<<20)
	}
	// Nothing is read until the hub has dropped one (the agent's bytes may still be on their
	// way).
	waitFor(t, "a dropped connection", func() bool {
		return counter(t, registry, "mount_tunnel_connections_dropped_total", "") == "1"
	})
	if n, err := io.ReadFull(conns[0], make([]byte, 4<<20)); err != nil {
		t.Fatalf("the first connection: %d bytes, %v", n, err)
	}
	n, _ := io.Copy(io.Discard, conns[1])
	if n >= 4<<20 {
		t.Errorf("the second connection was not dropped: %d bytes", n)
	}
	if _, ok := h.sessions.Connected(h.key()); !ok || a.isClosed() {
		t.Fatal("the session was closed")
	}
}

// TestReadBytesMakeRoom: bytes the proxy read no longer count; closed connections neither.
func TestReadBytesMakeRoom(t *testing.T) {
	h, registry := newBoundedHub(t, tunnel.Limits{ConnectionBuffer: 4 << 20, SessionBuffer: 4 << 20})
	a := attachHostile(t, h)
	for i := 1; i <= 4; i++ {
		conn, err := h.sessions.DialContext(context.Background(), h.key(), tunnel.AddressTarget)
		if err != nil {
			t.Fatal(err)
		}
		id := a.connect(t, i)
		// 3 MiB each, 12 MiB in all: read in full, or closed after a part.
		chunk := bytes.Repeat([]byte("r"), 32<<10)
		for range 96 {
			if err := a.send(id, typeData, chunk); err != nil {
				t.Fatal(err)
			}
		}
		if i%2 == 0 {
			if _, err := io.ReadFull(conn, make([]byte, 96*len(chunk))); err != nil {
				t.Fatal(err)
			}
		} else {
			if _, err := io.ReadFull(conn, make([]byte, 1<<20)); err != nil {
				t.Fatal(err)
			}
		}
		conn.Close()
	}
	if _, ok := h.sessions.Connected(h.key()); !ok || a.isClosed() {
		t.Fatal("the session was closed")
	}
	if got := violations(t, registry, tunnel.ViolationConnectionBuffer) + counter(t, registry, "mount_tunnel_connections_dropped_total", ""); got != "00" {
		t.Errorf("violations, dropped: %s", got)
	}
}

// TestAgentMessagesOutsideItsRole: a message type an agent never sends (the peering messages
// that remotedialer would store, a Connect, an unknown type, a text message) or a message over
// tunnel.MaxMessage closes the session at once.
func TestAgentMessagesOutsideItsRole(t *testing.T) {
	for name, tc := range map[string]struct {
		send   func(*hostileAgent) error
		reason string
	}{
		"AddClient":    {func(a *hostileAgent) error { return a.send(0, typeAddClient, []byte("other/1")) }, tunnel.ViolationMessageType},
		"RemoveClient": {func(a *hostileAgent) error { return a.send(0, typeRemoveClient, []byte("other/1")) }, tunnel.ViolationMessageType},
		"Connect":      {func(a *hostileAgent) error { return a.send(5, typeConnect, []byte("tcp/127.0.0.1:22")) }, tunnel.ViolationMessageType},
		"unknown":      {func(a *hostileAgent) error { return a.send(0, 99, nil) }, tunnel.ViolationMessageType},
		"text":         {func(a *hostileAgent) error { return a.ws.WriteMessage(websocket.TextMessage, []byte("hi")) }, tunnel.ViolationMessageType},
		"oversized": {func(a *hostileAgent) error {
			return a.send(0, typeSync, make([]byte, tunnel.MaxMessage))
		}, tunnel.ViolationMessageSize},
	} {
		t.Run(name, func(t *testing.T) {
			h, registry := newBoundedHub(t, tunnel.Limits{})
			a := attachHostile(t, h)
			// Allowed messages first: the session lives.
			for _, typ := range []int64{typePause, typeResume, typeError, typeData} {
				if err := a.send(42, typ, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.send(0, typeSync, make([]byte, 8*1000)); err != nil {
				t.Fatal(err)
			}
			if _, err := h.sessions.DialContext(context.Background(), h.key(), tunnel.AddressTarget); err != nil {
				t.Fatalf("the session did not live through allowed messages: %v", err)
			}
			_ = tc.send(a)
			waitFor(t, "the session to close", func() bool { _, ok := h.sessions.Connected(h.key()); return !ok && a.isClosed() })
			if got := violations(t, registry, tc.reason); got != "1" {
				t.Errorf("%s violations: %s", tc.reason, got)
			}
		})
	}
}

// TestAgentConnectionListsAreIgnored: an agent's list of its connections (SyncConnections,
// every minute) that misses a connection the hub opened a moment before, because the agent
// wrote the list before it read the hub's Connect, does not close that connection. Without the
// guard remotedialer closed it ("sync from client"), failing a proxied request for nothing.
func TestAgentConnectionListsAreIgnored(t *testing.T) {
	h, registry := newBoundedHub(t, tunnel.Limits{})
	a := attachHostile(t, h)
	conn, err := h.sessions.DialContext(context.Background(), h.key(), tunnel.AddressTarget)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	id := a.connect(t, 1)
	// The list the agent wrote before the Connect reached it: no connection.
	if err := a.send(0, typeSync, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.send(id, typeData, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 5)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v; want the agent's hello", got, err)
	}
	if _, ok := h.sessions.Connected(h.key()); !ok || a.isClosed() {
		t.Fatal("the session was closed")
	}
	if got := counter(t, registry, "mount_tunnel_session_violations_total", ""); got != "0" {
		t.Errorf("violations: %s", got)
	}
}

// TestHonestAgentStaysWithinBounds: the real agent (remotedialer's client, which honours
// Pause) sends two bodies of four times the connection's bound at once to a proxy that reads
// them slowly, with the default bounds: no violation, every byte arrives. (Bounds of 5 MiB
// per connection failed this in 6 of 10 runs on loopback: what an agent wrote before the Pause
// reached it sits in both sockets' buffers; 8 MiB passed 10 of 10.)
func TestHonestAgentStaysWithinBounds(t *testing.T) {
	const size = 64 << 20
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	want := sha256.New()
	for range size / len(body) {
		want.Write(body)
	}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		for range size / len(body) {
			if _, err := w.Write(body); err != nil {
				return
			}
		}
	}))
	t.Cleanup(target.Close)
	h, registry := newBoundedHub(t, tunnel.Limits{})
	a := startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the session", a.Connected)

	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := h.sessions.DialContext(context.Background(), h.key(), tunnel.AddressTarget)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET /big HTTP/1.1\r\nHost: target\r\n\r\n")
			resp, err := http.ReadResponse(bufioReader(conn), nil)
			if err != nil {
				t.Error(err)
				return
			}
			got := sha256.New()
			buf := make([]byte, 256<<10)
			for {
				n, err := resp.Body.Read(buf)
				got.Write(buf[:n])
				if err != nil {
					break
				}
				time.Sleep(time.Millisecond) // a slow caller: ~256 MB/s at most
			}
			if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
				t.Error("the body arrived changed or cut")
			}
		}()
	}
	wg.Wait()
	if _, ok := h.sessions.Connected(h.key()); !ok {
		t.Fatal("the honest agent lost its session")
	}
	for _, reason := range []string{tunnel.ViolationConnectionBuffer, tunnel.ViolationMessageSize, tunnel.ViolationMessageType, tunnel.ViolationFraming} {
		if got := violations(t, registry, reason); got != "0" {
			t.Errorf("%s violations of an honest agent: %s", reason, got)
		}
	}
}

// TestStalledCallersKeepTheSession: callers that stop reading cannot close an honest agent's
// session: 48 connections whose bodies nobody reads fill up to their Pause (2 MiB and what was
// in flight each, past the session's 64 MiB); the connections that went past the session's
// bound are dropped (their requests fail), the session lives, the others' bodies arrive whole,
// and a new request is served.
func TestStalledCallersKeepTheSession(t *testing.T) {
	const size, streams = 8 << 20, 48
	body := bytes.Repeat([]byte("s"), 1<<20)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		for range size / len(body) {
			if _, err := w.Write(body); err != nil {
				return
			}
		}
	}))
	t.Cleanup(target.Close)
	h, registry := newBoundedHub(t, tunnel.Limits{})
	a := startAgent(t, h, target.Listener.Addr().String(), nil)
	waitFor(t, "the session", a.Connected)
	var readers []*bufio.Reader
	for range streams {
		conn, err := h.sessions.DialContext(context.Background(), h.key(), tunnel.AddressTarget)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: target\r\n\r\n")
		readers = append(readers, bufio.NewReader(conn))
	}
	time.Sleep(3 * time.Second) // the agent fills every connection up to its Pause
	if _, ok := h.sessions.Connected(h.key()); !ok || !a.Connected() {
		t.Fatal("stalled callers closed the honest agent's session")
	}
	whole := 0
	for _, r := range readers {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			continue
		}
		if n, err := io.Copy(io.Discard, resp.Body); err == nil && n == size {
			whole++
		}
	}
	dropped := counter(t, registry, "mount_tunnel_connections_dropped_total", "")
	t.Logf("%d of %d bodies whole, %s connections dropped", whole, streams, dropped)
	if fmt.Sprint(streams-whole) != dropped || whole == 0 {
		t.Errorf("%d bodies whole of %d, %s dropped", whole, streams, dropped)
	}
	if got := violations(t, registry, tunnel.ViolationConnectionBuffer); got != "0" {
		t.Errorf("connection_buffer violations: %s", got)
	}
	if _, err := get(context.Background(), h, tunnel.AddressTarget, "/after"); err != nil {
		t.Fatalf("a request after the stall: %v", err)
	}
}

// TestLimitsValidate: bounds below what an agent honouring Pause needs are refused.
func TestLimitsValidate(t *testing.T) {
	if err := (tunnel.Limits{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := (tunnel.Limits{ConnectionBuffer: 4 << 20}).Validate(); err == nil {
		t.Error("4 MiB per connection was accepted")
	}
	if err := (tunnel.Limits{ConnectionBuffer: 16 << 20, SessionBuffer: 8 << 20}).Validate(); err == nil {
		t.Error("a session bound below the connection bound was accepted")
	}
}

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }
