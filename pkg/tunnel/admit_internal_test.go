package tunnel

import (
	"testing"
	"time"
)

// A pod's attach through a mount's proxy is no agent's attach: LimitAttaching must not count it.
func TestIsAgentAttach(t *testing.T) {
	for path, want := range map[string]bool{
		"/apis/mounts.kcp.io/v1alpha1/mounts/prod/attach":                                  true,
		"/clusters/abc/apis/mounts.kcp.io/v1alpha1/mounts/prod/attach":                     true,
		"/apis/mounts.kcp.io/v1alpha1/mounts/prod/proxy/api/v1/namespaces/d/pods/p/attach": false,
		"/apis/mounts.kcp.io/v1alpha1/mounts/prod/proxy/api/v1/namespaces/mounts/x/attach": false,
		"/api/v1/namespaces/d/pods/p/attach":                                               false,
	} {
		if got := isAgentAttach(path); got != want {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
	}
}

// Turned-away attaches get return times one slot's share of an attach's hold apart, starting
// at a second; the times restart from now once they are past; beyond the bound they are spread
// over its second half; finished attaches move the hold.
func TestReturnTimes(t *testing.T) {
	now := time.Date(2026, 11, 26, 23, 0, 0, 0, time.UTC)
	r := &returnTimes{slots: 4, hold: 2 * time.Second} // 0.5 s apart
	want := []time.Duration{time.Second, time.Second, time.Second, 1500 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond}
	for i, w := range want {
		if got := r.take(now); got != w {
			t.Fatalf("attach %d turned away: come back in %v, want %v", i, got, w)
		}
	}
	// Later than all handed out: from now again.
	if got := r.take(now.Add(time.Minute)); got != time.Second {
		t.Fatalf("after a quiet minute: %v", got)
	}
	// Far ahead: spread over the second half of the bound, not all at it.
	r.next = now.Add(MaxAttachRetryAfter)
	seen := map[time.Duration]bool{}
	for range 50 {
		got := r.take(now)
		if got < MaxAttachRetryAfter/2 || got > MaxAttachRetryAfter {
			t.Fatalf("beyond the bound: %v", got)
		}
		seen[got] = true
	}
	if len(seen) < 40 || !r.next.Equal(now.Add(MaxAttachRetryAfter)) {
		t.Fatalf("%d distinct waits of 50; next moved to %v", len(seen), r.next)
	}
	for range 50 {
		r.held(12 * time.Second)
	}
	if r.hold < 11*time.Second || r.hold > 12*time.Second {
		t.Fatalf("hold after 50 attaches of 12 s: %v", r.hold)
	}
}
