package fanout

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxWindow bounds the members asked at once for one page; a page asks one member first and
// doubles from there while members run out before the page is full.
const maxWindow = 16

// maxRounds bounds the rounds of requests of one page: a member may answer fewer items than
// asked with a continue token (or none at all, round after round); the page then ends early
// and the continue token goes on from there.
const maxRounds = 32

// maxMemberContinue bounds a member's own continue token, which the fan-out's carries.
const maxMemberContinue = 16 << 10

// cursor is where a paged list stands in one member.
type cursor struct {
	name string
	m    *member
	// rv pins the member's list to one snapshot: its resourceVersion when the list began.
	rv string
	// cont is the member's own continue token.
	cont         string
	done, failed bool
	// probed is closed when the first page's probe of the member (a LIST with limit 1, for
	// its resourceVersion) is done; nil without one.
	probed chan struct{}
	probe  *memberError
}

// pageResult is one member's answer to one page.
type pageResult struct {
	meta  listMeta
	items []byte
	count int
	// overflow: the answer had more items than were kept.
	overflow bool
	rv, cont string
	err      *memberError
}

// fetchPage asks a member for at most limit items from where c stands, keeping at most keep
// of them and at most budget bytes (at least one item).
func (f *fanout) fetchPage(ctx context.Context, c *cursor, q listQuery, limit int64, keep int, budget int) *pageResult {
	timeout := f.server.memberTimeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	query := f.memberQuery(c.m)
	query.Set("limit", strconv.FormatInt(limit, 10))
	switch {
	case c.cont != "":
		query.Set("continue", c.cont)
	case c.rv != "":
		query.Set("resourceVersion", c.rv)
		query.Set("resourceVersionMatch", string(metav1.ResourceVersionMatchExact))
	default:
		if rv, match := q.memberRV(c.name); rv != "" {
			query.Set("resourceVersion", rv)
			if match != "" {
				query.Set("resourceVersionMatch", match)
			}
		}
	}
	r := &pageResult{}
	resp, err := f.send(ctx, c.m, f.r.path, query, f.accept)
	if err != nil {
		r.err = failure(f.req.Context(), err, timeout)
		return r
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.err = errorOf(resp)
		return r
	}
	if !isJSON(resp.Header.Get("Content-Type")) {
		r.err = &memberError{code: http.StatusBadGateway, message: fmt.Sprintf("it answered in %q, not JSON", resp.Header.Get("Content-Type"))}
		return r
	}
	lr, err := newListReader(resp.Body)
	if err != nil {
		r.err = failure(f.req.Context(), err, timeout)
		return r
	}
	r.meta.from(lr, resp.Header.Get("Content-Type"))
	ed := &editor{mount: c.name}
	for {
		item, idx, err := lr.next()
		if err != nil {
			r.err = failure(f.req.Context(), err, timeout)
			return r
		}
		if item == nil {
			break
		}
		if r.count >= keep {
			r.overflow = true
			break
		}
		before := len(r.items)
		if before > 0 {
			r.items = append(r.items, ',')
		}
		if r.meta.table {
			r.items, err = ed.validRow(r.items, item, nil)
		} else {
			r.items, _, err = ed.item(r.items, item, idx, false)
		}
		if err != nil {
			r.err = failure(f.req.Context(), err, timeout)
			return r
		}
		if len(r.items) > budget && r.count > 0 {
			r.items, r.overflow = r.items[:before], true
			break
		}
		r.count++
	}
	r.rv, r.cont = lr.rv, lr.cont
	if len(r.cont) > maxMemberContinue {
		r.err = &memberError{code: http.StatusBadGateway, message: fmt.Sprintf("its continue token is longer than %d bytes", maxMemberContinue)}
		return r
	}
	if r.overflow {
		r.cont = "" // not where the kept items end
	}
	return r
}

