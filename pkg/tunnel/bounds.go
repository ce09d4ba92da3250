package tunnel

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// An agent is a tenant: it may attach to its own mount and nothing else, and what it sends
// must not make the hub hold more than a bound. remotedialer (v0.6.1) does not bound it: its
// readBuffer copies every Data message into a connection's buffer (Pause is a request the
// agent may ignore), reads a SyncConnections message whole, and stores the peering messages
// (AddClient, RemoveClient) of any session. So every session's WebSocket is read through a
// guard before remotedialer sees a byte: it follows the frames and each message's header,
// refuses the message types an agent never sends, bounds a message's size, and counts, per
// connection, the bytes received that the proxy has not read yet. The guard ends the session
// (never the hub) at the first message past a bound, before remotedialer sees that message.

// Defaults of Limits.
const (
	// DefaultConnectionBuffer bounds one connection's unread bytes. remotedialer asks the
	// agent to pause a connection at 2 MiB; what the agent wrote before the Pause reached it
	// still arrives: the bytes in both sockets' buffers (Linux's default maxima: 4 MiB to
	// send, 6 MiB to receive) and on the link. On loopback an honest agent went past 5 MiB
	// in 6 of 10 runs (TestHonestAgentStaysWithinBounds). The bound leaves 14 MiB for that.
	DefaultConnectionBuffer = 16 << 20
	// DefaultSessionBuffer bounds the unread bytes of all of a session's connections. Past it
	// the connection that receives more is dropped, not the session: callers who stop reading
	// leave 2 MiB and more per connection with an honest agent, so a session-wide bound that
	// closed the session would let them end everyone's use of the mount. 64 MiB: e.g. 24
	// stalled connections, each paused at 2 MiB, with what was in flight.
	DefaultSessionBuffer = 64 << 20
	// MaxMessage bounds one WebSocket message of an agent. remotedialer's client sends a
	// connection's bytes in messages of what one read of the target returned (32 KiB with
	// io.Copy), and SyncConnections with 8 bytes per open connection (131,072 in 1 MiB).
	MaxMessage = 1 << 20
	// minConnectionBuffer is the least ConnectionBuffer: remotedialer's pause threshold (its
	// MaxBuffer, 2 MiB) and what an honest agent sent on loopback before the Pause reached it
	// (past 5 MiB in 6 of 10 runs; 8 MiB held in 10 of 10).
	minConnectionBuffer = 8 << 20
)

// Limits bound what an agent's session can make the hub hold.
type Limits struct {
	// ConnectionBuffer bounds the bytes received on one connection that the proxy has not
	// read yet; 0 means DefaultConnectionBuffer.
	ConnectionBuffer int64
	// SessionBuffer bounds the unread bytes of a session's connections together: a connection
	// that receives bytes past it is dropped (its proxied request fails), the session lives.
	// 0 means DefaultSessionBuffer.
	SessionBuffer int64
}

func (l Limits) withDefaults() Limits {
	if l.ConnectionBuffer <= 0 {
		l.ConnectionBuffer = DefaultConnectionBuffer
	}
	if l.SessionBuffer <= 0 {
		l.SessionBuffer = DefaultSessionBuffer
	}
	return l
}

// Validate checks that the limits let an agent that honours Pause work.
func (l Limits) Validate() error {
	l = l.withDefaults()
	if l.ConnectionBuffer < minConnectionBuffer {
		return fmt.Errorf("the connection buffer must be at least %d bytes (remotedialer pauses a connection at 2 MiB, and what the agent sent before the pause reached it still arrives)", minConnectionBuffer)
	}
	if l.SessionBuffer < l.ConnectionBuffer {
		return errors.New("the session buffer must be at least the connection buffer")
	}
	return nil
}

// Why a guard ended a session: the reason label of mount_tunnel_session_violations_total.
const (
	ViolationMessageType      = "message_type"
	ViolationMessageSize      = "message_size"
	ViolationConnectionBuffer = "connection_buffer"
	ViolationFraming          = "framing"
)

// violation is an error of a session's agent that ends the session.
type violation struct {
	reason string
	err    error
}

