package aggregation

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestStatusReplicas runs two mount-apiserver processes against one host and one etcd: only
// the one holding the Lease writes status; killed, the other takes over.
func TestStatusReplicas(t *testing.T) {
	setupProxy(t)
	_, ctx := ktesting.NewTestContext(t)
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Options{Directory: t.TempDir(), LogLevel: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	bin := framework.BuildBinary(t)
	args := []string{
		"--kubeconfig", agg.Kubeconfig, "--etcd-servers", etcd.ClientURL, "--etcd-prefix", "/replicas",
		"--leader-elect-resource-name", "replicas-test", "--leader-elect-lease-duration", "4s",
		"--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms", "--status-probe-interval", "2s",
	}
	replicas := []*framework.Process{bin.Start(t, t.TempDir(), args...), bin.Start(t, t.TempDir(), args...)}

	writes := func(p *framework.Process) int {
		t.Helper()
		admin := rest.CopyConfig(kube.AdminConfig)
		admin.Host, admin.CAData = p.URL, p.CAData
		n, err := framework.Metric(admin, "mount_status_writes_total")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	lease := func(t *testing.T) (holder string, transitions int32) {
		t.Helper()
		var l *coordinationv1.Lease
		eventually(t, "the status Lease held", func() (err error) {
			if l, err = kube.Client.CoordinationV1().Leases("mount-apiserver").Get(context.Background(), "replicas-test", metav1.GetOptions{}); err != nil {
				return err
			}
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				return fmt.Errorf("no holder")
			}
			return nil
		})
		return *l.Spec.HolderIdentity, ptr.Deref(l.Spec.LeaseTransitions, 0)
	}
	var mountName string
	client := func(p *framework.Process) *rest.Config {
		admin := rest.CopyConfig(kube.AdminConfig)
		admin.Host, admin.CAData = p.URL, p.CAData
		return admin
	}
	waitReady := func(p *framework.Process, name string) {
		t.Helper()
		mounts := mountsClient(t, client(p)).MountsV1alpha1().Mounts()
		eventually(t, name+" Ready", func() error {
			m, err := mounts.Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if m.Status.Phase != v1alpha1.MountPhaseReady {
				return fmt.Errorf("phase %q", m.Status.Phase)
			}
			return nil
		})
	}

	// Only the Lease holder writes. A loaded machine (CI runs packages side by side) can delay
	// a renewal past its deadline so that the Lease changes hands while a mount becomes Ready;
	// then both replicas may write, rightly. So each attempt counts the writes one mount's
	// Ready took and is judged only when the Lease kept its holder throughout.
	var leader, follower *framework.Process
	for attempt := 1; leader == nil; attempt++ {
		holder, transitions := lease(t)
		w0, w1 := writes(replicas[0]), writes(replicas[1])
		name := fmt.Sprintf("replica-1-%d", attempt)
		if _, err := mountsClient(t, client(replicas[0])).MountsV1alpha1().Mounts().Create(context.Background(), urlMountOf(name, "remote-kubeconfig"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitReady(replicas[1], name)
		d0, d1 := writes(replicas[0])-w0, writes(replicas[1])-w1
		if h, tr := lease(t); h != holder || tr != transitions {
			t.Logf("attempt %d: the Lease changed hands (%s, %d transitions -> %s, %d) while %s became Ready; writes %d and %d", attempt, holder, transitions, h, tr, name, d0, d1)
			if attempt == 3 {
				t.Fatal("the Lease changed hands in each of 3 attempts: leader election cannot keep a holder here")
			}
			continue
		}
		if (d0 == 0) == (d1 == 0) {
			t.Fatalf("%s Ready under one Lease holder (%s): replica 0 wrote %d statuses, replica 1 %d; exactly one should write", name, holder, d0, d1)
		}
		leader, follower = replicas[0], replicas[1]
		if d1 > 0 {
			leader, follower = follower, leader
		}
		t.Logf("leader wrote %d statuses for %s, follower %d", max(d0, d1), name, min(d0, d1))
		mountName = name
	}

	// A mount used through both replicas and deleted through one: its metric series go on
	// both, on the other one through its informer.
	rita := proxyUser(t, "rita")
	series := func(p *framework.Process) []string {
		t.Helper()
		s, err := framework.MetricSeries(client(p), `mount="`+mountName+`"`)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i, p := range replicas {
		direct := rest.CopyConfig(rita)
		direct.Host, direct.CAData = p.URL+proxyPath(mountName), p.CAData
		c, err := kubernetes.NewForConfig(direct)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Discovery().ServerVersion(); err != nil {
			t.Fatalf("GET /version through replica %d: %v", i, err)
		}
		if len(series(p)) == 0 {
			t.Fatalf("replica %d has no series of the mount it proxied", i)
		}
	}
	if err := mountsClient(t, client(replicas[0])).MountsV1alpha1().Mounts().Delete(context.Background(), mountName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, p := range replicas {
		eventually(t, fmt.Sprintf("no series of the deleted mount on replica %d", i), func() error {
			if s := series(p); len(s) > 0 {
				return fmt.Errorf("%d series, e.g. %s", len(s), s[0])
			}
			return nil
		})
	}

	// The leader dies without releasing its Lease; the follower takes over when it expires.
	if err := leader.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.Exited()
	start := time.Now()
	if _, err := mountsClient(t, client(follower)).MountsV1alpha1().Mounts().Create(context.Background(), urlMountOf("replica-2", "remote-kubeconfig"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(follower, "replica-2")
	t.Logf("follower took over and made replica-2 Ready %v after the leader was killed", time.Since(start).Round(time.Millisecond))
	if writes(follower) == 0 {
		t.Error("the follower wrote nothing after the leader died")
	}
}
