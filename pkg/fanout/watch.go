package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Watch timings.
const (
	// DefaultMinWatchTimeout is kube-apiserver's default --min-request-timeout: a watch
	// without timeoutSeconds lasts between it and twice it.
	DefaultMinWatchTimeout = 30 * time.Minute
	// bookmarkInterval spaces the BOOKMARKs a watch sends its client (besides the one that
	// ends the initial events).
	bookmarkInterval = 10 * time.Second
	// retryMin and retryMax bound the wait before a member's watch is tried again.
	retryMin = 250 * time.Millisecond
	retryMax = 5 * time.Second
)

// watchQuery is what a watch asks.
type watchQuery struct {
	rv          string
	positions   Positions
	sendInitial bool
	bookmarks   bool
	timeout     time.Duration
}

// event kinds a member hands the writer.
type eventKind int

const (
	evObject eventKind = iota
	evBookmark
	// evAdvance moves the member's position without telling the client (after a re-list).
	evAdvance
	evStarted
	evFailed
	// evExpired: the member cannot resume and cannot be re-listed: the watch ends with 410.
	evExpired
	// evLost: the member's initial events broke off; the end of the initial events is not
	// waited for from it.
	evLost
)

// wEvent is one thing a member hands the writer.
type wEvent struct {
	kind  eventKind
	m     *watchMember
	typ   string
	table bool
	// head and tail surround the object's resourceVersion (a JSON string the writer puts
	// in); for a Table, head ends at its metadata's resourceVersion and rows are its rows.
	head, tail, rows []byte
	columns          []byte
	columnNames      []string
	// rv is the member's position after the event.
	rv string
	// initial: an event of the member's initial events (sendInitialEvents), before its
	// initial-events-end bookmark; initialEnd: that bookmark.
	initial, initialEnd    bool
	objKind, objAPIVersion string
	err                    *memberError
	size                   int
}

// watchMember is one member of a watch.
type watchMember struct {
	*member
	index int
	// rv, initialSeen (its initial events have ended) and the kind of its objects are the
	// member goroutine's.
	rv                   string
	initialSeen, lost    bool
	objKind, objAPIGroup string
	budget               *budget
	// initialDone and columnNames (its Table's columns) are the writer's.
	initialDone bool
	columnNames []string
}

// budget bounds the bytes a member has handed the writer and it has not written yet.
type budget struct {
	mu   sync.Mutex
	used int
	max  int
	wake chan struct{}
}

func newBudget(max int) *budget { return &budget{max: max, wake: make(chan struct{}, 1)} }

// acquire waits until n more bytes fit (one value always fits alone).
func (b *budget) acquire(ctx context.Context, n int) bool {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		select {
		case <-b.wake:
		case <-ctx.Done():
			return false
		}
	}
}

func (b *budget) release(n int) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (f *fanout) parseWatchQuery() (watchQuery, *memberError) {
	q := watchQuery{rv: f.r.query.Get("resourceVersion")}
	if q.rv != "" && q.rv != "0" {
		var err error
		if q.positions, err = DecodePositions(q.rv); err != nil {
			return q, &memberError{code: http.StatusBadRequest, message: fmt.Sprintf(
				"resourceVersion %q is not one that mounts/*/proxy issued (a fan-out's resourceVersions name a position in every mount)", truncate(q.rv, 64))}
		}
	}
	q.sendInitial = f.r.query.Get("sendInitialEvents") == "true"
	q.bookmarks = f.r.query.Get("allowWatchBookmarks") == "true"
	if q.sendInitial && !q.bookmarks {
		return q, &memberError{code: http.StatusBadRequest, message: "sendInitialEvents requires allowWatchBookmarks=true"}
	}
	secs, err := queryInt(f.r.query, "timeoutSeconds")
	if err != nil {
		return q, &memberError{code: http.StatusBadRequest, message: err.Error()}
	}
	q.timeout = time.Duration(secs) * time.Second
	if q.timeout == 0 {
		min := f.server.MinWatchTimeout
		if min <= 0 {
			min = DefaultMinWatchTimeout
		}
		q.timeout = time.Duration(float64(min) * (1 + rand.Float64()))
	}
	return q, nil
}

