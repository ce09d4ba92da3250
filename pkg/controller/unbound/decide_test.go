package unbound

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

func names(ms []Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Cluster)+"/"+m.Name)
	}
	slices.Sort(out)
	return out
}

func TestDecide(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	old := t0.Add(-time.Hour)
	mounts := []Mount{
		{Cluster: "a", Name: "m1", UID: "a1", Created: old},
		{Cluster: "b", Name: "m1", UID: "b1", Created: old},
		{Cluster: "b", Name: "m2", UID: "b2", Created: old},
		{Cluster: clusters.DefaultCluster, Name: "m1", UID: "d1", Created: old},
	}
	bound := map[clusters.Name]bool{"a": true}

	// First listing that finds b unbound: nothing goes yet.
	remove, s := decide(nil, bound, mounts, t0)
	if len(remove) != 0 || !s["b"].Equal(t0) || len(s) != 1 {
		t.Fatalf("first listing: remove %v, state %v", names(remove), s)
	}
	// Second consecutive one: b's mounts go, a's and the default cluster's stay; the state
	// keeps the time of the first.
	remove, s = decide(s, bound, mounts, t0.Add(time.Minute))
	if got := names(remove); !slices.Equal(got, []string{"b/m1", "b/m2"}) || !s["b"].Equal(t0) {
		t.Fatalf("second listing: remove %v, state %v", got, s)
	}

	// A mount created after the first listing began (or within its second) stays; so does
	// one created just before, within creationTimestamp's resolution.
	late := append(slices.Clone(mounts),
		Mount{Cluster: "b", Name: "late", UID: "b3", Created: t0.Add(time.Second)},
		Mount{Cluster: "b", Name: "same-second", UID: "b4", Created: t0.Add(-500 * time.Millisecond)},
		Mount{Cluster: "b", Name: "second-before", UID: "b5", Created: t0.Add(-time.Second)})
	remove, _ = decide(state{"b": t0}, bound, late, t0.Add(time.Minute))
	if got := names(remove); !slices.Equal(got, []string{"b/m1", "b/m2", "b/second-before"}) {
		t.Errorf("mounts created around the first listing: remove %v", got)
	}

	// b binds again between the listings: nothing goes, and the count starts anew.
	remove, s = decide(state{"b": t0}, map[clusters.Name]bool{"a": true, "b": true}, mounts, t0.Add(time.Minute))
	if len(remove) != 0 || len(s) != 0 {
		t.Errorf("b bound again: remove %v, state %v", names(remove), s)
	}
	remove, s = decide(s, bound, mounts, t0.Add(2*time.Minute))
	if len(remove) != 0 || !s["b"].Equal(t0.Add(2*time.Minute)) {
		t.Errorf("b unbound once more: remove %v, state %v", names(remove), s)
	}

	// Clusters whose mounts are gone are forgotten.
	if _, s = decide(state{"c": t0}, bound, mounts, t0.Add(time.Minute)); len(s) != 1 {
		t.Errorf("state %v, want only b", s)
	}
}

type fakeBindings struct {
	bound map[clusters.Name]bool
	err   error
}

func (f *fakeBindings) BoundClusters(context.Context) (map[clusters.Name]bool, error) {
	return f.bound, f.err
}

type mountList struct {
	mounts  []Mount
	deleted []Mount
}

func (l *mountList) ListMounts(context.Context) ([]Mount, error) { return l.mounts, nil }
func (l *mountList) DeleteMount(_ context.Context, m Mount) error {
	l.deleted = append(l.deleted, m)
	return nil
}

// TestCollectDeletesNothingOnFailedOrEmptyListings: a failed listing, or one without any
// binding, deletes nothing and breaks the run of consecutive listings.
func TestCollectDeletesNothingOnFailedOrEmptyListings(t *testing.T) {
	ctx := context.Background()
	old := time.Now().Add(-time.Hour)
	mounts := &mountList{mounts: []Mount{{Cluster: "a", Name: "m", UID: "a1", Created: old}, {Cluster: "b", Name: "m", UID: "b1", Created: old}}}
	bindings := &fakeBindings{bound: map[clusters.Name]bool{"a": true}}
	c := New(bindings, mounts, time.Minute)

	c.collect(ctx) // b seen unbound once
	bindings.err = errors.New("connection refused")
	c.collect(ctx)
	bindings.err = nil
	c.collect(ctx) // once more, after the failure: the first of a new run
	if len(mounts.deleted) != 0 {
		t.Fatalf("deleted %v with a failed listing between two unbound ones", names(mounts.deleted))
	}
	bindings.bound = map[clusters.Name]bool{}
	c.collect(ctx)
	c.collect(ctx)
	if len(mounts.deleted) != 0 {
		t.Fatalf("deleted %v after listings without any binding", names(mounts.deleted))
	}
	bindings.bound = map[clusters.Name]bool{"a": true}
	c.collect(ctx)
	c.collect(ctx)
	if got := names(mounts.deleted); !slices.Equal(got, []string{"b/m"}) {
		t.Errorf("after two good listings: deleted %v, want b/m", got)
	}
}