// servePage serves one page of a paged list across the members, in mount order. The page is
// collected whole (at most limit items, and MaxPageBytes), so its Warnings name every member
// that failed. The first page learns every member's resourceVersion (a LIST with limit 1
// each), and each member's later pages are pinned to it: the list is a consistent snapshot
// of each member, its resourceVersion names every member, and a member that is down is named
// on the first page already.
func (f *fanout) servePage(w http.ResponseWriter, q listQuery) {
	ctx := f.req.Context()
	hash := queryHash(f.r.path, f.path.SelectorText, f.r.query.Get("labelSelector"), f.r.query.Get("fieldSelector"))
	cursors, tok, status := f.cursors(hash)
	if status != nil {
		writeStatus(w, status)
		return
	}
	failed := map[string]*memberError{}
	for _, c := range cursors {
		if c.failed && c.probe != nil {
			failed[c.name] = c.probe
		}
	}
	limit := q.limit
	if limit <= 0 {
		limit = 500
	}
	pos := 0
	if tok != nil {
		pos = tok.Position
		if pos < len(cursors) {
			cursors[pos].cont = tok.Continue
		}
	} else if len(cursors) > 1 {
		f.probe(ctx, cursors[1:], q)
	}

	var meta *listMeta
	if tok != nil && tok.Kind != "" {
		meta = &listMeta{kind: tok.Kind, apiVersion: tok.APIVersion, table: tok.Table, contentType: "application/json"}
	}
	metaFromMember := false
	var page []byte
	count := int64(0)
	budget := f.server.maxPageBytes()
	take := func(c *cursor, r *pageResult) bool {
		if meta == nil || !metaFromMember {
			if meta != nil && (meta.kind != r.meta.kind || meta.table != r.meta.table) {
				return false
			}
			m := r.meta
			meta, metaFromMember = &m, true
		} else if r.meta.kind != meta.kind || r.meta.table != meta.table {
			return false
		}
		items := r.items
		if meta.table {
			if rm := remap(meta.columnNames, r.meta.columnNames); rm != nil {
				var err error
				if items, err = remapRows(nil, items, rm); err != nil {
					return false
				}
			}
		}
		if len(items) > 0 {
			if len(page) > 0 {
				page = append(page, ',')
			}
			page = append(page, items...)
		}
		return true
	}
	markFailed := func(c *cursor, e *memberError) {
		c.failed = true
		failed[c.name] = e
	}
	expired := func(c *cursor) {
		writeStatus(w, newStatus(http.StatusGone, metav1.StatusReasonExpired, fmt.Sprintf(
			"the list's position in mount %q has expired (its continue token or resourceVersion was compacted): list again from the start", c.name)))
	}

	window := 1
	full := false
	for round := 0; !full && pos < len(cursors) && count < limit; round++ {
		if round == maxRounds {
			break
		}
		var batch []*cursor
		for i := pos; i < len(cursors) && len(batch) < window; i++ {
			batch = append(batch, cursors[i])
		}
		results := make([]*pageResult, len(batch))
		var wg sync.WaitGroup
		for i, c := range batch {
			if c.done || c.probed == nil && c.failed {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if c.probed != nil {
					<-c.probed
					if c.failed {
						return
					}
				}
				// The window shares what the page may still hold.
				remaining := limit - count
				results[i] = f.fetchPage(ctx, c, q, remaining, int(remaining), max((budget-len(page))/len(batch), 1))
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
		for i, c := range batch {
			r := results[i]
			if c.failed || c.done || r == nil {
				if c.failed && failed[c.name] == nil && c.probe != nil {
					failed[c.name] = c.probe
				}
				pos++
				continue
			}
			if r.err != nil {
				if r.err.code == http.StatusGone {
					expired(c)
					return
				}
				markFailed(c, r.err)
				pos++
				continue
			}
			if c.rv == "" {
				c.rv = r.rv
			}
			remaining := limit - count
			if !r.overflow && int64(r.count) <= remaining {
				if !take(c, r) {
					markFailed(c, &memberError{code: http.StatusBadGateway, message: fmt.Sprintf("it answered a %s, other mounts a %s", r.meta.kind, meta.kind)})
					pos++
					continue
				}
				count += int64(r.count)
				if r.cont == "" {
					c.done = true
					pos++
					continue
				}
				c.cont = r.cont
				full = count >= limit || len(page) >= budget
				break // this member has more: ask it again, or end the page here
			}
			// More than fits: ask the member again for exactly what fits, from where it
			// stood, for its continue token at that point (its snapshot is pinned).
			k := min(int64(r.count), remaining)
			if k == 0 {
				full = true
				break
			}
			r2 := f.fetchPage(ctx, c, q, k, int(k), 1<<62)
			switch {
			case r2.err != nil && r2.err.code == http.StatusGone:
				expired(c)
				return
			case r2.err != nil:
				markFailed(c, r2.err)
				pos++
				continue
			case r2.overflow || int64(r2.count) != k:
				markFailed(c, &memberError{code: http.StatusBadGateway, message: "its list changed between two reads of one snapshot"})
				pos++
				continue
			}
			if !take(c, r2) {
				markFailed(c, &memberError{code: http.StatusBadGateway, message: fmt.Sprintf("it answered a %s, other mounts a %s", r2.meta.kind, meta.kind)})
				pos++
				continue
			}
			count += k
			if r2.cont == "" {
				c.done = true
				pos++
			} else {
				c.cont = r2.cont
			}
			full = true
			break
		}
		window = min(window*2, maxWindow)
	}
	// The first page waits for the probes it did not need, for their resourceVersions.
	for _, c := range cursors {
		if c.probed != nil {
			<-c.probed
			if c.failed && failed[c.name] == nil && c.probe != nil {
				failed[c.name] = c.probe
			}
		}
	}
	for pos < len(cursors) && (cursors[pos].failed || cursors[pos].done) {
		pos++
	}

	if meta == nil {
		allFailed(w, failed)
		return
	}
	next := ""
	if pos < len(cursors) {
		t := &continueToken{Query: hash, Position: pos, Continue: cursors[pos].cont, Kind: meta.kind, APIVersion: meta.apiVersion, Table: meta.table}
		for i, c := range cursors {
			t.Members = append(t.Members, c.name)
			t.RVs = append(t.RVs, c.rv)
			if c.failed {
				t.Failed = append(t.Failed, i)
			}
		}
		var err error
		if next, err = encodeContinue(t); err != nil {
			writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error()))
			return
		}
	}
	positions := Positions{}
	for _, c := range cursors {
		if !c.failed && c.rv != "" {
			positions[c.name] = c.rv
		}
	}
	warn(ctx, failed)
	out := newListWriter(w, *meta)
	_ = out.items(page)
	_ = out.end(EncodePositions(positions), next)
}