// serveWatch merges the members' watches into one stream. Every event's object carries a
// composite resourceVersion (the position of every member after it), so that a client can
// resume from any event; BOOKMARKs carry it too. A member that fails is retried while the
// watch lasts and resumes where it stood; one that cannot resume (410) is listed again and its
// differences sent as ADDED, MODIFIED and DELETED events. The answer starts once every member
// has started its watch or failed, or the deadline passed; the members that failed by then
// are named in its Warnings and keep being retried.
func (f *fanout) serveWatch(w http.ResponseWriter) {
	q, bad := f.parseWatchQuery()
	if bad != nil {
		writeStatus(w, newStatus(int32(bad.code), reasonFor(bad.code), bad.message))
		return
	}
	ctx, cancel := context.WithCancel(f.req.Context())
	defer cancel()
	f.watchBudget = semaphore.NewWeighted(int64(f.server.maxStreamBytes()))
	events := make(chan *wEvent, 1024)
	wms := make([]*watchMember, len(f.members))
	rvs := make([]string, len(f.members))
	for i, m := range f.members {
		wm := &watchMember{member: m, index: i, budget: newBudget(f.server.maxBufferedBytes())}
		if q.positions != nil {
			wm.rv = q.positions[m.name]
		}
		wms[i], rvs[i] = wm, wm.rv
	}
	for _, wm := range wms {
		go f.watchMember(ctx, wm, q, events)
	}

	// Until every member started or failed, or the deadline: events are held meanwhile.
	failed := map[string]*memberError{}
	started := make([]bool, len(wms))
	var held []*wEvent
	pending := len(wms)
	deadline := time.NewTimer(f.server.memberTimeout())
	defer deadline.Stop()
	for pending > 0 {
		select {
		case ev := <-events:
			switch ev.kind {
			case evStarted:
				started[ev.m.index] = true
				pending--
			case evFailed:
				failed[ev.m.name] = ev.err
				pending--
			default:
				held = append(held, ev)
			}
			continue
		case <-deadline.C:
			for i, wm := range wms {
				if !started[i] && failed[wm.name] == nil {
					failed[wm.name] = &memberError{code: http.StatusGatewayTimeout, message: fmt.Sprintf("its watch did not start within %s; it is tried again while this watch lasts", f.server.memberTimeout())}
				}
			}
		case <-ctx.Done():
			return
		}
		break
	}
	live := 0
	for _, s := range started {
		if s {
			live++
		}
	}
	if live == 0 {
		allFailed(w, failed)
		return
	}
	warn(ctx, failed)
	ww := &watchWriter{f: f, w: w, q: q, wms: wms, started: started, rvs: rvs, lastBookmark: time.Now()}
	ww.flusher, _ = w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	ww.flush()
	for _, ev := range held {
		if !ww.handle(ev) {
			return
		}
	}
	timer := time.NewTimer(q.timeout)
	defer timer.Stop()
	for {
		select {
		case ev := <-events:
			if !ww.handle(ev) {
				return
			}
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// watchWriter writes the merged stream; it alone holds the members' positions.
type watchWriter struct {
	f       *fanout
	w       http.ResponseWriter
	flusher http.Flusher
	q       watchQuery
	wms     []*watchMember
	started []bool
	// rvs are the members' positions by index ("" unknown: not named in the composite).
	rvs []string
	// columns are the merged Table's, once its first event is written.
	columns      []byte
	columnNames  []string
	initialSent  bool
	lastBookmark time.Time
	objKind      string
	objAPI       string
	buf          []byte
	scratch      []byte
	failed       bool
}

func (ww *watchWriter) flush() {
	if ww.flusher != nil {
		ww.flusher.Flush()
	}
}

// composite is the composite resourceVersion of the members' positions.
func (ww *watchWriter) composite(dst []byte) []byte {
	names := make([]string, 0, len(ww.wms))
	rvs := make([]string, 0, len(ww.wms))
	for i, wm := range ww.wms {
		if ww.rvs[i] != "" {
			names = append(names, wm.name)
			rvs = append(rvs, ww.rvs[i])
		}
	}
	return appendComposite(dst, names, func(i int) string { return rvs[i] })
}

// handle writes one member's event; false ends the watch.
func (ww *watchWriter) handle(ev *wEvent) bool {
	defer func() {
		if ev.size > 0 {
			ev.m.budget.release(ev.size)
			ww.f.watchBudget.Release(int64(ev.size))
		}
	}()
	i := ev.m.index
	switch ev.kind {
	case evStarted:
		return true
	case evFailed:
		ww.f.logger().V(2).Info("A member of a fan-out watch failed", "mount", ev.m.name, "err", ev.err.message)
		return true
	case evExpired:
		ww.writeError(http.StatusGone, metav1.StatusReasonExpired, fmt.Sprintf(
			"mount %q cannot resume this watch from its resourceVersion, nor list what changed since: list again", ev.m.name))
		return false
	case evAdvance:
		ww.rvs[i] = ev.rv
		return true
	case evLost:
		ww.started[i] = false
		if ww.q.sendInitial && !ww.initialSent && ww.allInitialDone() && ww.objKind != "" {
			ww.initialSent = true
			return ww.bookmark(true)
		}
		return true
	case evBookmark:
		ww.rvs[i] = ev.rv
		if ev.objKind != "" {
			ww.objKind, ww.objAPI = ev.objKind, ev.objAPIVersion
		}
		if ev.initialEnd {
			ev.m.initialDone = true
			if ww.q.sendInitial && !ww.initialSent && ww.allInitialDone() {
				ww.initialSent = true
				return ww.bookmark(true)
			}
		}
		if ww.q.bookmarks && (!ww.q.sendInitial || ww.initialSent) && time.Since(ww.lastBookmark) >= bookmarkInterval {
			return ww.bookmark(false)
		}
		return true
	}
	ww.rvs[i] = ev.rv
	b := append(ww.buf[:0], `{"type":`...)
	b = appendQuoted(b, ev.typ)
	b = append(b, `,"object":`...)
	b = append(b, ev.head...)
	if ev.initial && !ww.initialSent {
		// Initial events keep the member's own resourceVersion: a client resumes from the
		// bookmark that ends them, and a composite on each would cost O(members) per object.
		b = appendQuoted(b, ev.rv)
	} else {
		b = append(b, '"')
		b = ww.composite(b)
		b = append(b, '"')
	}
	if ev.table {
		b = append(b, '}')
		if ev.columnNames != nil {
			ev.m.columnNames = ev.columnNames
		}
		if ww.columns == nil {
			ww.columns, ww.columnNames = ev.columns, ev.m.columnNames
			if ww.columns == nil {
				ww.columns = []byte("[]")
			}
			b = append(b, `,"columnDefinitions":[`+tableMountColumn...)
			if cols, err := elements(ww.columns, nil); err == nil {
				for _, c := range cols {
					b = append(b, ',')
					b = append(b, ww.columns[c[0]:c[1]]...)
				}
			}
			b = append(b, ']')
		}
		b = append(b, `,"rows":[`...)
		rows := ev.rows
		if rm := remap(ww.columnNames, ev.m.columnNames); rm != nil && ev.m.columnNames != nil {
			var err error
			if ww.scratch, err = remapRows(ww.scratch[:0], rows, rm); err == nil {
				rows = ww.scratch
			}
		}
		b = append(b, rows...)
		b = append(b, "]}"...)
	} else {
		b = append(b, ev.tail...)
	}
	b = append(b, "}\n"...)
	ww.buf = b
	if _, err := ww.w.Write(b); err != nil {
		return false
	}
	ww.flush()
	return true
}

func (ww *watchWriter) allInitialDone() bool {
	for i, wm := range ww.wms {
		if ww.started[i] && !wm.initialDone {
			return false
		}
	}
	return true
}

// bookmark writes a BOOKMARK with the composite resourceVersion; initialEnd marks the end of
// the initial events.
func (ww *watchWriter) bookmark(initialEnd bool) bool {
	ww.lastBookmark = time.Now()
	b := append(ww.buf[:0], `{"type":"BOOKMARK","object":{"kind":`...)
	b = appendQuoted(b, ww.objKind)
	b = append(b, `,"apiVersion":`...)
	b = appendQuoted(b, ww.objAPI)
	b = append(b, `,"metadata":{"resourceVersion":"`...)
	b = ww.composite(b)
	b = append(b, '"')
	if initialEnd {
		b = append(b, `,"annotations":{"`+metav1.InitialEventsAnnotationKey+`":"true"}`...)
	}
	b = append(b, "}}}\n"...)
	ww.buf = b
	if _, err := ww.w.Write(b); err != nil {
		return false
	}
	ww.flush()
	return true
}

// writeError writes an ERROR event.
func (ww *watchWriter) writeError(code int32, reason metav1.StatusReason, message string) {
	data, _ := json.Marshal(map[string]any{"type": "ERROR", "object": newStatus(code, reason, message)})
	_, _ = ww.w.Write(append(data, '\n'))
	ww.flush()
}

// watchMember runs one member's watch for as long as the fan-out's lasts: it starts it, reads
// it, resumes it where it stood when it ends or fails, and lists the member again when it
// cannot resume.
func (f *fanout) watchMember(ctx context.Context, wm *watchMember, q watchQuery, out chan<- *wEvent) {
	reported := false
	report := func(ev *wEvent) {
		if !reported {
			reported = true
			ev.m = wm
			f.emit(ctx, out, ev)
		}
	}
	backoff := retryMin
	ed := &editor{mount: wm.name, keep: true}
	for ctx.Err() == nil {
		resp, merr := f.startWatch(ctx, wm, q)
		if merr != nil {
			report(&wEvent{kind: evFailed, err: merr})
			if merr.code == http.StatusGone && wm.rv != "" {
				if !f.resync(ctx, wm, out, ed) {
					return
				}
				continue
			}
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, retryMax)
			continue
		}
		report(&wEvent{kind: evStarted})
		began := time.Now()
		expired, err := f.readWatch(ctx, wm, q, resp.Body, out, ed)
		resp.Body.Close()
		if ctx.Err() != nil {
			return
		}
		if q.sendInitial && !wm.initialSeen && !wm.lost {
			// Its initial events broke off: the others' end is not held up for it, and
			// its objects come as they come.
			wm.lost = true
			f.emit(ctx, out, &wEvent{kind: evLost, m: wm})
		}
		switch {
		case expired:
			if !f.resync(ctx, wm, out, ed) {
				return
			}
		case err != nil || time.Since(began) < time.Second:
			// A watch that breaks, or ends as soon as it began, is tried again later and
			// later, so that a member cannot make this a loop of requests.
			if err != nil {
				f.logger().V(2).Info("A member's watch of a fan-out broke off; resuming it", "mount", wm.name, "err", err)
			}
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, retryMax)
		default:
			backoff = retryMin
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// emit hands an event to the writer; false once the watch is over. Its bytes count against
// the member's budget and the request's until the writer wrote it.
func (f *fanout) emit(ctx context.Context, out chan<- *wEvent, ev *wEvent) bool {
	if ev.size > 0 {
		if !ev.m.budget.acquire(ctx, ev.size) {
			return false
		}
		if f.watchBudget.Acquire(ctx, int64(ev.size)) != nil {
			ev.m.budget.release(ev.size)
			return false
		}
	}
	select {
	case out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// startWatch starts a member's watch from its position; only the start has a deadline.
func (f *fanout) startWatch(ctx context.Context, wm *watchMember, q watchQuery) (*http.Response, *memberError) {
	query := f.memberQuery(wm.member)
	query.Set("watch", "true")
	query.Del("sendInitialEvents")
	query.Set("allowWatchBookmarks", "true")
	switch {
	case q.sendInitial && !wm.initialSeen:
		query.Set("sendInitialEvents", "true")
		query.Set("resourceVersionMatch", string(metav1.ResourceVersionMatchNotOlderThan))
		if wm.rv != "" {
			query.Set("resourceVersion", wm.rv)
		}
	case wm.rv != "":
		query.Set("resourceVersion", wm.rv)
	case q.positions == nil && q.rv == "0":
		query.Set("resourceVersion", "0")
	}
	timeout := f.server.memberTimeout()
	rctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(timeout, cancel)
	resp, err := f.send(rctx, wm.member, f.r.path, query, f.accept)
	if err != nil {
		cancel()
		if !timer.Stop() && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return nil, failure(ctx, err, timeout)
	}
	timer.Stop()
	if resp.StatusCode != http.StatusOK {
		cancel()
		return nil, errorOf(resp)
	}
	if !isJSON(resp.Header.Get("Content-Type")) {
		resp.Body.Close()
		cancel()
		return nil, &memberError{code: http.StatusBadGateway, message: fmt.Sprintf("it answered in %q, not JSON", resp.Header.Get("Content-Type"))}
	}
	resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// readWatch reads a member's watch until it ends. expired: the member said 410.
func (f *fanout) readWatch(ctx context.Context, wm *watchMember, q watchQuery, body io.Reader, out chan<- *wEvent, ed *editor) (bool, error) {
	sc := newScanner(body)
	var fs []field
	for {
		if _, err := sc.peek(); err != nil {
			if err == io.EOF {
				return false, nil
			}
			return false, err
		}
		frame, err := sc.value()
		if err != nil {
			return false, err
		}
		if fs, err = objectFields(frame, fs); err != nil {
			return false, err
		}
		var typ string
		var obj []byte
		for _, fl := range fs {
			switch fl.key {
			case "type":
				typ, _ = stringValue(frame[fl.start:fl.end])
			case "object":
				obj = frame[fl.start:fl.end]
			}
		}
		if len(obj) == 0 || obj[0] != '{' {
			return false, fmt.Errorf("%w: a watch event has no object", errMalformed)
		}
		switch typ {
		case "ERROR":
			var s metav1.Status
			if json.Unmarshal(obj, &s) == nil && s.Code == http.StatusGone {
				return true, nil
			}
			return false, fmt.Errorf("the member's watch ended with an error: %s", s.Message)
		case "BOOKMARK":
			ev, err := bookmarkOf(obj)
			if err != nil {
				return false, err
			}
			ev.m = wm
			wm.rv = ev.rv
			if ev.objKind != "" {
				wm.objKind, wm.objAPIGroup = ev.objKind, ev.objAPIVersion
			}
			if ev.initialEnd {
				wm.initialSeen = true
			}
			if !f.emit(ctx, out, ev) {
				return false, ctx.Err()
			}
		case "ADDED", "MODIFIED", "DELETED":
			ev, err := objectEvent(ed, typ, obj)
			if err != nil {
				return false, err
			}
			ev.m = wm
			if ev.objKind != "" {
				wm.objKind, wm.objAPIGroup = ev.objKind, ev.objAPIVersion
			}
			ev.initial = q.sendInitial && !wm.initialSeen
			if ev.rv == "" {
				ev.rv = wm.rv
			}
			wm.rv = ev.rv
			if !f.emit(ctx, out, ev) {
				return false, ctx.Err()
			}
		default:
			return false, fmt.Errorf("%w: a watch event of type %q", errMalformed, typ)
		}
	}
}

// bookmarkOf reads a member's BOOKMARK.
func bookmarkOf(obj []byte) (*wEvent, error) {
	var b struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Metadata   struct {
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(obj, &b); err != nil {
		return nil, fmt.Errorf("%w: a BOOKMARK does not decode: %v", errMalformed, err)
	}
	return &wEvent{kind: evBookmark, rv: b.Metadata.ResourceVersion, objKind: b.Kind, objAPIVersion: b.APIVersion,
		initialEnd: b.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true"}, nil
}

// objectEvent edits a member's event object (an object, or a Table of rows) for the writer.
func objectEvent(ed *editor, typ string, obj []byte) (*wEvent, error) {
	ev := &wEvent{kind: evObject, typ: typ}
	fs, err := objectFields(obj, nil)
	if err != nil {
		return nil, err
	}
	isTable := false
	var kind, apiVersion string
	for _, f := range fs {
		switch f.key {
		case "kind":
			kind, _ = stringValue(obj[f.start:f.end])
			isTable = kind == "Table"
		case "apiVersion":
			apiVersion, _ = stringValue(obj[f.start:f.end])
		}
	}
	if !isTable {
		out, hole, err := ed.validObject(make([]byte, 0, len(obj)+64), obj, true)
		if err != nil {
			return nil, err
		}
		ev.head, ev.tail, ev.rv = out[:hole], out[hole:], ed.rv
		ev.objKind, ev.objAPIVersion = kind, apiVersion
		ev.size = len(out)
		return ev, nil
	}
	ev.table = true
	if apiVersion == "" {
		apiVersion = "meta.k8s.io/v1"
	}
	var tableRV string
	for _, f := range fs {
		v := obj[f.start:f.end]
		switch f.key {
		case "apiVersion":
			apiVersion, _ = stringValue(v)
		case "metadata":
			var m struct {
				ResourceVersion string `json:"resourceVersion"`
			}
			_ = json.Unmarshal(v, &m)
			tableRV = m.ResourceVersion
		case "columnDefinitions":
			if v[0] == '[' {
				var cols []struct {
					Name string `json:"name"`
				}
				if err := json.Unmarshal(v, &cols); err != nil {
					return nil, fmt.Errorf("%w: columnDefinitions: %v", errMalformed, err)
				}
				ev.columns = append([]byte(nil), v...)
				ev.columnNames = make([]string, len(cols))
				for i, c := range cols {
					ev.columnNames[i] = c.Name
				}
			}
		case "rows":
			if v[0] != '[' {
				continue
			}
			els, err := elements(v, nil)
			if err != nil {
				return nil, err
			}
			for i, el := range els {
				if i > 0 {
					ev.rows = append(ev.rows, ',')
				}
				if ev.rows, err = ed.validRow(ev.rows, v[el[0]:el[1]], nil); err != nil {
					return nil, err
				}
				if ed.rv != "" {
					ev.rv = ed.rv
				}
			}
		}
	}
	if ev.rv == "" {
		ev.rv = tableRV
	}
	ev.head = appendQuoted([]byte(`{"kind":"Table","apiVersion":`), apiVersion)
	ev.head = append(ev.head, `,"metadata":{"resourceVersion":`...)
	ev.size = len(ev.head) + len(ev.rows) + len(ev.columns)
	return ev, nil
}

// resync lists a member that cannot resume its watch twice, at the position it stood and now,
// and hands the differences to the writer as events; then the member's watch goes on from
// now. Both lists come in etcd's key order, so they are merged one item at a time. false: the
// watch cannot go on (the old position is compacted too), and ends with 410.
func (f *fanout) resync(ctx context.Context, wm *watchMember, out chan<- *wEvent, ed *editor) bool {
	ok, retry := f.diff(ctx, wm, out, ed)
	if ok {
		return true
	}
	if retry {
		return sleep(ctx, retryMax)
	}
	f.emit(ctx, out, &wEvent{kind: evExpired, m: wm})
	return false
}

// diff does resync's work; retry: it failed in a way that trying again may fix.
func (f *fanout) diff(ctx context.Context, wm *watchMember, out chan<- *wEvent, ed *editor) (ok, retry bool) {
	list := func(rv string) (*listReader, io.Closer, *memberError) {
		query := f.memberQuery(wm.member)
		if rv != "" {
			query.Set("resourceVersion", rv)
			query.Set("resourceVersionMatch", string(metav1.ResourceVersionMatchExact))
		}
		rctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(f.server.memberTimeout(), cancel)
		resp, err := f.send(rctx, wm.member, f.r.path, withoutWatch(query), f.accept)
		if err != nil {
			cancel()
			return nil, nil, failure(ctx, err, f.server.memberTimeout())
		}
		timer.Stop()
		if resp.StatusCode != http.StatusOK {
			cancel()
			return nil, nil, errorOf(resp)
		}
		lr, err := newListReader(resp.Body)
		if err != nil {
			resp.Body.Close()
			cancel()
			return nil, nil, failure(ctx, err, f.server.memberTimeout())
		}
		return lr, cancelOnClose{ReadCloser: resp.Body, cancel: cancel}, nil
	}
	oldL, oldC, err := list(wm.rv)
	if err != nil {
		return false, err.code != http.StatusGone
	}
	defer oldC.Close()
	newL, newC, err := list("")
	if err != nil {
		return false, true
	}
	defer newC.Close()
	if oldL.table != newL.table {
		return false, false
	}
	type item struct {
		key  string
		rv   string
		ev   *wEvent
		done bool
	}
	oldEd, newEd := &editor{mount: wm.name, keep: true}, &editor{mount: wm.name, keep: true}
	next := func(l *listReader, e *editor, prev string) (item, error) {
		raw, idx, err := l.next()
		if err != nil || raw == nil {
			return item{done: true}, err
		}
		var ev *wEvent
		if l.table {
			ev = &wEvent{kind: evObject, table: true}
			if ev.rows, err = e.validRow(nil, raw, nil); err != nil {
				return item{}, err
			}
			ev.head = appendQuoted([]byte(`{"kind":"Table","apiVersion":`), l.apiVersion)
			ev.head = append(ev.head, `,"metadata":{"resourceVersion":`...)
			ev.size = len(ev.head) + len(ev.rows)
		} else {
			buf, hole, err := e.item(nil, raw, idx, true)
			if err != nil {
				return item{}, err
			}
			if !e.hasKind {
				// Items of typed lists have no kind; watch events' objects need one.
				kind, apiVersion := wm.objKind, wm.objAPIGroup
				if kind == "" {
					var ok bool
					if kind, ok = strings.CutSuffix(l.kind, "List"); !ok || kind == "" {
						return item{}, fmt.Errorf("%w: the kind of the list's items is not known", errMalformed)
					}
					apiVersion = l.apiVersion
				}
				prefix := appendQuoted([]byte(`{"kind":`), kind)
				prefix = append(prefix, `,"apiVersion":`...)
				prefix = appendQuoted(prefix, apiVersion)
				prefix = append(prefix, ',')
				if len(buf) > 1 && buf[skipSpace(buf, 1)] == '}' {
					prefix = prefix[:len(prefix)-1]
				}
				buf = append(prefix, buf[1:]...)
				hole += len(prefix) - 1
			}
			ev = &wEvent{kind: evObject, head: buf[:hole], tail: buf[hole:], size: len(buf)}
		}
		it := item{key: e.namespace + "/" + e.name, rv: e.rv, ev: ev}
		if e.namespace == "" {
			it.key = e.name
		}
		if e.name == "" || prev != "" && it.key <= prev {
			return item{}, fmt.Errorf("%w: the list is not in key order", errMalformed)
		}
		return it, nil
	}
	send := func(it item, typ string) bool {
		it.ev.typ, it.ev.m, it.ev.rv = typ, wm, wm.rv
		return f.emit(ctx, out, it.ev)
	}
	a, errA := next(oldL, oldEd, "")
	b, errB := next(newL, newEd, "")
	for errA == nil && errB == nil && !(a.done && b.done) {
		switch {
		case b.done || !a.done && a.key < b.key:
			if !send(a, "DELETED") {
				return false, false
			}
			a, errA = next(oldL, oldEd, a.key)
		case a.done || b.key < a.key:
			if !send(b, "ADDED") {
				return false, false
			}
			b, errB = next(newL, newEd, b.key)
		default:
			if a.rv != b.rv && !send(b, "MODIFIED") {
				return false, false
			}
			a, errA = next(oldL, oldEd, a.key)
			b, errB = next(newL, newEd, b.key)
		}
	}
	if errA != nil || errB != nil {
		if ctx.Err() != nil {
			return false, false
		}
		f.logger().Info("Listing a member again for a fan-out watch failed", "mount", wm.name, "old", errA, "new", errB)
		return false, !errors.Is(errA, errMalformed) && !errors.Is(errB, errMalformed)
	}
	wm.rv = newL.rv
	return f.emit(ctx, out, &wEvent{kind: evAdvance, m: wm, rv: newL.rv}), false
}

func withoutWatch(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		if k != "watch" && k != "allowWatchBookmarks" && k != "sendInitialEvents" {
			out[k] = v
		}
	}
	return out
}
