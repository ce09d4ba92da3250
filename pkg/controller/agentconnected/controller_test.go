package agentconnected

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

type heldSessions map[string]time.Time

func (h heldSessions) Connected(key string) (time.Time, bool) {
	since, ok := h[key]
	return since, ok
}

// A renewal of a session whose mount the cache shows as this replica wrote it reads nothing;
// every other cached state, and no cache, queues the mount for a read and a write.
func TestReaffirmSkipsWhatTheCacheConfirms(t *testing.T) {
	since := time.Date(2026, 11, 26, 17, 0, 0, 700_000_000, time.UTC)
	mount := tunnel.Mount{Cluster: clusters.DefaultCluster, Name: "edge", UID: "uid-1"}
	cached := func(mutate func(*v1alpha1.Mount)) *v1alpha1.Mount {
		m := &v1alpha1.Mount{
			ObjectMeta: metav1.ObjectMeta{Name: "edge", UID: "uid-1"},
			Spec:       v1alpha1.MountSpec{Tunnel: &v1alpha1.MountTunnel{}},
			Status: v1alpha1.MountStatus{Conditions: []metav1.Condition{{
				Type: v1alpha1.ConditionAgentConnected, Status: metav1.ConditionTrue, Reason: ReasonAttached,
				Message: ConnectedMessage("replica-a"), LastTransitionTime: metav1.NewTime(since.Truncate(time.Second)),
			}}},
		}
		if mutate != nil {
			mutate(m)
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		held     heldSessions
		cache    Cached
		wantRead bool
	}{
		{name: "confirmed", held: heldSessions{mount.Key(): since}, cache: func(tunnel.Mount) *v1alpha1.Mount { return cached(nil) }},
		{name: "no cache", held: heldSessions{mount.Key(): since}, wantRead: true},
		{name: "not in the cache", held: heldSessions{mount.Key(): since}, cache: func(tunnel.Mount) *v1alpha1.Mount { return nil }, wantRead: true},
		{name: "status controller said no agent", held: heldSessions{mount.Key(): since}, wantRead: true,
			cache: func(tunnel.Mount) *v1alpha1.Mount {
				return cached(func(m *v1alpha1.Mount) {
					m.Status.Conditions[0].Status, m.Status.Conditions[0].Message = metav1.ConditionFalse, "No agent is connected."
				})
			}},
		{name: "another replica", held: heldSessions{mount.Key(): since}, wantRead: true,
			cache: func(tunnel.Mount) *v1alpha1.Mount {
				return cached(func(m *v1alpha1.Mount) { m.Status.Conditions[0].Message = ConnectedMessage("replica-b") })
			}},
		{name: "an older session", held: heldSessions{mount.Key(): since.Add(time.Minute)}, wantRead: true,
			cache: func(tunnel.Mount) *v1alpha1.Mount { return cached(nil) }},
		{name: "another mount of the name", held: heldSessions{mount.Key(): since}, wantRead: true,
			cache: func(tunnel.Mount) *v1alpha1.Mount { return cached(func(m *v1alpha1.Mount) { m.UID = "uid-2" }) }},
		{name: "no condition yet", held: heldSessions{mount.Key(): since}, wantRead: true,
			cache: func(tunnel.Mount) *v1alpha1.Mount {
				return cached(func(m *v1alpha1.Mount) { m.Status.Conditions = nil })
			}},
		{name: "session ended meanwhile", held: heldSessions{}, wantRead: true,
			cache: func(tunnel.Mount) *v1alpha1.Mount { return cached(nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(tc.held, "replica-a")
			defer c.queue.ShutDown()
			if tc.cache != nil {
				c.ReadFrom(tc.cache)
			}
			c.Reaffirm(tunnel.Event{Mount: mount, Connected: true, Since: since})
			if got := c.queue.Len() == 1; got != tc.wantRead {
				t.Errorf("queued for a read: %v, want %v", got, tc.wantRead)
			}
		})
	}
}

// condition decides the write of sync, from the server's copy or a cached one: True for a
// session the mount does not show yet, False for an ended one the mount still shows as this
// replica's, nothing for another mount of the name, a mount without tunnel, or another
// replica's session.
func TestCondition(t *testing.T) {
	since := time.Date(2026, 11, 26, 23, 0, 0, 400_000_000, time.UTC)
	mount := tunnel.Mount{Cluster: clusters.DefaultCluster, Name: "edge", UID: "uid-1"}
	withCondition := func(status metav1.ConditionStatus, replica string, at time.Time) *v1alpha1.Mount {
		m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge", UID: "uid-1", Generation: 3}, Spec: v1alpha1.MountSpec{Tunnel: &v1alpha1.MountTunnel{}}}
		if replica != "" {
			m.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAgentConnected, Status: status, Message: ConnectedMessage(replica), LastTransitionTime: metav1.NewTime(at)}}
		}
		return m
	}
	for _, tc := range []struct {
		name      string
		current   *v1alpha1.Mount
		connected bool
		want      metav1.ConditionStatus // "": nothing to write
	}{
		{name: "attached, no condition yet", current: withCondition("", "", time.Time{}), connected: true, want: metav1.ConditionTrue},
		{name: "attached, another replica's", current: withCondition(metav1.ConditionTrue, "replica-b", since.Truncate(time.Second)), connected: true, want: metav1.ConditionTrue},
		{name: "attached, an older session of this replica", current: withCondition(metav1.ConditionTrue, "replica-a", since.Add(-time.Minute).Truncate(time.Second)), connected: true, want: metav1.ConditionTrue},
		{name: "attached, already said", current: withCondition(metav1.ConditionTrue, "replica-a", since.Truncate(time.Second)), connected: true},
		{name: "detached, this replica's", current: withCondition(metav1.ConditionTrue, "replica-a", since.Truncate(time.Second)), want: metav1.ConditionFalse},
		{name: "detached, never said", current: withCondition("", "", time.Time{}), want: metav1.ConditionFalse},
		{name: "detached, another replica's", current: withCondition(metav1.ConditionTrue, "replica-b", since.Truncate(time.Second))},
		{name: "another mount of the name", current: func() *v1alpha1.Mount { m := withCondition("", "", time.Time{}); m.UID = "uid-2"; return m }(), connected: true},
		{name: "no tunnel", current: func() *v1alpha1.Mount { m := withCondition("", "", time.Time{}); m.Spec.Tunnel = nil; return m }(), connected: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(heldSessions{}, "replica-a")
			defer c.queue.ShutDown()
			cond := c.condition(tc.current, mount, tc.connected, since)
			switch {
			case tc.want == "" && cond != nil:
				t.Fatalf("writes %+v, want nothing", cond)
			case tc.want == "":
			case cond == nil:
				t.Fatalf("writes nothing, want %s", tc.want)
			case cond.Status != tc.want || cond.ObservedGeneration != 3:
				t.Fatalf("writes %+v, want %s at generation 3", cond, tc.want)
			case tc.want == metav1.ConditionTrue && (!cond.LastTransitionTime.Time.Equal(since.Truncate(time.Second)) || cond.Message != ConnectedMessage("replica-a")):
				t.Fatalf("writes %+v, want this replica's session since %v", cond, since.Truncate(time.Second))
			}
		})
	}
}

// An attach writes on top of the cache's copy, which must be a copy: the cache is shared.
func TestCachedCopy(t *testing.T) {
	mount := tunnel.Mount{Cluster: clusters.DefaultCluster, Name: "edge", UID: "uid-1"}
	c := New(heldSessions{}, "replica-a")
	defer c.queue.ShutDown()
	if c.cachedCopy(mount) != nil {
		t.Fatal("a copy without a cache")
	}
	shared := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "root:org", UID: "uid-1"}}
	c.ReadFrom(func(tunnel.Mount) *v1alpha1.Mount { return shared })
	cp := c.cachedCopy(mount)
	if cp == nil || cp == shared || cp.Namespace != "" || shared.Namespace != "root:org" {
		t.Fatalf("copy %+v of %+v", cp, shared)
	}
}
