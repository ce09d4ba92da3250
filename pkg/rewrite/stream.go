package rewrite

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// maxValue bounds one JSON value held in memory while a response streams: one list item, one
// watch event, or the members of a list before its items.
const maxValue = 64 << 20

// maxDocument bounds a discovery or OpenAPI document, which is read whole: kube-apiserver's
// /openapi/v2 is some 4 MiB without CRDs and grows by each CRD's schema (kubectl and clients
// read /openapi/v3's per-group documents instead, a fraction of it); a cluster with a thousand
// CRDs of typical size stays below this. Each one held is also taken from the Budget.
const maxDocument = 64 << 20

// ErrTooLarge is wrapped by the errors about a value or document larger than the rewriter
// holds.
var ErrTooLarge = errors.New("too large to rewrite")

// scanner reads raw JSON values from a stream.
type scanner struct {
	r   *bufio.Reader
	max int
	// With index, value records where each container of the value ends (walker.match), so
	// that the rewriter does not scan the value once more to find out.
	index bool
	match []int32
	open  []int32
}

// peek skips whitespace and returns the next byte without consuming it.
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

// expect consumes byte c after whitespace.
func (s *scanner) expect(c byte) error {
	got, err := s.peek()
	if err != nil {
		return unexpectedEOF(err)
	}
	if got != c {
		return fmt.Errorf("malformed JSON: expected %q, found %q", c, got)
	}
	_, _ = s.r.ReadByte()
	return nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// value reads one complete JSON value after whitespace, appended to buf; outer is how deep
// the value is nested in the response. It checks nesting (at most MaxDepth in all) and
// strings, not the grammar of literals; rewriting validates what it parses.
func (s *scanner) value(buf []byte, outer int) ([]byte, error) {
	c, err := s.peek()
	if err != nil {
		return buf, unexpectedEOF(err)
	}
	start := len(buf)
	switch c {
	case '{', '[', '"':
		// Scan what the reader has buffered in bulk: nesting and strings only.
		depth := 0
		inString, escaped := false, false
		s.match, s.open = s.match[:0], s.open[:0]
		for {
			if _, err := s.r.Peek(1); err != nil {
				return buf, unexpectedEOF(err)
			}
			chunk, _ := s.r.Peek(s.r.Buffered())
			base := len(buf) - start
			if s.index && base+len(chunk) > maxIndexed {
				s.index, s.match = false, s.match[:0] // walked without an index
				defer func() { s.index = true }()
			}
			if s.index {
				s.match = slices.Grow(s.match, len(chunk))[:base+len(chunk)]
			}
			end := -1
			for i := 0; i < len(chunk); i++ {
				c := chunk[i]
				if inString {
					if escaped {
						escaped = false
						continue
					}
					// Skip to the next quote or backslash.
					j := bytes.IndexByte(chunk[i:], '"')
					if j < 0 {
						j = len(chunk) - i
					}
					if b := bytes.IndexByte(chunk[i:i+j], '\\'); b >= 0 {
						i += b
						escaped = true
						continue
					}
					i += j
					if i == len(chunk) {
						break
					}
					inString = false
					if depth == 0 {
						end = i + 1
					}
				} else {
					switch c {
					case '"':
						inString = true
					case '{', '[':
						depth++
						if depth+outer > MaxDepth {
							return buf, fmt.Errorf("%w (at byte %d of a value)", ErrTooDeep, base+i)
						}
						if s.index {
							s.open = append(s.open, int32(base+i))
						}
					case '}', ']':
						depth--
						if n := len(s.open); s.index && n > 0 {
							s.match[s.open[n-1]] = int32(base + i)
							s.open = s.open[:n-1]
						}
						if depth == 0 {
							end = i + 1
						}
					}
				}
				if end >= 0 {
					break
				}
			}
			if end < 0 {
				end = len(chunk)
			}
			buf = append(buf, chunk[:end]...)
			_, _ = s.r.Discard(end)
			if s.index {
				s.match = s.match[:base+end]
			}
			if len(buf)-start > s.max {
				return buf, s.tooLarge()
			}
			if (depth == 0 && !inString) || (end < len(chunk)) {
				return buf, nil
			}
		}
	case ',', ':', '}', ']':
		return buf, fmt.Errorf("malformed JSON: unexpected %q", c)
	default:
		for {
			c, err := s.r.ReadByte()
			if err == io.EOF && len(buf) > start {
				return buf, nil
			}
			if err != nil {
				return buf, unexpectedEOF(err)
			}
			switch c {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return buf, s.r.UnreadByte()
			}
			buf = append(buf, c)
			if len(buf)-start > s.max {
				return buf, s.tooLarge()
			}
		}
	}
}

func (s *scanner) tooLarge() error {
	return fmt.Errorf("%w: a value of more than %d bytes", ErrTooLarge, s.max)
}

// response returns the streaming rewriter of a response of this request.
func (q Request) response(in io.Reader) io.Reader {
	switch q.Class {
	case Discovery, OpenAPI:
		return &documentReader{q: q, in: in, lease: lease{b: q.budget, ctx: q.ctx}}
	}
	return &streamReader{q: q, s: &scanner{r: bufio.NewReaderSize(in, 64<<10), max: maxValue, index: true}, watch: q.Watch}
}

// streamReader rewrites a JSON response as it is read: a watch stream event by event, an
// object whole, and Lists and Tables item by item (their other members whole).
type streamReader struct {
	q     Request
	s     *scanner
	watch bool

	out   []byte // rewritten bytes not read yet
	off   int
	err   error
	state int  // 0 start, 1 members, 2 array elements, 3 after the object
	first bool // no element of the array read yet
	// emitted is true once an element of the array is written.
	emitted bool
	// head holds the members before items or rows while they are read, so that kind and
	// apiVersion are rewritten together.
	head      []byte
	headDone  bool
	tail      []byte // members after items or rows
	headCount int
	arrayKey  string
	itemHint  typeHint
	buf       []byte
	sc        scratch
}

func (s *streamReader) Read(p []byte) (int, error) {
	for s.off == len(s.out) || (s.err == nil && len(s.out)-s.off < len(p) && s.ready()) {
		if s.off == len(s.out) && s.err != nil {
			return 0, s.err
		}
		// What is left of the last piece moves to the front: out stays about len(p) long.
		s.out, s.off = s.out[:copy(s.out, s.out[s.off:])], 0
		s.err = s.step()
	}
	n := copy(p, s.out[s.off:])
	s.off += n
	if s.off == len(s.out) && s.err != nil && s.err != io.EOF {
		// With the last bytes before it, so that a reader learns of the failure at once.
		return n, s.err
	}
	return n, nil
}

// ready reports whether the next piece can likely be made without waiting for the target, so
// that one Read fills p with many items (the proxy flushes after every write: one small write
// per item costs more than rewriting it), yet nothing already rewritten waits for the network.
// A watch event is taken only when a whole frame (kube-apiserver ends each with a newline) is
// buffered.
func (s *streamReader) ready() bool {
	next, _ := s.s.r.Peek(s.s.r.Buffered())
	// The newline that ended the last frame is no next piece.
	next = bytes.TrimLeft(next, " \t\r\n")
	if len(next) == 0 {
		return false
	}
	return !s.watch || bytes.IndexByte(next, '\n') >= 0
}

// step appends the next piece of output to s.out.
func (s *streamReader) step() error {
	r := s.q.rules
	if s.watch {
		c, err := s.s.peek()
		if err != nil {
			return err // io.EOF ends the stream cleanly
		}
		if c != '{' {
			return fmt.Errorf("malformed watch stream: expected an event object, found %q", c)
		}
		v, err := s.s.value(s.buf[:0], 0)
		s.buf = v
		if err != nil {
			return err
		}
		if s.q.crds() && r.hiddenCRD(v) {
			return nil
		}
		s.sc.match, s.sc.matched = s.s.match, len(s.s.match) == len(v)
		nv, err := r.objectWith(toPresented, v, s.q.hint(), &s.sc)
		s.sc.matched = false
		if err != nil {
			return fmt.Errorf("watch event: %w", err)
		}
		s.out = append(append(s.out, nv...), '\n')
		return nil
	}
	switch s.state {
	case 0:
		c, err := s.s.peek()
		if err != nil {
			return err
		}
		if c != '{' {
			// Not an object: nothing of ours to rename.
			s.state = 3
			return nil
		}
		_, _ = s.s.r.ReadByte()
		s.head = append(s.head[:0], '{')
		s.state = 1
		return nil
	case 1:
		c, err := s.s.peek()
		if err != nil {
			return unexpectedEOF(err)
		}
		if c == '}' {
			_, _ = s.s.r.ReadByte()
			s.state = 3
			if !s.headDone {
				s.head = append(s.head, '}')
				nv, err := r.object(toPresented, s.head, s.q.hint())
				if err != nil {
					return err
				}
				s.out = append(s.out, nv...)
				return nil
			}
			if len(s.tail) > 0 {
				tail, err := r.listTail(toPresented, s.tail, s.head)
				if err != nil {
					return err
				}
				s.out = append(append(s.out, ','), tail...)
			}
			s.out = append(s.out, '}')
			return nil
		}
		comma := false
		if c == ',' {
			_, _ = s.s.r.ReadByte()
			comma = true
		}
		key, err := s.s.value(s.buf[:0], 1)
		s.buf = key
		if err != nil {
			return err
		}
		if len(key) == 0 || key[0] != '"' {
			return fmt.Errorf("malformed JSON: expected a member name")
		}
		if err := s.s.expect(':'); err != nil {
			return err
		}
		name := gjson.ParseBytes(key).Str
		next, err := s.s.peek()
		if err != nil {
			return unexpectedEOF(err)
		}
		if (name == "items" || name == "rows") && next == '[' {
			_, _ = s.s.r.ReadByte()
			if !s.headDone {
				s.headDone = true
				headObj := append(s.head, '}')
				nv, err := r.object(toPresented, headObj, typeHint{})
				if err != nil {
					return err
				}
				nv = bytes.TrimRight(nv, " \t\r\n")
				s.out = append(s.out, nv[:len(nv)-1]...) // without its closing brace
				if s.headCount > 0 {
					s.out = append(s.out, ',')
				}
				h := gjson.ParseBytes(headObj)
				if name == "items" {
					kind := h.Get("kind").String()
					if len(kind) > 4 && kind[len(kind)-4:] == "List" {
						s.itemHint = typeHint{apiVersion: h.Get("apiVersion").String(), kind: kind[:len(kind)-4]}
					}
					if s.itemHint.kind == "" || s.q.Class == Objects {
						if hh := s.q.hint(); hh.kind != "" {
							s.itemHint = hh
						}
					}
				}
			} else if comma {
				s.out = append(s.out, ',')
			}
			s.out = append(s.out, key...)
			s.out = append(s.out, ':', '[')
			s.arrayKey, s.first, s.emitted, s.state = name, true, false, 2
			return nil
		}
		if s.headDone {
			// Members after items (unstructured lists put kind there): kept until the end.
			if len(s.tail) > 0 {
				s.tail = append(s.tail, ',')
			}
			s.tail = append(s.tail, key...)
			s.tail = append(s.tail, ':')
			s.tail, err = s.s.value(s.tail, 1)
			if err == nil && len(s.tail) > maxValue {
				err = s.s.tooLarge()
			}
			return err
		}
		if s.headCount > 0 {
			s.head = append(s.head, ',')
		}
		s.headCount++
		s.head = append(s.head, key...)
		s.head = append(s.head, ':')
		s.head, err = s.s.value(s.head, 1)
		if err == nil && len(s.head) > maxValue {
			err = s.s.tooLarge()
		}
		return err
	case 2:
		c, err := s.s.peek()
		if err != nil {
			return unexpectedEOF(err)
		}
		if c == ']' {
			_, _ = s.s.r.ReadByte()
			s.out = append(s.out, ']')
			s.state = 1
			return nil
		}
		if !s.first {
			if err := s.s.expect(','); err != nil {
				return err
			}
		}
		s.first = false
		v, err := s.s.value(s.buf[:0], 2)
		s.buf = v
		if err != nil {
			return err
		}
		if s.q.crds() && r.hiddenCRD(v) {
			return nil
		}
		if s.emitted {
			s.out = append(s.out, ',')
		}
		s.emitted = true
		var nv []byte
		if s.arrayKey == "rows" {
			nv, err = r.row(v, s.q.hint())
		} else {
			s.sc.match, s.sc.matched = s.s.match, len(s.s.match) == len(v)
			nv, err = r.objectWith(toPresented, v, s.itemHint, &s.sc)
			s.sc.matched = false
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.arrayKey, err)
		}
		s.out = append(s.out, nv...)
		return nil
	}
	// After the object (or a body that is not an object): copy the rest.
	s.out = slices.Grow(s.out, 32<<10)
	n, err := s.s.r.Read(s.out[len(s.out):cap(s.out)])
	s.out = s.out[:len(s.out)+n]
	return err
}