// probe lists each of cs with limit 1 for its resourceVersion, concurrently, in the
// background; each cursor's probed is closed when its probe is done.
func (f *fanout) probe(ctx context.Context, cs []*cursor, q listQuery) {
	sem := make(chan struct{}, f.server.maxConcurrency())
	for _, c := range cs {
		c.probed = make(chan struct{})
	}
	go func() {
		for _, c := range cs {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
			go func() {
				defer func() { <-sem; close(c.probed) }()
				if ctx.Err() != nil {
					c.failed, c.probe = true, &memberError{code: http.StatusServiceUnavailable, message: "cancelled"}
					return
				}
				r := f.fetchPage(ctx, c, q, 1, 0, 1)
				if r.err != nil {
					c.failed, c.probe = true, r.err
					return
				}
				c.rv = r.rv
			}()
		}
	}()
}

// cursors returns where a paged list stands in each member: all at their start for a first
// page, else what the continue token says, for the members the caller may still use. A token
// that is not this server's, belongs to another request, or names a mount the caller may not
// proxy through is refused.
func (f *fanout) cursors(hash string) ([]*cursor, *continueToken, *metav1.Status) {
	raw := f.r.query.Get("continue")
	if raw == "" {
		cs := make([]*cursor, len(f.members))
		for i, m := range f.members {
			cs[i] = &cursor{name: m.name, m: m}
		}
		return cs, nil, nil
	}
	tok, err := decodeContinue(raw)
	if err != nil {
		return nil, nil, newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest,
			"the continue token is not one that mounts/*/proxy issued, or it was changed: list again from the start")
	}
	if tok.Query != hash {
		return nil, nil, newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest,
			"the continue token belongs to another list (another path or selector): list again from the start")
	}
	byName := map[string]*member{}
	for _, m := range f.members {
		byName[m.name] = m
	}
	var missing []string
	for _, n := range tok.Members {
		if byName[n] == nil {
			missing = append(missing, n)
		}
	}
	gone := map[string]bool{}
	if len(missing) > 0 {
		caller, _ := userFrom(f.req.Context())
		allowed, _ := f.server.authorize(f.req.Context(), caller, missing)
		for i, n := range missing {
			if !allowed[i] {
				return nil, nil, newStatus(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
					"the continue token names mount %q, which you may not proxy through (get on mounts/proxy)", n))
			}
			gone[n] = true
		}
	}
	failed := map[int]bool{}
	for _, i := range tok.Failed {
		failed[i] = true
	}
	cs := make([]*cursor, len(tok.Members))
	for i, n := range tok.Members {
		c := &cursor{name: n, m: byName[n], rv: tok.RVs[i], failed: failed[i]}
		if gone[n] && !c.failed {
			c.failed = true
			c.probe = &memberError{code: http.StatusNotFound, message: "the mount is gone, or no longer selected, since the list began"}
		}
		if i < tok.Position {
			c.done = true
		}
		cs[i] = c
	}
	return cs, tok, nil
}