func (v *violation) Error() string { return v.err.Error() }
func (v *violation) Unwrap() error { return v.err }

// flow accounts one session: the connections the hub dialed through it and their unread bytes.
type flow struct {
	limits Limits

	// dialMu makes dials through the session one at a time, so that the connection a dial
	// opened is the one whose Connect message the hub wrote while it held dialMu.
	dialMu sync.Mutex

	mu       sync.Mutex
	conns    map[int64]*flowEntry
	buffered int64 // over conns
	// dropped is called for each connection dropped for the session's bound.
	dropped func()
	dialing bool
	dialed  []int64 // connection IDs of the Connect messages written while dialing
	err     *violation
}

// flowEntry is one connection the hub dialed.
type flowEntry struct {
	id       int64
	buffered int64 // received from the agent, not read by the proxy yet
	// closed: remotedialer closed the connection (an Error either way) and drops what the
	// agent sends for it from then on.
	closed bool
	// released: the proxy closed it; its buffer is gone.
	released bool
	// conn is remotedialer's connection, once the dial returned it.
	conn net.Conn
	// drop: the session's bound dropped it (its dial fails if it has not returned yet).
	drop bool
}

func newFlow(limits Limits) *flow {
	return &flow{limits: limits.withDefaults(), conns: map[int64]*flowEntry{}}
}

// failed is the violation that ended the session, if any.
func (f *flow) failed() *violation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *flow) fail(v *violation) *violation {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = v
	}
	return f.err
}

// dial runs fn, a dial through the session, and returns its connection counted by f.
func (f *flow) dial(fn func() (net.Conn, error)) (net.Conn, error) {
	f.dialMu.Lock()
	defer f.dialMu.Unlock()
	f.mu.Lock()
	f.dialing, f.dialed = true, f.dialed[:0]
	f.mu.Unlock()

	conn, err := fn()

	f.mu.Lock()
	defer f.mu.Unlock()
	f.dialing = false
	// remotedialer numbers a session's connections in the order of its dials, so the largest
	// ID written during this dial is this dial's. A smaller one is the Connect of an earlier
	// dial that timed out, written late: remotedialer had closed that connection already.
	var id int64
	for _, d := range f.dialed {
		id = max(id, d)
	}
	for _, d := range f.dialed {
		if d != id || err != nil {
			delete(f.conns, d)
		}
	}
	if err != nil {
		return nil, err
	}
	e := f.conns[id]
	if e == nil {
		// Never seen on the wire: the dial cannot be accounted for, so it is not used.
		_ = conn.Close()
		return nil, errors.New("the tunnel's connection was not seen on the wire")
	}
	if e.drop {
		_ = conn.Close()
		e.released = true
		f.buffered -= e.buffered
		delete(f.conns, id)
		return nil, errSessionFull
	}
	e.conn = conn
	return &boundedConn{Conn: conn, flow: f, entry: e}, nil
}

// connect records a Connect message the hub writes, before the agent can see it.
func (f *flow) connect(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dialing {
		// A late Connect of a dial that gave up: remotedialer closed that connection.
		return
	}
	f.dialed = append(f.dialed, id)
	if f.conns[id] == nil {
		f.conns[id] = &flowEntry{id: id}
	}
}

// closed records an Error message for connection id, from either side: remotedialer closes
// the connection and buffers nothing more for it.
func (f *flow) closed(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.conns[id]; e != nil {
		e.closed = true
	}
}

// errSessionFull fails a connection dropped for its session's bound.
var errSessionFull = errors.New("the agent's session holds as many unread bytes as it may (--tunnel-session-buffer-bytes): this connection was dropped")