// hiddenCRD reports whether a CRD (an object, a Table row, or a watch event of either) is of
// a target group that the mount does not present, because its name is a presented name: the
// presented group is the renamed one, and a second CRD of that name would be a duplicate.
func (r *Rules) hiddenCRD(v []byte) bool {
	doc := gjson.ParseBytes(v)
	if o := doc.Get("object"); o.IsObject() && doc.Get("type").Exists() {
		doc = o // a watch event
	}
	if doc.Get("kind").Str == "Table" {
		return false // a Table in a watch event: its rows stay
	}
	name := doc.Get("metadata.name").Str
	if o := doc.Get("object"); o.IsObject() {
		name = o.Get("metadata.name").Str // a Table row
	}
	group := doc.Get("spec.group").Str
	if group == "" {
		_, group, _ = strings.Cut(name, ".")
	}
	if group == "" {
		return false
	}
	rs, drop := r.presentedGroups(group)
	return drop && len(rs) == 0
}

// listTail rewrites the members of a list that follow its items (tail, without braces),
// taking apiVersion or kind from the members before them (head, an open object).
func (r *Rules) listTail(d direction, tail, head []byte) ([]byte, error) {
	obj := append(append([]byte{'{'}, tail...), '}')
	if err := CheckJSON(obj); err != nil {
		return nil, fmt.Errorf("the members after the list's items: %w", err)
	}
	h := gjson.ParseBytes(append(append([]byte(nil), head...), '}'))
	t := gjson.ParseBytes(obj)
	av, kind := t.Get("apiVersion"), t.Get("kind")
	apiVersion, k := av.String(), kind.String()
	if !av.Exists() {
		apiVersion = h.Get("apiVersion").String()
	}
	if !kind.Exists() {
		k = h.Get("kind").String()
	}
	e := &editor{data: obj}
	if na, nk, ok := r.gvk(d, apiVersion, k); ok {
		if av.Type == gjson.String {
			e.setString(av, na)
		}
		if kind.Type == gjson.String {
			e.setString(kind, nk)
		}
	}
	out, err := e.bytes()
	if err != nil {
		return nil, err
	}
	out = bytes.TrimSpace(out)
	return out[1 : len(out)-1], nil
}

