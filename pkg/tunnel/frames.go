package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// The message types of remotedialer's wire protocol (its message.go): a varint each.
const (
	msgData            int64 = 1
	msgConnect         int64 = 2
	msgError           int64 = 3
	msgAddClient       int64 = 4
	msgRemoveClient    int64 = 5
	msgPause           int64 = 6
	msgResume          int64 = 7
	msgSyncConnections int64 = 8
)

// syncTypeByte is SyncConnections' type as remotedialer writes it: the zigzag varint of 8.
const syncTypeByte = 0x10

// msgTypeName names a message type in errors and logs.
func msgTypeName(t int64) string {
	switch t {
	case msgData:
		return "Data"
	case msgConnect:
		return "Connect"
	case msgError:
		return "Error"
	case msgAddClient:
		return "AddClient"
	case msgRemoveClient:
		return "RemoveClient"
	case msgPause:
		return "Pause"
	case msgResume:
		return "Resume"
	case msgSyncConnections:
		return "SyncConnections"
	}
	return strconv.FormatInt(t, 10)
}

// messageHandler learns what a frameParser sees. An error stops the parser for good.
type messageHandler interface {
	// header is called once a message's remotedialer header (id, connection, type) is known,
	// before any byte of its body.
	header(msgType, connID int64) error
	// body is called for every n bytes of a Data message's body (what remotedialer buffers),
	// as they pass.
	body(connID int64, n int) error
}

// Errors of the WebSocket framing, which no client of remotedialer sends.
var errFraming = errors.New("broken WebSocket framing")

// frameParser follows the WebSocket frames (RFC 6455 section 5.2) of one direction of a
// connection as its bytes pass, and the remotedialer header at the start of each message,
// without keeping the bytes: it tells a messageHandler, and bounds the size of a message as
// gorilla's SetReadLimit would (remotedialer reads with gorilla's defaults, no limit). It
// changes one byte only, the type of a message it is told to ignore (ignoreSync).
type frameParser struct {
	// masked: frames of this direction are masked (client to server) and must be.
	masked bool
	// maxMessage bounds a message's payload; 0 does not.
	maxMessage int64
	handler    messageHandler
	// ignoreSync makes every SyncConnections message one of type 0, which remotedialer reads
	// and ignores (its serveMessage has no case for it), by rewriting the type in place. See
	// agentMessages for why the hub ignores them.
	ignoreSync bool

	// The frame header being read (at most 14 bytes), then the frame's payload.
	head      [14]byte
	headN     int
	inPayload bool
	remain    uint64 // payload bytes of the frame still to come
	mask      [4]byte
	maskPos   uint64
	control   bool
	fin       bool

	// The data message the frames belong to.
	inMessage bool
	size      uint64
	rd        [4 * binary.MaxVarintLen64]byte // its remotedialer header, unmasked
	rdN       int
	rdDone    bool
	msgType   int64
	connID    int64
}

// feed parses p, the next bytes of the stream.
func (f *frameParser) feed(p []byte) error {
	for len(p) > 0 {
		if !f.inPayload {
			n, err := f.readHead(p)
			if err != nil {
				return err
			}
			p = p[n:]
			continue
		}
		n := len(p)
		if uint64(n) > f.remain {
			n = int(f.remain)
		}
		if !f.control {
			if err := f.payload(p[:n]); err != nil {
				return err
			}
		}
		f.remain -= uint64(n)
		f.maskPos += uint64(n)
		p = p[n:]
		if f.remain == 0 {
			if err := f.frameEnd(); err != nil {
				return err
			}
		}
	}
	return nil
}