// received counts n bytes the agent sent for connection id, before remotedialer sees them.
// Past the connection's bound the agent ignored Pause: the session ends. Past the session's
// bound the connection is dropped.
func (f *flow) received(id int64, n int) error {
	f.mu.Lock()
	e := f.conns[id]
	if e == nil || e.closed {
		// remotedialer drops them (answering with an Error).
		f.mu.Unlock()
		return nil
	}
	e.buffered += int64(n)
	f.buffered += int64(n)
	if e.buffered > f.limits.ConnectionBuffer {
		f.mu.Unlock()
		return &violation{reason: ViolationConnectionBuffer, err: fmt.Errorf("the agent sent more than %d bytes on one connection that the hub had not read (remotedialer asks it to pause at 2 MiB)", f.limits.ConnectionBuffer)}
	}
	if f.buffered <= f.limits.SessionBuffer || e.drop {
		f.mu.Unlock()
		return nil
	}
	e.drop = true
	conn, dropped := e.conn, f.dropped
	f.mu.Unlock()
	if conn != nil {
		// Not here: remotedialer may be buffering this very message, holding the lock that
		// closing the connection takes. Until remotedialer removed it, its bytes still count,
		// and the connection's own bound still holds.
		go func() { _ = conn.Close() }()
	}
	if dropped != nil {
		dropped()
	}
	return nil
}

// read counts n bytes the proxy read from e.
func (f *flow) read(e *flowEntry, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.released {
		return
	}
	// Never below zero: what was read was counted when received.
	n64 := min(int64(n), e.buffered)
	e.buffered -= n64
	f.buffered -= n64
}

// release forgets e, closed by the proxy: remotedialer dropped the connection and its buffer.
func (f *flow) release(e *flowEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.released {
		return
	}
	e.released = true
	f.buffered -= e.buffered
	e.buffered = 0
	delete(f.conns, e.id)
}

// connections is the number of connections accounted (tests).
func (f *flow) connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// isDropped says whether the session's bound dropped e.
func (f *flow) isDropped(e *flowEntry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return e.drop
}

// boundedConn is a connection through the session whose reads count against its buffer.
type boundedConn struct {
	net.Conn
	flow  *flow
	entry *flowEntry
	once  sync.Once
}

func (c *boundedConn) Read(b []byte) (int, error) {
	// A dropped connection fails at once: its close runs in a goroutine (received), and
	// until then remotedialer still hands out what it had buffered, so that a reader could
	// read a dropped connection's whole answer.
	if c.flow.isDropped(c.entry) {
		return 0, errSessionFull
	}
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.flow.read(c.entry, n)
	}
	return n, err
}

func (c *boundedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.flow.release(c.entry) })
	return err
}

// agentMessages is the guard's view of what the agent sends.
type agentMessages struct{ flow *flow }

func (a agentMessages) header(msgType, connID int64) error {
	switch msgType {
	case msgData, msgPause, msgResume, msgSyncConnections:
		return nil
	case msgError:
		a.flow.closed(connID)
		return nil
	}
	// Connect (remotedialer refuses it too, ending the session), the peering messages, and
	// anything else.
	return &violation{reason: ViolationMessageType, err: fmt.Errorf("the agent sent a message of type %s, which agents never send", msgTypeName(msgType))}
}

func (a agentMessages) body(connID int64, n int) error { return a.flow.received(connID, n) }

// hubMessages is the guard's view of what the hub sends.
type hubMessages struct{ flow *flow }

func (h hubMessages) header(msgType, connID int64) error {
	switch msgType {
	case msgConnect:
		h.flow.connect(connID)
	case msgError:
		h.flow.closed(connID)
	}
	return nil
}

func (hubMessages) body(int64, int) error { return nil }

// guardedConn is the hijacked connection of a session as remotedialer's WebSocket reads and
// writes it: reads pass the guard before remotedialer sees them; writes are followed for the
// connections the hub opens.
type guardedConn struct {
	net.Conn
	// ahead is the HTTP server's reader of the connection, as long as it holds bytes read
	// ahead of the upgrade; then reads go to the connection itself. The server's reader
	// holds its connection's state (buffers, the last request and its ResponseWriter), which
	// the session should not keep.
	ahead *bufio.Reader
	flow  *flow
	in    frameParser
	out   frameParser

	// The HTTP response to the upgrade comes before the frames the hub writes.
	handshakeDone bool
	handshakeTail []byte
}

