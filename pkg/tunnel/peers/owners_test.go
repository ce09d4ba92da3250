package peers

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
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

// TestOwnerIsNeverThisAddress: a Lease that another replica holds names it as the owner; one
// that an earlier process at this replica's own peer URL wrote (the replica restarted before
// its sessions' Leases expired) names none, so requests for its mounts get 503 at once
// instead of a hop from the replica to itself.
func TestOwnerIsNeverThisAddress(t *testing.T) {
	const self = "https://127.0.0.1:6443"
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	o := &Owners{cfg: OwnersConfig{Identity: "replica-a-2", PeerURL: self}, clock: clock.RealClock{}}
	o.lister = coordinationlisters.NewLeaseLister(indexer).Leases("ns")
	lease := func(key, holder, url string) {
		t.Helper()
		err := indexer.Add(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: LeaseName(key), Annotations: map[string]string{
				AnnotationSessionKey: key, AnnotationPeerURL: url,
			}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(holder),
				RenewTime:            &metav1.MicroTime{Time: time.Now()},
				LeaseDurationSeconds: ptr.To[int32](60),
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	lease("other", "replica-b-1", "https://127.0.0.2:6443")
	lease("earlier", "replica-a-1", self)
	lease("mine", "replica-a-2", self)
	if p, ok := o.Owner("other"); !ok || p.URL != "https://127.0.0.2:6443" || p.Identity != "replica-b-1" {
		t.Errorf("another replica's Lease: %+v, %v", p, ok)
	}
	for _, key := range []string{"earlier", "mine", "none"} {
		if p, ok := o.Owner(key); ok {
			t.Errorf("%s: owner %+v, want none", key, p)
		}
	}
}
