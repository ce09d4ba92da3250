package tunnel

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// rdMessage is a remotedialer message as its client writes it: id, connection, type, a
// deadline for Data and Connect, the body.
func rdMessage(connID, msgType int64, body []byte) []byte {
	b := binary.AppendVarint(nil, rand.Int64())
	b = binary.AppendVarint(b, connID)
	b = binary.AppendVarint(b, msgType)
	if msgType == msgData || msgType == msgConnect {
		b = binary.AppendVarint(b, 15000)
	}
	return append(b, body...)
}

type seen struct {
	headers []string
	bodies  map[int64]int
}

func (s *seen) header(msgType, connID int64) error {
	s.headers = append(s.headers, fmt.Sprintf("%s/%d", msgTypeName(msgType), connID))
	return nil
}

func (s *seen) body(connID int64, n int) error {
	s.bodies[connID] += n
	return nil
}

// clientFrames returns the bytes a gorilla WebSocket client sends after the handshake when
// write runs with it: real masked frames.
func clientFrames(t testing.TB, write func(*websocket.Conn)) []byte {
	t.Helper()
	got := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		fmt.Fprintf(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
		data, _ := io.ReadAll(rw.Reader)
		got <- data
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	write(ws)
	ws.UnderlyingConn().Close()
	return <-got
}

// TestFrameParserFollowsGorilla: the parser finds every message's header and the length of
// every Data body in what gorilla's client really sends (masked, fragmented messages, control
// frames between fragments), however the bytes are split across reads.
func TestFrameParserFollowsGorilla(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 100_000)
	stream := clientFrames(t, func(ws *websocket.Conn) {
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(ws.WriteMessage(websocket.BinaryMessage, rdMessage(7, msgData, []byte("hello"))))
		must(ws.WriteMessage(websocket.BinaryMessage, rdMessage(-3, msgPause, nil)))
		// One message in many frames (gorilla flushes a frame per full write buffer), with a
		// ping between two of them.
		w, err := ws.NextWriter(websocket.BinaryMessage)
		must(err)
		msg := rdMessage(1<<40, msgData, big)
		_, err = w.Write(msg[:5000])
		must(err)
		must(ws.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(time.Second)))
		_, err = w.Write(msg[5000:])
		must(err)
		must(w.Close())
		must(ws.WriteMessage(websocket.BinaryMessage, rdMessage(7, msgError, []byte("EOF"))))
		must(ws.WriteMessage(websocket.BinaryMessage, rdMessage(0, msgSyncConnections, make([]byte, 16))))
		must(ws.WriteMessage(websocket.BinaryMessage, rdMessage(9, msgData, nil)))
	})
	want := []string{"Data/7", "Pause/-3", "Data/1099511627776", "Error/7", "SyncConnections/0", "Data/9"}
	for _, split := range []int{1, 2, 3, 7, 100, 4096, len(stream)} {
		s := &seen{bodies: map[int64]int{}}
		p := frameParser{masked: true, maxMessage: MaxMessage, handler: s}
		rest := stream
		for len(rest) > 0 {
			n := min(len(rest), 1+rand.IntN(split))
			if err := p.feed(rest[:n]); err != nil {
				t.Fatalf("split %d: %v", split, err)
			}
			rest = rest[n:]
		}
		if fmt.Sprint(s.headers) != fmt.Sprint(want) {
			t.Errorf("split %d: headers %v, want %v", split, s.headers, want)
		}
		if s.bodies[7] != 5 || s.bodies[1<<40] != len(big) || s.bodies[9] != 0 {
			t.Errorf("split %d: body bytes %v", split, s.bodies)
		}
	}
}

// TestFrameParserFollowsGorillaServer: the hub's own frames (unmasked), as gorilla's server
// writes them after the HTTP response.
func TestFrameParserFollowsGorillaServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, req, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		_ = ws.WriteMessage(websocket.BinaryMessage, rdMessage(2, msgConnect, []byte("tcp/target:443")))
		_ = ws.WriteMessage(websocket.BinaryMessage, rdMessage(2, msgData, bytes.Repeat([]byte("y"), 70_000)))
		_ = ws.WriteMessage(websocket.BinaryMessage, rdMessage(2, msgError, []byte("EOF")))
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	stream, _ := io.ReadAll(bufio.NewReader(conn))

	s := &seen{bodies: map[int64]int{}}
	g := &guardedConn{out: frameParser{handler: s}}
	for len(stream) > 0 {
		n := min(len(stream), 1+rand.IntN(50))
		frames := stream[:n]
		if !g.handshakeDone {
			frames = g.skipHandshake(frames)
		}
		if err := g.out.feed(frames); err != nil {
			t.Fatal(err)
		}
		stream = stream[n:]
	}
	if fmt.Sprint(s.headers) != "[Connect/2 Data/2 Error/2]" || s.bodies[2] != 70_000 {
		t.Fatalf("headers %v, body %v", s.headers, s.bodies)
	}
}

