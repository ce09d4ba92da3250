package fanout

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// listMeta is what a member's list says about itself.
type listMeta struct {
	kind, apiVersion, contentType string
	table                         bool
	columns                       []byte
	columnNames                   []string
}

func (m *listMeta) from(l *listReader, contentType string) {
	m.kind, m.apiVersion, m.table, m.columns, m.columnNames, m.contentType = l.kind, l.apiVersion, l.table, l.columns, l.columnNames, contentType
}

// listQuery is what a list asks of every member.
type listQuery struct {
	limit int64
	// rv is the caller's resourceVersion: "", "0", or composite (positions).
	rv        string
	positions Positions
	rvMatch   string
}

func (f *fanout) parseListQuery() (listQuery, *memberError) {
	q := listQuery{rv: f.r.query.Get("resourceVersion"), rvMatch: f.r.query.Get("resourceVersionMatch")}
	limit, err := queryInt(f.r.query, "limit")
	if err != nil {
		return q, &memberError{code: http.StatusBadRequest, message: err.Error()}
	}
	q.limit = limit
	if q.rv != "" && q.rv != "0" {
		if q.positions, err = DecodePositions(q.rv); err != nil {
			return q, &memberError{code: http.StatusBadRequest, message: fmt.Sprintf(
				"resourceVersion %q is not one that mounts/*/proxy issued (a fan-out's resourceVersions name a position in every mount)", truncate(q.rv, 64))}
		}
	}
	return q, nil
}

