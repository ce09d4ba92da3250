package unbound

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// Mount is what the collector knows of a Mount.
type Mount struct {
	Cluster clusters.Name
	Name    string
	UID     types.UID
	Created time.Time
}

// state remembers, per logical cluster that holds Mounts and was seen unbound, when the
// first of the consecutive listings that saw it unbound began.
type state map[clusters.Name]time.Time

// decide returns the Mounts to delete after a successful listing of the bound clusters that
// began at listed, and the state for the next round. A cluster's Mounts go only when a
// second consecutive listing still finds the cluster unbound, and only those created before
// the first of those listings began: a Mount created since may belong to a binding that
// listing could not have seen yet. creationTimestamp has whole seconds, so a Mount counts as
// created before only when it was at least a second earlier. Mounts of the default cluster
// belong to no binding and are never collected.
func decide(prev state, bound map[clusters.Name]bool, mounts []Mount, listed time.Time) (remove []Mount, next state) {
	next = state{}
	for _, m := range mounts {
		if m.Cluster == clusters.DefaultCluster || m.Cluster == clusters.Wildcard || bound[m.Cluster] {
			continue
		}
		if _, seen := next[m.Cluster]; seen {
			continue
		}
		if since, ok := prev[m.Cluster]; ok {
			next[m.Cluster] = since
		} else {
			next[m.Cluster] = listed
		}
	}
	for _, m := range mounts {
		since, ok := prev[m.Cluster]
		if !ok || next[m.Cluster] != since {
			continue // first seen unbound now, or bound
		}
		if !m.Created.Add(time.Second).After(since) {
			remove = append(remove, m)
		}
	}
	return remove, next
}