// nesting follows the depth of JSON read a piece at a time (strings skipped), so that a
// document nested too deep is refused as soon as it is, rather than once it is read whole.
type nesting struct {
	depth             int
	inString, escaped bool
}

// scan reads the next piece; it reports false, and where, once the depth passes MaxDepth.
func (n *nesting) scan(b []byte) (int, bool) {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if n.inString {
			switch {
			case n.escaped:
				n.escaped = false
			case c == '\\':
				n.escaped = true
			case c == '"':
				n.inString = false
			}
			continue
		}
		switch c {
		case '"':
			n.inString = true
		case '{', '[':
			if n.depth++; n.depth > MaxDepth {
				return i, false
			}
		case '}', ']':
			n.depth--
		}
	}
	return 0, true
}

// row rewrites one Table row: its object, if the table includes objects.
func (r *Rules) row(v []byte, hint typeHint) ([]byte, error) {
	if !r.mentions(toPresented, v) {
		return v, nil
	}
	if err := CheckJSON(v); err != nil {
		return nil, err
	}
	e := &editor{data: v}
	r.rowEdits(toPresented, e, gjson.ParseBytes(v), hint)
	return e.bytes()
}

// documentReader reads a discovery or OpenAPI document whole, bounded by maxDocument and by
// the request's Budget, then returns it rewritten. It gives its share of the budget back once
// its answer is read to the end, or closed.
type documentReader struct {
	q     Request
	in    io.Reader
	lease lease
	out   io.Reader
	err   error
}

