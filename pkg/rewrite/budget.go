package rewrite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// ErrBusy is returned when a whole-document rewrite did not get its share of the Budget in
// time: the server is busy with others, and the caller may retry (answer 503, Retry-After).
var ErrBusy = errors.New("the server's memory budget for rewriting whole documents is in use by other requests")

// Budget bounds the memory that rewrites of whole documents (discovery and OpenAPI, read
// whole because their names can be anywhere in them) hold at once, server-wide: a weighted
// semaphore of bytes. A rewrite takes its share as its document grows, before the memory is
// allocated, and gives it back when its answer is read or closed. One that cannot get its
// share waits at most the Budget's wait, then fails with ErrBusy; one that would need more
// than the whole Budget fails at once with ErrTooLarge. A nil *Budget bounds nothing.
//
// Rewrites take their share piece by piece, so rewrites that hold some and wait for more
// could wait for each other until all fail. Only the oldest holder, and rewrites that hold
// nothing yet, wait; any other holder that cannot grow at once fails with ErrBusy and gives
// its share back, so the oldest always finishes.
type Budget struct {
	sem   *semaphore.Weighted
	size  int64
	wait  time.Duration
	inUse atomic.Int64

	mu      sync.Mutex
	next    uint64
	holders map[*lease]uint64 // leases holding a share, by the order of their first share
}

// NewBudget returns a budget of size bytes whose rewrites wait at most wait for their share.
func NewBudget(size int64, wait time.Duration) *Budget {
	return &Budget{sem: semaphore.NewWeighted(size), size: size, wait: wait, holders: map[*lease]uint64{}}
}

// mayWait says whether l may wait for more of the budget: it holds nothing yet, or it is
// the oldest holder.
func (b *Budget) mayWait(l *lease) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	seq, ok := b.holders[l]
	if !ok {
		return true
	}
	for _, s := range b.holders {
		if s < seq {
			return false
		}
	}
	return true
}

func (b *Budget) hold(l *lease) {
	b.mu.Lock()
	if _, ok := b.holders[l]; !ok {
		b.next++
		b.holders[l] = b.next
	}
	b.mu.Unlock()
}

func (b *Budget) forget(l *lease) {
	b.mu.Lock()
	delete(b.holders, l)
	b.mu.Unlock()
}

// DefaultBudgetWait is how long a rewrite waits for its share of a Budget.
const DefaultBudgetWait = 5 * time.Second

// Size returns the size of the budget in bytes.
func (b *Budget) Size() int64 { return b.size }

// InUse returns how many bytes of the budget rewrites hold.
func (b *Budget) InUse() int64 { return b.inUse.Load() }

// lease is what one rewrite holds of a budget. grow is called by the reader of the rewrite
// only; release may come from another goroutine (a Close).
type lease struct {
	b        *Budget
	ctx      context.Context
	deadline time.Time

	mu     sync.Mutex
	held   int64
	closed bool // released for good: nothing more is taken
}

// grow takes n bytes more, waiting until the lease's deadline at most.
func (l *lease) grow(n int64) error {
	if l.b == nil || n <= 0 {
		return nil
	}
	l.mu.Lock()
	held := l.held
	l.mu.Unlock()
	if held+n > l.b.size {
		return fmt.Errorf("%w: rewriting this document needs more than the server's rewrite memory budget of %d bytes", ErrTooLarge, l.b.size)
	}
	if !l.b.sem.TryAcquire(n) {
		if !l.b.mayWait(l) {
			return ErrBusy
		}
		parent := l.ctx
		if parent == nil {
			parent = context.Background()
		}
		if l.deadline.IsZero() {
			l.deadline = time.Now().Add(l.b.wait)
		}
		ctx, cancel := context.WithDeadline(parent, l.deadline)
		err := l.b.sem.Acquire(ctx, n)
		cancel()
		if err != nil {
			if parent.Err() != nil {
				return parent.Err()
			}
			return ErrBusy
		}
	}
	l.mu.Lock()
	closed := l.closed
	if !closed {
		l.held += n
		l.b.hold(l) // under l.mu: a release cannot come between and leave l among the holders
	}
	l.mu.Unlock()
	if closed {
		l.b.sem.Release(n)
		return errors.New("the rewrite was closed")
	}
	l.b.inUse.Add(n)
	return nil
}

// shrink gives back n bytes (at most what the lease holds).
func (l *lease) shrink(n int64) {
	if l.b == nil || n <= 0 {
		return
	}
	l.mu.Lock()
	n = min(n, l.held)
	l.held -= n
	l.mu.Unlock()
	if n > 0 {
		l.b.inUse.Add(-n)
		l.b.sem.Release(n)
	}
}

// release gives back all the lease holds, for good.
func (l *lease) release() {
	if l.b == nil {
		return
	}
	l.mu.Lock()
	n := l.held
	l.held, l.closed = 0, true
	l.mu.Unlock()
	l.b.forget(l)
	if n > 0 {
		l.b.inUse.Add(-n)
		l.b.sem.Release(n)
	}
}
