package status

import (
	"testing"
	"time"
)

func TestProbeIntervalKeepsTheBudget(t *testing.T) {
	for _, tc := range []struct {
		mounts    int64
		perSecond float64
		want      time.Duration
	}{
		{mounts: 1, perSecond: 100, want: 30 * time.Second},
		{mounts: 3000, perSecond: 100, want: 30 * time.Second},
		{mounts: 3001, perSecond: 100, want: 30010 * time.Millisecond},
		{mounts: 10000, perSecond: 100, want: 100 * time.Second},
		{mounts: 10000, perSecond: 0, want: 30 * time.Second},
	} {
		got := probeInterval(30*time.Second, tc.mounts, tc.perSecond)
		if got != tc.want {
			t.Errorf("%d mounts at %v/s: every %v, want %v", tc.mounts, tc.perSecond, got, tc.want)
		}
		if tc.perSecond > 0 && float64(tc.mounts)/got.Seconds() > tc.perSecond+1e-9 {
			t.Errorf("%d mounts every %v: %.1f probes/s, over the budget of %v", tc.mounts, got, float64(tc.mounts)/got.Seconds(), tc.perSecond)
		}
	}
}
