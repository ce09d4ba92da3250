package aggregation

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestStatusReplicas runs two mount-apiserver processes against one host and one etcd: only
// the one holding the Lease writes status; killed, the other takes over.
func TestStatusReplicas(t *testing.T) {
	setupProxy(t)
	_, ctx := ktesting.NewTestContext(t)
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Options{Directory: t.TempDir()})
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

	if _, err := mountsClient(t, client(replicas[0])).MountsV1alpha1().Mounts().Create(context.Background(), urlMountOf("replica-1", "remote-kubeconfig"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(replicas[1], "replica-1")
	w0, w1 := writes(replicas[0]), writes(replicas[1])
	if (w0 == 0) == (w1 == 0) {
		t.Fatalf("status writes: replica 0 %d, replica 1 %d; exactly one should write", w0, w1)
	}
	leader, follower := replicas[0], replicas[1]
	if w1 > 0 {
		leader, follower = follower, leader
	}
	t.Logf("leader wrote %d statuses, follower %d", max(w0, w1), min(w0, w1))

	// A mount used through both replicas and deleted through one: its metric series go on
	// both, on the other one through its informer.
	rita := proxyUser(t, "rita")
	series := func(p *framework.Process) []string {
		t.Helper()
		s, err := framework.MetricSeries(client(p), `mount="replica-1"`)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i, p := range replicas {
		direct := rest.CopyConfig(rita)
		direct.Host, direct.CAData = p.URL+proxyPath("replica-1"), p.CAData
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
	if err := mountsClient(t, client(replicas[0])).MountsV1alpha1().Mounts().Delete(context.Background(), "replica-1", metav1.DeleteOptions{}); err != nil {
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
