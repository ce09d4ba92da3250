package fanout

import (
	"fmt"
	"io"
)

// maxIndexDepth is how deep value records members: an item's members (1), its metadata's (2)
// and its labels' (3); a watch event's object (1), its metadata (2), that metadata's (3).
const maxIndexDepth = 3

// member is a member of an object within a value read by scanner.value, at depth at most
// maxIndexDepth. Offsets are into the value.
type jsonMember struct {
	// depth 1 is a member of the value itself; parent is the index of the member whose
	// object holds this one (-1 at depth 1).
	depth, parent int32
	// keyStart and keyEnd span the quoted key, start and end the value.
	keyStart, keyEnd, start, end int32
	// escaped: the key holds escapes (compare it decoded).
	escaped bool
}

// Phases of an open container.
const (
	phaseFirst    = iota // after { or [: a key (object), a value (array), or the end
	phaseKey             // after , in an object: a key
	phaseColon           // after a key: :
	phaseValue           // after : or , in an array: a value
	phaseAfter           // after a value: , or the end
	phaseTopValue        // the value itself, not begun
	phaseTopDone         // the value itself, complete
)

type frame struct {
	object bool
	phase  uint8
	// owner is the member whose value this container is (-1: none recorded); pending the
	// member whose value comes next.
	owner, pending int32
}

// Number states.
const (
	numMinus = iota + 1 // after -
	numZero             // 0
	numInt              // 1-9 digits
	numDot              // after .
	numFrac             // fraction digits
	numE                // after e
	numESign            // after e+ or e-
	numExp              // exponent digits
)

// vstate is where the validation of a value stands between two reads.
type vstate struct {
	stack []frame
	// inString: within a string, since strStart; isKey: the string is a key (member key).
	inString, isKey, escaped bool
	strStart                 int32
	// hex counts the hex digits of a \u escape still to come.
	hex int
	// num is the number state (0: not in a number); lit the literal being matched and at.
	num   int
	lit   string
	litAt int
	// primOwner is the member whose primitive value is being read.
	primOwner int32
	primStart int32
}

var errJSON = fmt.Errorf("%w: invalid JSON", errMalformed)

