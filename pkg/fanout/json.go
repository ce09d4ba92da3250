package fanout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// MaxValueBytes bounds one JSON value of a member's answer held in memory: one list item or
// Table row, one watch event, or a list's members before its items. etcd holds objects of at
// most 1.5 MiB by default; 16 MiB leaves room for Tables with whole objects and large CRs.
const MaxValueBytes = 16 << 20

// maxDepth bounds the nesting of a member's JSON, as the Kubernetes JSON decoder does (and Go's
// encoding/json, which validates items here); nothing here recurses.
const maxDepth = 10000

var (
	// errTooLarge: a value of a member's answer is larger than MaxValueBytes.
	errTooLarge = fmt.Errorf("a JSON value of the answer is larger than %d bytes", MaxValueBytes)
	// errMalformed: the member's answer is not the JSON it should be.
	errMalformed = errors.New("malformed JSON")
)

// scanner reads the raw JSON values of a member's answer one at a time, so that a list of any
// size is held one item at a time.
type scanner struct {
	r   *bufio.Reader
	max int
	// buf is reused for the values read; a value is valid until the next call.
	buf []byte
	// index makes value record the value's members (members), for the editor.
	index   bool
	members []jsonMember
	vs      vstate
}

// indexed reads a value and its members.
func (s *scanner) indexed() ([]byte, []jsonMember, error) {
	s.index = true
	v, err := s.value()
	s.index = false
	return v, s.members, err
}

func newScanner(r io.Reader) *scanner {
	return &scanner{r: bufio.NewReaderSize(r, 64<<10), max: MaxValueBytes}
}

// peek skips whitespace and returns the next byte without consuming it; io.EOF at the end.
func (s *scanner) peek() (byte, error) {
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c, s.r.UnreadByte()
	}
}

// expect consumes c after whitespace.
func (s *scanner) expect(c byte) error {
	got, err := s.peek()
	if err != nil {
		return unexpectedEOF(err)
	}
	if got != c {
		return fmt.Errorf("%w: expected %q, found %q", errMalformed, c, got)
	}
	_, _ = s.r.ReadByte()
	return nil
}

// next consumes the separator after a member of an object or an array: true after a comma,
// false at the closing byte.
func (s *scanner) next(closing byte) (bool, error) {
	c, err := s.peek()
	if err != nil {
		return false, unexpectedEOF(err)
	}
	_, _ = s.r.ReadByte()
	switch c {
	case ',':
		return true, nil
	case closing:
		return false, nil
	}
	return false, fmt.Errorf("%w: expected ',' or %q, found %q", errMalformed, closing, c)
}

// empty consumes closing if it comes next (an empty object or array).
func (s *scanner) empty(closing byte) (bool, error) {
	c, err := s.peek()
	if err != nil {
		return false, unexpectedEOF(err)
	}
	if c == closing {
		_, _ = s.r.ReadByte()
		return true, nil
	}
	return false, nil
}

// key reads an object's key and its colon.
func (s *scanner) key() (string, error) {
	v, err := s.value()
	if err != nil {
		return "", err
	}
	if len(v) == 0 || v[0] != '"' {
		return "", fmt.Errorf("%w: an object key is no string", errMalformed)
	}
	k, ok := unquote(v)
	if !ok {
		return "", fmt.Errorf("%w: an object key does not parse", errMalformed)
	}
	return k, s.expect(':')
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// unquote decodes a JSON string (valid or not: ok says).
func unquote(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		for _, c := range inner {
			if c < 0x20 {
				return "", false
			}
		}
		return string(inner), true
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

// field is one member of a JSON object: its key and where its value lies.
type field struct {
	// key is decoded; for a key without escapes it shares the object's bytes (read it while
	// the object is there, keep no copy of it).
	key string
	// keyStart is where the member's quoted key begins, start and end where its value lies.
	keyStart, start, end int
	// idx is the member's index in the scanner's members, -1 when found by scanning.
	idx int32
}

// keyOf decodes the quoted key raw; a key without escapes is not copied.
func keyOf(raw []byte) (string, bool) {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return unsafe.String(unsafe.SliceData(inner), len(inner)), true
	}
	return unquote(raw)
}

// indexedFields are the members of depth d whose parent is p in idx, with offsets made
// relative to base.
func indexedFields(v []byte, idx []jsonMember, d, p int32, base int, into []field) []field {
	into = into[:0]
	for i := range idx {
		m := &idx[i]
		if m.depth != d || m.parent != p {
			continue
		}
		k, _ := keyOf(v[m.keyStart:m.keyEnd])
		into = append(into, field{key: k, keyStart: int(m.keyStart) - base, start: int(m.start) - base, end: int(m.end) - base, idx: int32(i)})
	}
	return into
}

// fields returns the members of the JSON object obj, which must be valid JSON. Keys are
// decoded (escapes included), so that a key spelled with escapes is the key it means.
func objectFields(obj []byte, into []field) ([]field, error) {
	into = into[:0]
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, fmt.Errorf("%w: not an object", errMalformed)
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return into, nil
	}
	for i < len(obj) {
		kStart := i
		kEnd := skipValue(obj, i)
		if kEnd-kStart < 2 || obj[kStart] != '"' {
			return nil, fmt.Errorf("%w: an object key is no string", errMalformed)
		}
		key, ok := keyOf(obj[kStart:kEnd])
		if !ok {
			return nil, fmt.Errorf("%w: an object key does not parse", errMalformed)
		}
		i = skipSpace(obj, kEnd)
		if i >= len(obj) || obj[i] != ':' {
			return nil, fmt.Errorf("%w: expected ':'", errMalformed)
		}
		i = skipSpace(obj, i+1)
		vEnd := skipValue(obj, i)
		into = append(into, field{key: key, keyStart: kStart, start: i, end: vEnd, idx: -1})
		i = skipSpace(obj, vEnd)
		if i >= len(obj) {
			break
		}
		if obj[i] == '}' {
			return into, nil
		}
		if obj[i] != ',' {
			return nil, fmt.Errorf("%w: expected ','", errMalformed)
		}
		i = skipSpace(obj, i+1)
	}
	return nil, fmt.Errorf("%w: unterminated object", errMalformed)
}

// elements returns where the elements of the JSON array arr (valid JSON) lie.
func elements(arr []byte, into [][2]int) ([][2]int, error) {
	into = into[:0]
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return nil, fmt.Errorf("%w: not an array", errMalformed)
	}
	i = skipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return into, nil
	}
	for i < len(arr) {
		end := skipValue(arr, i)
		into = append(into, [2]int{i, end})
		i = skipSpace(arr, end)
		if i >= len(arr) {
			break
		}
		if arr[i] == ']' {
			return into, nil
		}
		if arr[i] != ',' {
			return nil, fmt.Errorf("%w: expected ','", errMalformed)
		}
		i = skipSpace(arr, i+1)
	}
	return nil, fmt.Errorf("%w: unterminated array", errMalformed)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns the end of the value that starts at b[i]; b is valid JSON.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return len(b)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				for j++; j < len(b) && b[j] != '"'; j++ {
					if b[j] == '\\' {
						j++
					}
				}
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	for j := i; j < len(b); j++ {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
	}
	return len(b)
}

// appendQuoted appends s as a JSON string.
func appendQuoted(dst []byte, s string) []byte {
	simple := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			simple = false
			break
		}
	}
	if simple {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	q, _ := json.Marshal(s)
	return append(dst, q...)
}

// stringValue decodes a JSON string value; ok is false for anything else.
func stringValue(v []byte) (string, bool) {
	return unquote(v)
}

// intValue decodes a JSON integer value.
func intValue(v []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}