// headLen is the length of the frame header that starts with b0 b1.
func (f *frameParser) headLen() int {
	n := 2
	switch f.head[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if f.head[1]&0x80 != 0 {
		n += 4
	}
	return n
}

// readHead takes the bytes of a frame header from p; it returns how many it took.
func (f *frameParser) readHead(p []byte) (int, error) {
	taken := 0
	for {
		want := 2
		if f.headN >= 2 {
			want = f.headLen()
		}
		if f.headN == want {
			return taken, f.startFrame()
		}
		if len(p) == 0 {
			return taken, nil
		}
		n := copy(f.head[f.headN:want], p)
		f.headN += n
		taken += n
		p = p[n:]
	}
}

// startFrame checks the frame header read and starts its payload.
func (f *frameParser) startFrame() error {
	b0, b1 := f.head[0], f.head[1]
	f.headN = 0
	f.fin = b0&0x80 != 0
	if b0&0x70 != 0 {
		return fmt.Errorf("%w: reserved bits set (no extension is negotiated)", errFraming)
	}
	if masked := b1&0x80 != 0; masked != f.masked {
		return fmt.Errorf("%w: mask bit %v", errFraming, masked)
	}
	var length uint64
	rest := f.head[2:]
	switch l := b1 & 0x7f; l {
	case 126:
		length = uint64(binary.BigEndian.Uint16(rest))
		rest = rest[2:]
	case 127:
		length = binary.BigEndian.Uint64(rest)
		rest = rest[8:]
		if length>>63 != 0 {
			return fmt.Errorf("%w: frame length with its top bit set", errFraming)
		}
	default:
		length = uint64(l)
	}
	if f.masked {
		copy(f.mask[:], rest[:4])
	}
	switch opcode := b0 & 0x0f; opcode {
	case 0x8, 0x9, 0xa: // close, ping, pong
		if !f.fin || length > 125 {
			return fmt.Errorf("%w: control frame fragmented or longer than 125 bytes", errFraming)
		}
		f.control = true
	case 0x2: // binary: a new message
		if f.inMessage {
			return fmt.Errorf("%w: a message starts inside another", errFraming)
		}
		f.control = false
		f.inMessage, f.size, f.rdN, f.rdDone = true, 0, 0, false
	case 0x0: // continuation
		if !f.inMessage {
			return fmt.Errorf("%w: continuation frame outside a message", errFraming)
		}
		f.control = false
	case 0x1:
		return &violation{reason: ViolationMessageType, err: errors.New("the agent sent a text message; remotedialer speaks binary messages only")}
	default:
		return fmt.Errorf("%w: opcode %#x", errFraming, opcode)
	}
	if !f.control {
		f.size += length
		if f.maxMessage > 0 && f.size > uint64(f.maxMessage) {
			return &violation{reason: ViolationMessageSize, err: fmt.Errorf("the agent sent a message of more than %d bytes", f.maxMessage)}
		}
	}
	f.remain, f.maskPos, f.inPayload = length, 0, true
	if length == 0 {
		return f.frameEnd()
	}
	return nil
}

// payload takes p, payload bytes of a data frame.
func (f *frameParser) payload(p []byte) error {
	i := 0
	for !f.rdDone && i < len(p) {
		b := p[i]
		if f.masked {
			b ^= f.mask[(f.maskPos+uint64(i))%4]
		}
		f.rd[f.rdN] = b
		f.rdN++
		i++
		done, err := f.parseHeader()
		if err != nil {
			return err
		}
		if done {
			f.rdDone = true
			if err := f.handler.header(f.msgType, f.connID); err != nil {
				return err
			}
			if f.ignoreSync && f.msgType == msgSyncConnections && b == syncTypeByte {
				// The header's last byte is the type's only byte, in p: XOR with the
				// unmasked byte leaves the masked 0 (zigzag 0 is 0x00). Types written
				// in more bytes than needed pass as they are; remotedialer writes one.
				p[i-1] ^= syncTypeByte
			}
		}
	}
	if i < len(p) && f.msgType == msgData {
		return f.handler.body(f.connID, len(p)-i)
	}
	return nil
}

// parseHeader parses the remotedialer header read so far: id, connection and type, and for
// Data and Connect a fourth varint (a deadline nobody reads). It says whether it is complete.
func (f *frameParser) parseHeader() (bool, error) {
	var fields [4]int64
	pos := 0
	for i := range 4 {
		if i == 3 && fields[2] != msgData && fields[2] != msgConnect {
			break
		}
		v, n := binary.Varint(f.rd[pos:f.rdN])
		if n == 0 {
			if f.rdN == len(f.rd) {
				return false, errors.New("remotedialer header too long")
			}
			return false, nil
		}
		if n < 0 {
			return false, errors.New("remotedialer header: varint overflows 64 bits")
		}
		fields[i] = v
		pos += n
	}
	f.connID, f.msgType = fields[1], fields[2]
	return true, nil
}

// frameEnd ends the current frame, and with a final data frame its message.
func (f *frameParser) frameEnd() error {
	f.inPayload = false
	if f.control || !f.fin {
		return nil
	}
	f.inMessage = false
	if !f.rdDone {
		return errors.New("message shorter than its remotedialer header")
	}
	return nil
}