// guard wraps a hijacked connection and its reader; the returned ReadWriter is the one to
// hand to the WebSocket upgrader.
func guard(conn net.Conn, rw *bufio.ReadWriter, f *flow) (*guardedConn, *bufio.ReadWriter) {
	g := &guardedConn{Conn: conn, ahead: rw.Reader, flow: f}
	// The agents' lists of their connections (SyncConnections, every minute) are ignored: the
	// hub closes every connection of the session missing from one, also one it opened a moment
	// before that the agent had not yet seen ("sync from client", rancher/remotedialer#150), a
	// request failed for nothing, some in every reconnect storm. On a WebSocket, which loses
	// no message, an agent's connection ends with the Error it sends, or with the session.
	g.in = frameParser{masked: true, maxMessage: MaxMessage, handler: agentMessages{flow: f}, ignoreSync: true}
	g.out = frameParser{handler: hubMessages{flow: f}}
	// gorilla reads frames through a hijacked reader of more than 256 bytes, else through one
	// of 4 KiB of its own; either way it reads g. The reader lives as long as the session, and
	// 512 bytes hold any frame header and control frame: 3.5 KiB less per idle session (35 MiB
	// at 10,000), and a data frame's payload larger than the buffer is read straight into
	// remotedialer's buffer. The writer only hands gorilla its buffer, which this gorilla
	// never reuses (it allocates its own), so it is the smallest there is.
	return g, bufio.NewReadWriter(bufio.NewReaderSize(g, sessionReadBuffer), bufio.NewWriterSize(g, 16))
}

// sessionReadBuffer is the size of the buffer gorilla reads a session's frames through.
const sessionReadBuffer = 512

// agentSilence bounds the read deadlines remotedialer sets on a session: it allows 60 s from
// each of the agent's pings (every 5 s), which keeps the session of an agent whose node was
// lost, and serves the mount's requests through it, for a minute after the agent came back
// on another replica. 20 s is four pings.
const agentSilence = 20 * time.Second

// SetReadDeadline keeps a deadline within agentSilence of now; no deadline stays none.
func (g *guardedConn) SetReadDeadline(t time.Time) error {
	if limit := time.Now().Add(agentSilence); !t.IsZero() && t.After(limit) {
		t = limit
	}
	return g.Conn.SetReadDeadline(t)
}

func (g *guardedConn) Read(p []byte) (int, error) {
	if v := g.flow.failed(); v != nil {
		return 0, v
	}
	var n int
	var err error
	if g.ahead != nil && g.ahead.Buffered() > 0 {
		n, err = g.ahead.Read(p)
	} else {
		g.ahead = nil
		n, err = g.Conn.Read(p)
	}
	if n > 0 {
		if perr := g.in.feed(p[:n]); perr != nil {
			return 0, g.stop(perr)
		}
	}
	return n, err
}

func (g *guardedConn) Write(p []byte) (int, error) {
	if v := g.flow.failed(); v != nil {
		return 0, v
	}
	// Before the bytes leave: the agent may answer a Connect at once.
	frames := p
	if !g.handshakeDone {
		frames = g.skipHandshake(p)
	}
	if len(frames) > 0 {
		if perr := g.out.feed(frames); perr != nil {
			return 0, g.stop(fmt.Errorf("following the hub's own frames: %w", perr))
		}
	}
	return g.Conn.Write(p)
}

// skipHandshake returns what of p follows the end of the HTTP response's header.
func (g *guardedConn) skipHandshake(p []byte) []byte {
	end := []byte("\r\n\r\n")
	joined := append(g.handshakeTail, p...)
	i := bytes.Index(joined, end)
	if i < 0 {
		g.handshakeTail = append(g.handshakeTail[:0], joined[max(0, len(joined)-3):]...)
		return nil
	}
	g.handshakeDone, g.handshakeTail = true, nil
	return p[i+len(end)-(len(joined)-len(p)):]
}

// stop ends the session for err: the WebSocket fails on its next read or write, and closing
// the connection makes remotedialer's writes fail at once rather than wait for an agent that
// may not read.
func (g *guardedConn) stop(err error) error {
	var v *violation
	if !errors.As(err, &v) {
		v = &violation{reason: ViolationFraming, err: err}
	}
	v = g.flow.fail(v)
	_ = g.Conn.Close()
	return v
}
