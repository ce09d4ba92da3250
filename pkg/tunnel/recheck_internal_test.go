package tunnel

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestRechecksHoldNoGoroutinePerSession: 1,000 sessions waiting for their next check add one
// goroutine (the schedule's), not 1,000; sessions that end leave the schedule at once, and
// the schedule's goroutine ends with the last of them.
func TestRechecksHoldNoGoroutinePerSession(t *testing.T) {
	r := newRechecks(nil)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs atomic.Int64
	for range 1000 {
		r.add(ctx, time.Hour, func() (time.Duration, bool) { runs.Add(1); return time.Hour, true })
	}
	if grew := runtime.NumGoroutine() - before; grew > 1 {
		t.Fatalf("1,000 scheduled sessions added %d goroutines, want at most 1", grew)
	}
	if n := r.waiting(); n != 1000 {
		t.Fatalf("%d sessions in the schedule, want 1000", n)
	}
	cancel()
	eventually(t, "the schedule to empty and stop after the sessions ended", func() bool { return r.waiting() == 0 && !r.isRunning() })
	if n := runs.Load(); n != 0 {
		t.Fatalf("%d checks of sessions not yet due", n)
	}
}

// TestRechecksRunDueSessionsAgain: a due session is checked, and again after the delay its
// check answers; one that answers false leaves the schedule.
func TestRechecksRunDueSessionsAgain(t *testing.T) {
	r := newRechecks(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var again, once atomic.Int64
	r.add(ctx, 0, func() (time.Duration, bool) { again.Add(1); return time.Millisecond, true })
	r.add(ctx, 0, func() (time.Duration, bool) { once.Add(1); return 0, false })
	eventually(t, "the repeating session's fifth check", func() bool { return again.Load() >= 5 })
	if n := once.Load(); n != 1 {
		t.Fatalf("a session whose check answered false was checked %d times", n)
	}
}

// eventually polls cond (the package's external tests have waitFor).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

func (r *rechecks) waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.due)
}

func (r *rechecks) isRunning() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}
