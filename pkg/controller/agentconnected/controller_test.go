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
