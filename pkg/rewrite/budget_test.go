package rewrite

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Rewrites that hold a share and wait for more could wait for each other until all fail:
// six 48 MiB documents at once in a 256 MiB budget once ended with none answered.
func TestBudgetOldestHolderFinishes(t *testing.T) {
	b := NewBudget(100, 5*time.Second)
	older := &lease{b: b, ctx: context.Background()}
	younger := &lease{b: b, ctx: context.Background()}
	if err := older.grow(40); err != nil {
		t.Fatal(err)
	}
	if err := younger.grow(40); err != nil {
		t.Fatal(err)
	}

	// The younger holder cannot grow at once: it fails at once rather than wait.
	start := time.Now()
	if err := younger.grow(40); !errors.Is(err, ErrBusy) {
		t.Fatalf("younger holder: got %v, want ErrBusy", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the younger holder waited %v", d)
	}

	// The oldest holder waits, and gets its share once the younger gives its own back.
	done := make(chan error, 1)
	go func() { done <- older.grow(50) }()
	time.Sleep(50 * time.Millisecond)
	younger.release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("oldest holder: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the oldest holder did not get its share after the younger released")
	}
	if got := b.InUse(); got != 90 {
		t.Errorf("in use: %d, want 90", got)
	}

	// A rewrite that holds nothing yet waits its turn.
	newcomer := &lease{b: b, ctx: context.Background()}
	go func() { done <- newcomer.grow(30) }()
	time.Sleep(50 * time.Millisecond)
	older.release()
	if err := <-done; err != nil {
		t.Fatalf("newcomer: %v", err)
	}
	newcomer.release()
	if got := b.InUse(); got != 0 {
		t.Errorf("in use after all released: %d", got)
	}
	if n := len(b.holders); n != 0 {
		t.Errorf("%d holders left after all released", n)
	}
}
