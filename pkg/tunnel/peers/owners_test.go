package peers

import (
	"testing"
	"time"
)

// With a renewal budget, the sessions of a replica renew at most that many Leases a second
// together, and each Lease is written to outlast the longer wait until its next renewal.
func TestRenewalBudget(t *testing.T) {
	cfg := OwnersConfig{LeaseDuration: DefaultLeaseDuration, RenewPeriod: DefaultRenewPeriod, RenewalsPerSecond: 20}
	for _, c := range []struct {
		held           int64
		period, length time.Duration
	}{
		{1, 20 * time.Second, 60 * time.Second},
		{400, 20 * time.Second, 60 * time.Second},
		{1000, 50 * time.Second, 150 * time.Second},
		{10000, 500 * time.Second, 1500 * time.Second},
	} {
		p := cfg.renewPeriod(c.held)
		if p != c.period {
			t.Errorf("%d sessions: renewed every %s, want %s", c.held, p, c.period)
		}
		if rate := float64(c.held) / p.Seconds(); rate > cfg.RenewalsPerSecond+1e-9 {
			t.Errorf("%d sessions: %.1f renewals/s, budget %.0f", c.held, rate, cfg.RenewalsPerSecond)
		}
		d := cfg.leaseDuration(p)
		if d != c.length {
			t.Errorf("%d sessions: Leases of %s, want %s", c.held, d, c.length)
		}
		// The wait after a write is within the duration written, with the default margin.
		if w := cfg.renewedWithin(d); w != p || 3*w > d {
			t.Errorf("%d sessions: a Lease of %s renewed within %s", c.held, d, w)
		}
	}
	// When the fleet grows, a Lease written short is renewed before it lapses.
	if w := min(cfg.renewPeriod(10000), cfg.renewedWithin(DefaultLeaseDuration)); w != DefaultRenewPeriod {
		t.Errorf("a 60s Lease after the fleet grew: renewed within %s", w)
	}
	// Without a budget, the configured period holds however many sessions there are.
	if p := (OwnersConfig{LeaseDuration: DefaultLeaseDuration, RenewPeriod: DefaultRenewPeriod}).renewPeriod(100000); p != DefaultRenewPeriod {
		t.Errorf("no budget: %s", p)
	}
}
