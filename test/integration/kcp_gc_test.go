package integration

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestUnboundClustersLoseTheirMounts: kcp runs no garbage collection for Mounts. Three
// logical clusters bind the export in the kcp harness and hold Mounts; one unbinds. The
// export's virtual workspace pages its APIBindingList one binding a page, so a listing takes
// several requests. While every other listing fails on its last page (a partial listing),
// nothing is deleted; once two listings in a row succeed, the unbound cluster's Mounts are
// gone and the others' (and the default cluster's) stay.
func TestUnboundClustersLoseTheirMounts(t *testing.T) {
	ctx := context.Background()
	k := framework.StartKcp(t, framework.KcpV0323)
	// The collector lists bindings through the export's virtual workspace, which kcp
	// authorizes in the export's workspace: root has content, with the provider's roles.
	kcpRoot(t, k, startKubes(t, 1)[0])
	clustersMounts := map[string][]string{"ws-a": {"m1"}, "ws-b": {"m1", "m2"}, "ws-c": {"m1", "m3"}}
	for cluster := range clustersMounts {
		// The collector reads only the bindings: the workspaces need no content.
		k.AddWorkspace("root:"+cluster, cluster, nil, true)
	}
	k.SetBindingListing(framework.KcpBindingListing{PageSize: 1})
	s := startKcpServer(t, k, func(o *options.Options) {
		apiOnly(o)
		o.Kcp.UnboundGCInterval = 100 * time.Millisecond
	})
	for cluster, names := range clustersMounts {
		for _, name := range names {
			if _, err := mountsIn(t, s.Config, cluster).Create(ctx, workspaceMount(name, "root:"+cluster), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.Client.MountsV1alpha1().Mounts().Create(ctx, workspaceMount("m1", "root:default"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Creation timestamps have whole seconds; only Mounts created a second before the first
	// listing that finds their cluster unbound may go.
	time.Sleep(1100 * time.Millisecond)

	exist := func(cluster, name string) bool {
		t.Helper()
		var err error
		if cluster == "" {
			_, err = s.Client.MountsV1alpha1().Mounts().Get(ctx, name, metav1.GetOptions{})
		} else {
			_, err = mountsIn(t, s.Config, cluster).Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	waitListings := func(n int) {
		t.Helper()
		start, _ := k.BindingListings()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if listings, _ := k.BindingListings(); listings >= start+n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the collector did not list bindings %d times within a minute", n)
			}
		}
	}
	checkAll := func(when string, gone map[string]bool) {
		t.Helper()
		for cluster, names := range clustersMounts {
			for _, name := range names {
				if exist(cluster, name) == gone[cluster] {
					t.Errorf("%s: mount %s of %s exists: %v", when, name, cluster, !gone[cluster])
				}
			}
		}
		if !exist("", "m1") {
			t.Errorf("%s: the default cluster's mount is gone", when)
		}
	}

	waitListings(3)
	checkAll("all clusters bound", nil)

	// ws-c unbinds, and every second listing fails on its last page: never two good
	// listings in a row, so nothing goes.
	k.SetBindingListing(framework.KcpBindingListing{PageSize: 1, FailEvery: 2})
	k.SetBound(false, "ws-c")
	waitListings(8)
	// Of 8 listings every second one fails; the last may still be under way.
	if _, failed := k.BindingListings(); failed < 3 {
		t.Fatalf("only %d listings failed", failed)
	}
	checkAll("ws-c unbound, every other listing failing", nil)

	// The listings succeed: ws-c's mounts go, the others stay.
	k.SetBindingListing(framework.KcpBindingListing{PageSize: 1})
	for deadline := time.Now().Add(time.Minute); exist("ws-c", "m1") || exist("ws-c", "m3"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ws-c's mounts are still there a minute after two good listings could have found ws-c unbound")
		}
	}
	checkAll("ws-c unbound", map[string]bool{"ws-c": true})
	// The collector counts a deletion once its DELETE returned, a moment after the test may
	// have seen the Mount gone.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := framework.Metric(s.Config, "mount_unbound_gc_deletions_total")
		if err == nil && got >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("deletions counted: %d %v, want at least 2", got, err)
			break
		}
	}
	if got, err := framework.Metric(s.Config, "mount_unbound_gc_listing_failures_total"); err != nil || got < 3 {
		t.Errorf("failed listings counted: %d %v, want at least 3", got, err)
	}

	// A listing without any binding deletes nothing (more likely wrong than true).
	k.SetBound(false, "ws-a", "ws-b")
	waitListings(3)
	checkAll("no binding at all", map[string]bool{"ws-c": true})
}