// TestFrameParserIgnoresSync: with ignoreSync, every SyncConnections message leaves the
// parser as a message of type 0 whatever the split of the stream, and no other byte changes.
func TestFrameParserIgnoresSync(t *testing.T) {
	ids := binary.LittleEndian.AppendUint64(nil, 3)
	stream := clientFrames(t, func(ws *websocket.Conn) {
		for _, m := range [][]byte{
			rdMessage(0, msgSyncConnections, ids),
			rdMessage(8, msgData, []byte{0x10, 0x10}),
			rdMessage(0, msgSyncConnections, nil),
			rdMessage(16, msgError, []byte("EOF")),
		} {
			if err := ws.WriteMessage(websocket.BinaryMessage, m); err != nil {
				t.Fatal(err)
			}
		}
	})
	for _, split := range []int{1, 2, 5, 100, len(stream)} {
		p := frameParser{masked: true, maxMessage: MaxMessage, handler: &seen{bodies: map[int64]int{}}, ignoreSync: true}
		out := bytes.Clone(stream)
		for rest := out; len(rest) > 0; {
			n := min(len(rest), 1+rand.IntN(split))
			if err := p.feed(rest[:n]); err != nil {
				t.Fatalf("split %d: %v", split, err)
			}
			rest = rest[n:]
		}
		// The rewritten stream parsed again: the Syncs are messages of type 0, and no other
		// byte changed.
		s := &seen{bodies: map[int64]int{}}
		if err := (&frameParser{masked: true, maxMessage: MaxMessage, handler: s}).feed(out); err != nil {
			t.Fatalf("split %d: the rewritten stream: %v", split, err)
		}
		if fmt.Sprint(s.headers) != "[0/0 Data/8 0/0 Error/16]" || s.bodies[8] != 2 {
			t.Errorf("split %d: headers %v, bodies %v", split, s.headers, s.bodies)
		}
		changed := 0
		for i := range out {
			if out[i] != stream[i] {
				changed++
			}
		}
		if changed != 2 {
			t.Errorf("split %d: %d bytes changed, want the 2 types", split, changed)
		}
	}
}

// TestFrameParserRefuses: what no remotedialer client sends ends the parse.
func TestFrameParserRefuses(t *testing.T) {
	for name, write := range map[string]func(*websocket.Conn) error{
		"text": func(ws *websocket.Conn) error { return ws.WriteMessage(websocket.TextMessage, []byte("hi")) },
		"too large": func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.BinaryMessage, rdMessage(1, msgData, make([]byte, MaxMessage)))
		},
		"empty":        func(ws *websocket.Conn) error { return ws.WriteMessage(websocket.BinaryMessage, nil) },
		"short header": func(ws *websocket.Conn) error { return ws.WriteMessage(websocket.BinaryMessage, []byte{2, 4}) },
		"varint length": func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.BinaryMessage, bytes.Repeat([]byte{0xff}, 50))
		},
	} {
		t.Run(name, func(t *testing.T) {
			stream := clientFrames(t, func(ws *websocket.Conn) {
				if err := write(ws); err != nil {
					t.Fatal(err)
				}
			})
			p := frameParser{masked: true, maxMessage: MaxMessage, handler: &seen{bodies: map[int64]int{}}}
			if err := p.feed(stream); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	// Unmasked frames from a client.
	p := frameParser{masked: true, handler: &seen{bodies: map[int64]int{}}}
	if err := p.feed([]byte{0x82, 0x01, 0x00}); err == nil {
		t.Fatal("an unmasked client frame was accepted")
	}
}

// BenchmarkGuardReadPath: what the guard spends on an agent's stream of 32 KiB Data messages
// (remotedialer's client writes what one read of the target returned): the frame parser and
// the accounting of the bytes per connection, per byte of the stream.
func BenchmarkGuardReadPath(b *testing.B) {
	body := make([]byte, 32<<10)
	stream := clientFrames(b, func(ws *websocket.Conn) {
		for range 64 {
			if err := ws.WriteMessage(websocket.BinaryMessage, rdMessage(2, msgData, body)); err != nil {
				b.Fatal(err)
			}
		}
	})
	f := newFlow(Limits{ConnectionBuffer: 1 << 62, SessionBuffer: 1 << 62})
	f.conns[2] = &flowEntry{id: 2}
	p := frameParser{masked: true, maxMessage: MaxMessage, handler: agentMessages{flow: f}}
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		// As gorilla reads: 4 KiB at a time.
		for rest := stream; len(rest) > 0; {
			n := min(len(rest), 4096)
			if err := p.feed(rest[:n]); err != nil {
				b.Fatal(err)
			}
			rest = rest[n:]
		}
	}
}
