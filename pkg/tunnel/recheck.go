package tunnel

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// maxRechecksInFlight bounds the checks running at once. The limiter paces their starts; a
// host that takes seconds to answer would otherwise pile them up.
const maxRechecksInFlight = 16

// rechecks holds the sessions of an Attacher until their next check, ordered by when it is
// due, and runs the due ones one limiter token at a time. A session waits as an entry of a
// heap, not as a goroutine of its own: at 10,000 sessions a goroutine each, sleeping most of
// the time behind the limiter, held 10,000 stacks. One goroutine runs the schedule while any
// session is in it, and ends with the last.
type rechecks struct {
	limiter RecheckLimiter

	mu      sync.Mutex
	due     dueHeap
	running bool
	wake    chan struct{}
	slots   chan struct{}
}

// recheck is one session's place in the schedule.
type recheck struct {
	ctx context.Context
	at  time.Time
	// index is the place in the heap; -1 while out of it (being checked, or ended).
	index int
	// run checks the session and answers when the next check is due, or false to drop it.
	run func() (time.Duration, bool)
}

func newRechecks(limiter RecheckLimiter) *rechecks {
	return &rechecks{limiter: limiter, wake: make(chan struct{}, 1), slots: make(chan struct{}, maxRechecksInFlight)}
}

// add schedules a session's first check after first; run is called for every check until
// it answers false or ctx ends, and the session leaves the schedule when ctx ends.
func (r *rechecks) add(ctx context.Context, first time.Duration, run func() (time.Duration, bool)) {
	s := &recheck{ctx: ctx, index: -1, run: run}
	r.push(s, first)
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if s.index >= 0 {
			heap.Remove(&r.due, s.index)
			r.signal() // the schedule ends with its last session
		}
	})
}

// push puts s back into the schedule, due after d, and starts the schedule's goroutine if
// none runs.
func (r *rechecks) push(s *recheck, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.ctx.Err() != nil {
		return
	}
	s.at = time.Now().Add(d)
	heap.Push(&r.due, s)
	if !r.running {
		r.running = true
		go r.loop()
	}
	r.signal()
}

// signal wakes the schedule's goroutine to look at the heap again; r.mu is held.
func (r *rechecks) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// loop runs due checks until the schedule is empty.
func (r *rechecks) loop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		if len(r.due) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		next := r.due[0]
		if wait := time.Until(next.at); wait > 0 {
			r.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-r.wake:
				timer.Stop()
			}
			continue
		}
		heap.Pop(&r.due)
		r.mu.Unlock()

		// The check's start waits for a token of the limiter: what the checks cost the host
		// is bounded by its rate. A session that ends meanwhile is dropped.
		if r.limiter != nil {
			if err := r.limiter.Wait(next.ctx); err != nil {
				continue
			}
		}
		r.slots <- struct{}{}
		go func() {
			defer func() { <-r.slots }()
			if d, again := next.run(); again {
				r.push(next, d)
			}
		}()
	}
}

// dueHeap orders sessions by when their next check is due.
type dueHeap []*recheck

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *dueHeap) Push(x any) {
	s := x.(*recheck)
	s.index = len(*h)
	*h = append(*h, s)
}

func (h *dueHeap) Pop() any {
	old := *h
	n := len(old)
	s := old[n-1]
	old[n-1] = nil
	s.index = -1
	*h = old[:n-1]
	return s
}