// value reads one complete JSON value after whitespace, validating it as it goes (the grammar
// of RFC 8259, as encoding/json does; nesting at most maxDepth), into the scanner's buffer;
// valid until the next call. With index set, it records the value's members (members).
func (s *scanner) value() ([]byte, error) {
	if _, err := s.peek(); err != nil {
		return nil, unexpectedEOF(err)
	}
	buf := s.buf[:0]
	s.members = s.members[:0]
	st := &s.vs
	st.stack = append(st.stack[:0], frame{phase: phaseTopValue, owner: -1, pending: -1})
	st.inString, st.escaped, st.hex, st.num, st.lit = false, false, 0, 0, ""
	for {
		chunk, err := s.r.Peek(max(s.r.Buffered(), 1))
		if len(chunk) == 0 {
			if err == io.EOF {
				// A number may end the stream.
				if st.num != 0 && len(st.stack) == 1 {
					if !numberComplete(st.num) {
						return nil, errJSON
					}
					s.buf = buf
					return buf, nil
				}
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		n, done, err := s.step(chunk, int32(len(buf)))
		if err != nil {
			return nil, err
		}
		if len(buf)+n > s.max {
			return nil, errTooLarge
		}
		buf = append(buf, chunk[:n]...)
		_, _ = s.r.Discard(n)
		if done {
			s.buf = buf
			return buf, nil
		}
	}
}

// step validates chunk, the bytes of the value from offset base on; it returns how many bytes
// belong to the value and whether it is complete.
func (s *scanner) step(chunk []byte, base int32) (int, bool, error) {
	st := &s.vs
	i := 0
	for i < len(chunk) {
		c := chunk[i]
		top := &st.stack[len(st.stack)-1]
		switch {
		case st.inString:
			if st.hex > 0 {
				if !isHex(c) {
					return 0, false, errJSON
				}
				st.hex--
				i++
				continue
			}
			if st.escaped {
				switch c {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				case 'u':
					st.hex = 4
				default:
					return 0, false, errJSON
				}
				st.escaped = false
				if st.isKey {
					s.markEscaped()
				}
				i++
				continue
			}
			// Skip the plain run of the string.
			j := i
			for j < len(chunk) {
				b := chunk[j]
				if b == '"' || b == '\\' || b < 0x20 {
					break
				}
				j++
			}
			i = j
			if i == len(chunk) {
				continue
			}
			switch chunk[i] {
			case '\\':
				st.escaped = true
				i++
			case '"':
				st.inString = false
				i++
				end := base + int32(i)
				if st.isKey {
					s.keyEnd(end)
				} else if len(st.stack) == 1 {
					top.phase = phaseTopDone
					return i, true, nil
				} else {
					s.valueEnd(top, st.primOwner, end)
				}
			default:
				return 0, false, errJSON // a control character
			}
			continue
		case st.num != 0:
			if next, ok := numberStep(st.num, c); ok {
				st.num = next
				i++
				continue
			}
			if !numberComplete(st.num) {
				return 0, false, errJSON
			}
			st.num = 0
			end := base + int32(i)
			if len(st.stack) == 1 {
				top.phase = phaseTopDone
				return i, true, nil
			}
			s.valueEnd(top, st.primOwner, end)
			continue // c is the next token
		case st.lit != "":
			if c != st.lit[st.litAt] {
				return 0, false, errJSON
			}
			i++
			if st.litAt++; st.litAt == len(st.lit) {
				st.lit = ""
				end := base + int32(i)
				if len(st.stack) == 1 {
					top.phase = phaseTopDone
					return i, true, nil
				}
				s.valueEnd(top, st.primOwner, end)
			}
			continue
		}
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			i++
			continue
		}
		at := base + int32(i)
		switch top.phase {
		case phaseTopValue, phaseValue:
			if err := s.beginValue(c, at, top); err != nil {
				return 0, false, err
			}
			i++
			if c == '-' || c >= '0' && c <= '9' || c == '"' || c == 't' || c == 'f' || c == 'n' {
				continue
			}
			continue
		case phaseFirst:
			if top.object {
				switch c {
				case '}':
					i++
					if s.closeContainer(at + 1) {
						return i, true, nil
					}
				case '"':
					s.beginKey(at)
					i++
				default:
					return 0, false, errJSON
				}
				continue
			}
			if c == ']' {
				i++
				if s.closeContainer(at + 1) {
					return i, true, nil
				}
				continue
			}
			if err := s.beginValue(c, at, top); err != nil {
				return 0, false, err
			}
			i++
		case phaseKey:
			if c != '"' {
				return 0, false, errJSON
			}
			s.beginKey(at)
			i++
		case phaseColon:
			if c != ':' {
				return 0, false, errJSON
			}
			top.phase = phaseValue
			i++
		case phaseAfter:
			switch {
			case c == ',':
				if top.object {
					top.phase = phaseKey
				} else {
					top.phase = phaseValue
				}
				i++
			case c == '}' && top.object, c == ']' && !top.object:
				i++
				if s.closeContainer(at + 1) {
					return i, true, nil
				}
			default:
				return 0, false, errJSON
			}
		default:
			return 0, false, errJSON
		}
	}
	return i, false, nil
}

// beginValue starts the value c begins at offset at, in container top (phase value).
func (s *scanner) beginValue(c byte, at int32, top *frame) error {
	st := &s.vs
	owner := top.pending
	top.pending = -1
	if owner >= 0 {
		s.members[owner].start = at
	}
	switch {
	case c == '{' || c == '[':
		if len(st.stack) > maxDepth {
			return fmt.Errorf("%w: nested deeper than %d", errMalformed, maxDepth)
		}
		top.phase = phaseAfter
		st.stack = append(st.stack, frame{object: c == '{', phase: phaseFirst, owner: owner, pending: -1})
		return nil
	case c == '"':
		st.inString, st.isKey = true, false
	case c == '-':
		st.num = numMinus
	case c == '0':
		st.num = numZero
	case c >= '1' && c <= '9':
		st.num = numInt
	case c == 't':
		st.lit, st.litAt = "true", 1
	case c == 'f':
		st.lit, st.litAt = "false", 1
	case c == 'n':
		st.lit, st.litAt = "null", 1
	default:
		return errJSON
	}
	st.primOwner, st.primStart = owner, at
	if top.phase != phaseTopValue {
		top.phase = phaseAfter
	}
	return nil
}

// beginKey starts a key at offset at of the innermost object, recording a member when the
// object is shallow enough.
func (s *scanner) beginKey(at int32) {
	st := &s.vs
	st.inString, st.isKey = true, true
	top := &st.stack[len(st.stack)-1]
	top.phase = phaseColon
	top.pending = -1
	depth := int32(len(st.stack) - 1)
	if !s.index || depth > maxIndexDepth {
		return
	}
	top.pending = int32(len(s.members))
	s.members = append(s.members, jsonMember{depth: depth, parent: top.owner, keyStart: at, start: -1, end: -1})
}

func (s *scanner) markEscaped() {
	if top := &s.vs.stack[len(s.vs.stack)-1]; top.pending >= 0 {
		s.members[top.pending].escaped = true
	}
}

func (s *scanner) keyEnd(end int32) {
	s.vs.inString = false
	if top := &s.vs.stack[len(s.vs.stack)-1]; top.pending >= 0 {
		s.members[top.pending].keyEnd = end
	}
}

// valueEnd ends a primitive value of owner at end.
func (s *scanner) valueEnd(top *frame, owner int32, end int32) {
	if owner >= 0 {
		s.members[owner].end = end
	}
	top.phase = phaseAfter
}

// closeContainer closes the innermost container at end; true when that ends the value.
func (s *scanner) closeContainer(end int32) bool {
	st := &s.vs
	closed := st.stack[len(st.stack)-1]
	st.stack = st.stack[:len(st.stack)-1]
	if closed.owner >= 0 {
		s.members[closed.owner].end = end
	}
	if len(st.stack) == 1 {
		st.stack[0].phase = phaseTopDone
		return true
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// numberStep is the number grammar of RFC 8259: the state after c, or false if c ends it.
func numberStep(state int, c byte) (int, bool) {
	digit := c >= '0' && c <= '9'
	switch state {
	case numMinus:
		switch {
		case c == '0':
			return numZero, true
		case digit:
			return numInt, true
		}
		return 0, false
	case numZero, numInt:
		switch {
		case digit && state == numInt:
			return numInt, true
		case c == '.':
			return numDot, true
		case c == 'e' || c == 'E':
			return numE, true
		}
		return 0, false
	case numDot, numFrac:
		switch {
		case digit:
			return numFrac, true
		case (c == 'e' || c == 'E') && state == numFrac:
			return numE, true
		}
		return 0, false
	case numE:
		switch {
		case c == '+' || c == '-':
			return numESign, true
		case digit:
			return numExp, true
		}
		return 0, false
	case numESign, numExp:
		if digit {
			return numExp, true
		}
	}
	return 0, false
}

func numberComplete(state int) bool {
	return state == numZero || state == numInt || state == numFrac || state == numExp
}