func (d *documentReader) Read(p []byte) (int, error) {
	if d.out == nil && d.err == nil {
		if d.out, d.err = d.load(); d.err != nil {
			d.lease.release()
		}
	}
	if d.err != nil {
		return 0, d.err
	}
	n, err := d.out.Read(p)
	if err != nil {
		d.lease.release()
	}
	return n, err
}

// Close gives back what the document holds of the budget.
func (d *documentReader) Close() error {
	d.lease.release()
	return nil
}

// load reads the document and returns its rewrite.
func (d *documentReader) load() (io.Reader, error) {
	data, err := d.readAll()
	if err != nil {
		return nil, err
	}
	if err := CheckJSON(data); err != nil {
		if isSyntaxError(err) {
			return bytes.NewReader(data), nil // not JSON (an error page): nothing of ours
		}
		return nil, fmt.Errorf("the document: %w", err)
	}
	if !d.q.streamsDocument() {
		// A discovery document is rewritten whole: its answer and the parts it is made of.
		if err := d.lease.grow(2 * int64(len(data))); err != nil {
			return nil, err
		}
	}
	return d.q.document(data, &d.lease)
}

// readAll reads the document in chunks, then joins them: each chunk, and the whole, is taken
// from the budget before it is allocated, and the chunks given back once joined. The document
// is held once, and twice while it is joined (a buffer that doubles as it is read would hold
// up to twice its size, and three times while it grows).
func (d *documentReader) readAll() ([]byte, error) {
	var chunks [][]byte
	var nest nesting
	total := 0
	for {
		if total > maxDocument {
			return nil, fmt.Errorf("%w: the document has more than the %d bytes a renaming mount rewrites", ErrTooLarge, maxDocument)
		}
		size := min(max(total, 64<<10), 4<<20, maxDocument+1-total)
		if err := d.lease.grow(int64(size)); err != nil {
			return nil, err
		}
		chunk := make([]byte, size)
		n, err := io.ReadFull(d.in, chunk)
		if n < size {
			// The rest of the chunk is not held.
			d.lease.shrink(int64(size - n))
			chunk = chunk[:n:n]
		}
		chunks = append(chunks, chunk)
		if at, ok := nest.scan(chunk); !ok {
			return nil, fmt.Errorf("the document: %w (at byte %d)", ErrTooDeep, total+at)
		}
		total += n
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	if err := d.lease.grow(int64(total)); err != nil {
		return nil, err
	}
	data := make([]byte, 0, total)
	for _, c := range chunks {
		data = append(data, c...)
	}
	d.lease.shrink(int64(total))
	return data, nil
}