// memberRV is the resourceVersion (and match) member m is asked for.
func (q listQuery) memberRV(m string) (string, string) {
	if q.positions == nil {
		return q.rv, q.rvMatch
	}
	if rv, ok := q.positions[m]; ok {
		return rv, q.rvMatch
	}
	return "", "" // a member the resourceVersion does not name starts from its current state
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// serveList serves a LIST across the members: pages when the caller asks for them (limit,
// unless resourceVersion is 0, which kube-apiserver serves whole from its cache too), else one
// stream.
func (f *fanout) serveList(w http.ResponseWriter) {
	q, bad := f.parseListQuery()
	if bad != nil {
		writeStatus(w, newStatus(int32(bad.code), reasonFor(bad.code), bad.message))
		return
	}
	if q.limit > 0 && q.rv != "0" || f.r.query.Get("continue") != "" {
		f.servePage(w, q)
		return
	}
	f.serveStream(w, q)
}

// chunkBytes is how many bytes of edited items a member hands over at once.
const chunkBytes = 32 << 10

// streamMember is one member of an unpaged list.
type streamMember struct {
	*member
	// ctx ends the member's request (cancel).
	ctx    context.Context
	cancel context.CancelFunc
	// q carries chunks of edited items, comma-separated; it is closed after the last.
	q     chan []byte
	ready sync.Once
	// Set before ready: the list's meta, or err.
	meta listMeta
	err  *memberError
	// rv, and late (a failure after the member was ready), are set before q is closed.
	rv   string
	late *memberError
	// excluded: the writer drops this member's items (it failed or answered another kind).
	excluded bool
	// state is the member's in the stream's progress (guarded by streamProgress.mu).
	state memberState
	// probing: the member found no slot and its probe is not done (guarded by
	// streamProgress.mu).
	probing bool
}

type memberState int

const (
	// waiting for one of the request's slots of member requests
	stateWaiting memberState = iota
	// running: holds a slot, has not answered enough yet
	stateRunning
	// readyHolding: has answered enough (its buffer is full, or it failed) and holds a slot
	stateReadyHolding
	// done: finished, failed or ready without holding a slot
	stateDone
)

// streamProgress decides when the answer of an unpaged list may start: once every member
// has answered enough (finished, failed, or filled what it may hold), or when the members
// holding the request's slots all wait for the client while others wait for a slot (the
// answer must start for any of them to go on), or at the deadline.
type streamProgress struct {
	mu                                 sync.Mutex
	slots                              int
	waiting, running, readyHolding, rd int
	// probing counts the members waiting for a slot whose probe is not done.
	probing int
	changed chan struct{}
	// begun is set once the answer's headers are about to be written.
	begun atomic.Bool
}

// setProbing marks sm as probing or not; it reports whether it changed.
func (p *streamProgress) setProbing(sm *streamMember, on bool) bool {
	p.mu.Lock()
	if sm.probing == on {
		p.mu.Unlock()
		return false
	}
	sm.probing = on
	if on {
		p.probing++
	} else {
		p.probing--
	}
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
	return true
}

func (p *streamProgress) move(sm *streamMember, to memberState) {
	p.mu.Lock()
	from := sm.state
	if from >= to && !(from == stateReadyHolding && to == stateDone) {
		p.mu.Unlock()
		return
	}
	sm.state = to
	for _, c := range []struct {
		s memberState
		d int
	}{{from, -1}, {to, 1}} {
		switch c.s {
		case stateWaiting:
			p.waiting += c.d
		case stateRunning:
			p.running += c.d
		case stateReadyHolding:
			p.readyHolding += c.d
		case stateDone:
			p.rd += c.d
		}
	}
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// mayStart says whether the answer may start.
func (p *streamProgress) mayStart() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting == 0 && p.running == 0 {
		return true
	}
	return p.running == 0 && p.waiting > 0 && p.readyHolding >= p.slots && p.probing == 0
}

// serveStream serves an unpaged list: every member at once, items merged as they arrive. The
// answer starts once every member has answered its first items, finished or failed, or the
// deadline passed (so that its Warnings name the members that failed). Meanwhile a member
// holds at most MaxBufferedBytes, and all of them at most MaxStreamBytes. A member that fails
// after the answer started ends it with an error rather than with its items missing, since a
// client that asked for everything must not get less without knowing.
func (f *fanout) serveStream(w http.ResponseWriter, q listQuery) {
	ctx := f.req.Context()
	timeout := f.server.memberTimeout()
	depth := max(f.server.maxBufferedBytes()/chunkBytes, 1)
	notify := make(chan *streamMember, len(f.members)*(depth+2))
	sms := make([]*streamMember, len(f.members))
	slots := f.server.maxConcurrency()
	sem := make(chan struct{}, slots)
	progress := &streamProgress{slots: slots, waiting: len(f.members), changed: make(chan struct{}, 1)}
	budget := semaphore.NewWeighted(int64(f.server.maxStreamBytes()))
	for i, m := range f.members {
		mctx, cancel := context.WithCancel(ctx)
		sms[i] = &streamMember{member: m, ctx: mctx, cancel: cancel, q: make(chan []byte, depth)}
	}
	probes := make(chan struct{}, slots)
	for _, sm := range sms {
		go func() {
			defer sm.cancel()
			held := false
			defer func() {
				if held {
					<-sem
				}
			}()
			select {
			case sem <- struct{}{}:
				held = true
			default:
				// Every slot is taken, and the answer may begin before this member has one:
				// its failure could then only end the answer with an error. Ask it for one
				// item first (a small answer, outside the slots), so that a member that is
				// down, silent or refuses the caller is left out and named in a Warning.
				if err := f.probeStreamMember(sm, q, progress, probes); err != nil {
					f.failWaiting(sm, err, progress, notify)
					return
				}
				select {
				case sem <- struct{}{}:
					held = true
				case <-sm.ctx.Done():
				}
			}
			f.streamMember(sm.ctx, sm, q, timeout, progress, budget, notify)
		}()
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !progress.mayStart() {
		select {
		case <-progress.changed:
		case <-deadline.C:
			// Members that hold a slot and have not answered enough are late; those still
			// waiting for a slot go on after the answer began.
			for _, sm := range sms {
				progress.mu.Lock()
				late := sm.state == stateRunning
				probing := sm.probing
				progress.mu.Unlock()
				if probing {
					sm.ready.Do(func() {
						sm.err = &memberError{code: http.StatusGatewayTimeout, message: fmt.Sprintf("no answer within %s", timeout)}
						sm.excluded = true
						sm.cancel()
						progress.move(sm, stateDone)
					})
					progress.setProbing(sm, false)
				}
				if late {
					sm.ready.Do(func() {
						sm.err = &memberError{code: http.StatusGatewayTimeout, message: fmt.Sprintf("no answer within %s", timeout)}
						sm.excluded = true
						sm.cancel()
						progress.move(sm, stateReadyHolding)
					})
				}
			}
		case <-ctx.Done():
			return
		}
	}
	// Who is in: the members that answered enough; those that failed are named. The others
	// go on after the answer began. If none answered yet, the first to answer starts it.
	failed := map[string]*memberError{}
	var chosen *streamMember
	started := map[*streamMember]bool{}
	for {
		progress.mu.Lock()
		all := progress.waiting == 0 && progress.running == 0
		progress.mu.Unlock()
		for _, sm := range sms {
			progress.mu.Lock()
			st := sm.state
			progress.mu.Unlock()
			if started[sm] || st < stateReadyHolding {
				continue
			}
			started[sm] = true
			if sm.err != nil {
				sm.excluded = true
				failed[sm.name] = sm.err
			} else if chosen == nil {
				chosen = sm
			}
		}
		if chosen != nil || all {
			break
		}
		select {
		case <-progress.changed:
		case <-ctx.Done():
			return
		}
	}
	if chosen == nil {
		allFailed(w, failed)
		return
	}
	warn(ctx, failed)

	progress.begun.Store(true)
	out := newListWriter(w, chosen.meta)
	open := len(sms)
	remaps := map[*streamMember][]int{}
	checked := map[*streamMember]bool{}
	var scratch []byte
	for open > 0 {
		var sm *streamMember
		select {
		case sm = <-notify:
		case <-ctx.Done():
			return
		}
		chunk, ok := <-sm.q
		if !ok {
			open--
			// A member that failed after the answer began (having answered enough before, or
			// not yet) cannot be named in a Warning any more: a client must not take what
			// follows for all there is.
			if err := cmp.Or(sm.late, sm.err); err != nil && !sm.excluded {
				f.logger().Info("A member of a fan-out list failed after the answer began; ending the answer with an error", "mount", sm.name, "err", err.message)
				panic(http.ErrAbortHandler)
			}
			continue
		}
		budget.Release(int64(len(chunk)))
		if !checked[sm] && !sm.excluded {
			checked[sm] = true
			// A member's meta is set before its first chunk.
			if sm.meta.kind != chosen.meta.kind || sm.meta.table != chosen.meta.table {
				if started[sm] {
					sm.excluded = true
					sm.cancel()
					warnLate(f, sm.name, fmt.Sprintf("it answered a %s, other mounts a %s", sm.meta.kind, chosen.meta.kind))
					continue
				}
				f.logger().Info("A member of a fan-out list answered another kind after the answer began; ending the answer with an error", "mount", sm.name)
				panic(http.ErrAbortHandler)
			}
			if chosen.meta.table {
				if r := remap(chosen.meta.columnNames, sm.meta.columnNames); r != nil {
					remaps[sm] = r
				}
			}
		}
		if sm.excluded {
			continue
		}
		if r, ok := remaps[sm]; ok {
			var err error
			if scratch, err = remapRows(scratch[:0], chunk, r); err != nil {
				panic(http.ErrAbortHandler)
			}
			chunk = scratch
		}
		if err := out.items(chunk); err != nil {
			return // the caller went away
		}
	}
	positions := Positions{}
	for _, sm := range sms {
		if !sm.excluded && sm.rv != "" {
			positions[sm.name] = sm.rv
		}
	}
	_ = out.end(EncodePositions(positions), "")
}

// probeStreamMember lists sm with limit 1 within the member deadline, at most slots probes of
// the request at once; sm counts as probing until it is done.
func (f *fanout) probeStreamMember(sm *streamMember, q listQuery, progress *streamProgress, probes chan struct{}) *memberError {
	progress.setProbing(sm, true)
	defer progress.setProbing(sm, false)
	select {
	case probes <- struct{}{}:
	case <-sm.ctx.Done():
		return &memberError{code: http.StatusServiceUnavailable, message: "cancelled"}
	}
	defer func() { <-probes }()
	if sm.ctx.Err() != nil {
		return &memberError{code: http.StatusServiceUnavailable, message: "cancelled"}
	}
	return f.fetchPage(sm.ctx, &cursor{name: sm.name, m: sm.member}, q, 1, 0, 1).err
}

// failWaiting ends a member that failed before it held a slot.
func (f *fanout) failWaiting(sm *streamMember, err *memberError, progress *streamProgress, notify chan<- *streamMember) {
	sm.ready.Do(func() {
		sm.err = err
		sm.excluded = true
	})
	progress.move(sm, stateDone)
	close(sm.q)
	notify <- sm
}

// warnLate logs what a Warning can no longer say: the answer's headers are written.
func warnLate(f *fanout, mount, message string) {
	f.logger().Info("A member of a fan-out list was left out after the answer began", "mount", mount, "reason", message)
}

// streamMember lists one member and hands its edited items over in chunks.
func (f *fanout) streamMember(ctx context.Context, sm *streamMember, q listQuery, timeout time.Duration, progress *streamProgress, budget *semaphore.Weighted, notify chan<- *streamMember) {
	progress.move(sm, stateRunning)
	// Only the time to the answer's start is bounded here: once the fan-out's answer has
	// begun, a member streams on under the request's own timeout.
	startCtx, cancelStart := context.WithCancel(ctx)
	timer := time.AfterFunc(timeout, cancelStart)
	defer cancelStart()
	var meta listMeta
	ready := func() {
		sm.ready.Do(func() { progress.move(sm, stateReadyHolding) })
	}
	defer progress.move(sm, stateDone)
	fail := func(err *memberError) {
		early := false
		sm.ready.Do(func() {
			sm.err, early = err, true
			progress.move(sm, stateReadyHolding)
		})
		if !early {
			sm.late = err
		}
		close(sm.q)
		notify <- sm
	}
	if ctx.Err() != nil {
		fail(&memberError{code: http.StatusServiceUnavailable, message: "cancelled"})
		return
	}
	query := f.memberQuery(sm.member)
	if rv, match := q.memberRV(sm.name); rv != "" {
		query.Set("resourceVersion", rv)
		if match != "" {
			query.Set("resourceVersionMatch", match)
		}
	}
	resp, err := f.send(startCtx, sm.member, f.r.path, query, f.accept)
	if err != nil {
		fail(failure(ctx, err, timeout))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fail(errorOf(resp))
		return
	}
	if !isJSON(resp.Header.Get("Content-Type")) {
		fail(&memberError{code: http.StatusBadGateway, message: fmt.Sprintf("it answered in %q, not JSON", resp.Header.Get("Content-Type"))})
		return
	}
	lr, err := newListReader(resp.Body)
	if err != nil {
		fail(failure(ctx, err, timeout))
		return
	}
	meta.from(lr, resp.Header.Get("Content-Type"))
	// Before the first chunk: a member that begins after the answer did hands its chunks to
	// the writer, which checks their kind, before it is ready.
	sm.meta = meta
	ed := &editor{mount: sm.name}
	var chunk []byte
	send := func() bool {
		n := int64(len(chunk))
		if !budget.TryAcquire(n) {
			// The request holds all it may: this member answered enough to let the answer
			// start, and waiting for the client does not count against its deadline.
			ready()
			timer.Stop()
			if budget.Acquire(ctx, n) != nil {
				return false
			}
		}
		select {
		case sm.q <- chunk:
		default:
			ready()
			timer.Stop()
			select {
			case sm.q <- chunk:
			case <-ctx.Done():
				budget.Release(n)
				return false
			}
		}
		notify <- sm
		if progress.begun.Load() {
			// The answer has begun and this member is answering: it streams on under the
			// request's own timeout, as the members that began before it.
			timer.Stop()
		}
		chunk = make([]byte, 0, chunkBytes+4096)
		return true
	}
	chunk = make([]byte, 0, chunkBytes+4096)
	for {
		item, idx, err := lr.next()
		if err != nil {
			if startCtx.Err() != nil && ctx.Err() == nil {
				err = context.DeadlineExceeded
			}
			fail(failure(ctx, err, timeout))
			return
		}
		if item == nil {
			break
		}
		if len(chunk) > 0 {
			chunk = append(chunk, ',')
		}
		if meta.table {
			chunk, err = ed.validRow(chunk, item, nil)
		} else {
			chunk, _, err = ed.item(chunk, item, idx, false)
		}
		if err != nil {
			fail(failure(ctx, err, timeout))
			return
		}
		if len(chunk) >= chunkBytes && !send() {
			fail(&memberError{code: http.StatusServiceUnavailable, message: "cancelled"})
			return
		}
	}
	sm.rv = lr.rv
	if len(chunk) > 0 && !send() {
		fail(&memberError{code: http.StatusServiceUnavailable, message: "cancelled"})
		return
	}
	ready()
	close(sm.q)
	notify <- sm
}

// remap returns, for each of want's columns, the index of the column of the same name in
// have; nil when they are the same.
func remap(want, have []string) []int {
	if slices.Equal(want, have) {
		return nil
	}
	r := make([]int, len(want))
	for i, name := range want {
		r[i] = slices.Index(have, name)
	}
	return r
}

// remapRows reorders the cells (after the mount's) of comma-separated edited rows.
func remapRows(dst, rows []byte, r []int) ([]byte, error) {
	arr := make([]byte, 0, len(rows)+2)
	arr = append(append(append(arr, '['), rows...), ']')
	els, err := elements(arr, nil)
	if err != nil {
		return dst, err
	}
	var e editor
	for i, el := range els {
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, err = e.remapRow(dst, arr[el[0]:el[1]], r); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// remapRow reorders an edited row's cells after the first (the mount's).
func (e *editor) remapRow(dst, row []byte, r []int) ([]byte, error) {
	fs, err := objectFields(row, nil)
	if err != nil {
		return dst, err
	}
	dst = append(dst, '{')
	for i, f := range fs {
		if i > 0 {
			dst = append(dst, ',')
		}
		if f.key != "cells" {
			dst = append(dst, row[f.keyStart:f.end]...)
			continue
		}
		cells := row[f.start:f.end]
		if e.elems, err = elements(cells, e.elems); err != nil || len(e.elems) == 0 {
			return dst, fmt.Errorf("%w: a row has no cells", errMalformed)
		}
		dst = append(dst, `"cells":[`...)
		dst = append(dst, cells[e.elems[0][0]:e.elems[0][1]]...)
		rest := e.elems[1:]
		for _, from := range r {
			dst = append(dst, ',')
			if from < 0 || from >= len(rest) {
				dst = append(dst, "null"...)
				continue
			}
			dst = append(dst, cells[rest[from][0]:rest[from][1]]...)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

// listWriter writes the merged list: its kind first, the items as they come, and its
// metadata last, when its composite resourceVersion and continue token are known (JSON
// decoders do not mind the order).
type listWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
	wrote   bool
	err     error
	buf     []byte
}

// tableMountColumn is the first column of a merged Table.
const tableMountColumn = `{"name":"Mount","type":"string","format":"","description":"The mount the object comes from.","priority":0}`

func newListWriter(w http.ResponseWriter, meta listMeta) *listWriter {
	ct := meta.contentType
	if ct == "" {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	l := &listWriter{w: w}
	l.flusher, _ = w.(http.Flusher)
	b := []byte(`{"kind":`)
	b = appendQuoted(b, meta.kind)
	b = append(b, `,"apiVersion":`...)
	b = appendQuoted(b, meta.apiVersion)
	if meta.table {
		b = append(b, `,"columnDefinitions":[`+tableMountColumn...)
		if cols, err := elements(meta.columns, nil); err == nil {
			for _, c := range cols {
				b = append(b, ',')
				b = append(b, meta.columns[c[0]:c[1]]...)
			}
		}
		b = append(b, `],"rows":[`...)
	} else {
		b = append(b, `,"items":[`...)
	}
	l.buf = b
	return l
}

// items writes comma-separated items.
func (l *listWriter) items(chunk []byte) error {
	if len(chunk) == 0 || l.err != nil {
		return l.err
	}
	if l.wrote {
		l.buf = append(l.buf, ',')
	}
	l.wrote = true
	l.buf = append(l.buf, chunk...)
	if len(l.buf) >= chunkBytes {
		_, l.err = l.w.Write(l.buf)
		l.buf = l.buf[:0]
	}
	return l.err
}

// end writes the metadata and ends the list.
func (l *listWriter) end(rv, cont string) error {
	l.buf = append(l.buf, `],"metadata":{"resourceVersion":`...)
	l.buf = appendQuoted(l.buf, rv)
	if cont != "" {
		l.buf = append(l.buf, `,"continue":`...)
		l.buf = appendQuoted(l.buf, cont)
	}
	l.buf = append(l.buf, "}}\n"...)
	if l.err == nil {
		_, l.err = l.w.Write(l.buf)
	}
	return l.err
}
