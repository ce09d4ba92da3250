package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestBinaryRestartKeepsData runs the real binary, writes Mounts, stops it with SIGTERM and
// starts it again on the same root directory: the process exits 0, and every Mount, every
// status and the admin credentials survive.
func TestBinaryRestartKeepsData(t *testing.T) {
	bin := framework.BuildBinary(t)
	root := t.TempDir()
	ctx := context.Background()

	// The test writes a status itself and checks it survives: no controller rewrites it.
	first := bin.Start(t, root, "--status-controller=false")
	const n = 50
	for i := range n {
		m := urlMount(fmt.Sprintf("m-%03d", i))
		created, err := first.Client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i == n-1 {
			// The last write before the signal must survive too.
			created.Status.Phase = v1alpha1.MountPhaseConnecting
			if _, err := first.Client.MountsV1alpha1().Mounts().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	adminCert, err := os.ReadFile(filepath.Join(root, "pki", "admin.crt"))
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := first.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Exited():
	case <-time.After(time.Minute):
		t.Fatal("mount-apiserver did not exit within a minute of SIGTERM")
	}
	if err := first.ExitErr(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	t.Logf("clean shutdown took %v", time.Since(start).Round(time.Millisecond))

	second := bin.Start(t, root, "--status-controller=false")
	list, err := second.Client.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n {
		t.Fatalf("after restart: %d mounts, want %d", len(list.Items), n)
	}
	last, err := second.Client.MountsV1alpha1().Mounts().Get(ctx, fmt.Sprintf("m-%03d", n-1), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if last.Status.Phase != v1alpha1.MountPhaseConnecting {
		t.Errorf("status lost across restart: %+v", last.Status)
	}
	if again, _ := os.ReadFile(filepath.Join(root, "pki", "admin.crt")); string(again) != string(adminCert) {
		t.Error("admin certificate changed across a restart; existing kubeconfigs would break")
	}
}

// TestExternalEtcd points the server at a separate etcd with --etcd-servers: no embedded etcd
// is started, and Mounts land in that etcd under <prefix>/mounts.kcp.io/mounts/<cluster>/<name>,
// the layout kcp mode shares.
func TestExternalEtcd(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Options{Directory: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)

	root := t.TempDir()
	s := framework.StartInProcess(t, root, func(o *options.Options) {
		o.Etcd.StorageConfig.Transport.ServerList = []string{etcd.ClientURL}
	})
	if _, err := s.Client.MountsV1alpha1().Mounts().Create(context.Background(), urlMount("prod"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "etcd")); !os.IsNotExist(err) {
		t.Errorf("embedded etcd data directory exists with --etcd-servers: %v", err)
	}

	client, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	resp, err := client.Get(context.Background(), "/mount-apiserver/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if len(keys) != 1 || keys[0] != "/mount-apiserver/mounts.kcp.io/mounts/_default/prod" {
		t.Errorf("etcd keys: %v", keys)
	}
}
