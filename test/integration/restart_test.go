package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	"github.com/kcp-dev/mount-apiserver/pkg/storagevalue"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestBinaryRestartKeepsData runs the real binary, writes Mounts, stops it with SIGTERM and
// starts it again on the same root directory: the process exits 0, and every Mount, every
// status and the admin credentials survive.
func TestBinaryRestartKeepsData(t *testing.T) {
	bin := framework.BuildBinary(t)
	root := t.TempDir()
	ctx := context.Background()
	// The binary sets GOGC=75 unless GOGC is set; the test checks both.
	if v, ok := os.LookupEnv("GOGC"); ok {
		_ = os.Unsetenv("GOGC")
		t.Cleanup(func() { _ = os.Setenv("GOGC", v) })
	}

	// The test writes a status itself and checks it survives: no controller rewrites it.
	first := bin.Start(t, root, "--status-controller=false")
	if gogc, err := framework.Metric(first.Config, "go_gc_gogc_percent"); err != nil || gogc != 75 {
		t.Errorf("without GOGC: go_gc_gogc_percent %d (%v), want 75", gogc, err)
	}
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

	t.Setenv("GOGC", "100")
	second := bin.Start(t, root, "--status-controller=false")
	if gogc, err := framework.Metric(second.Config, "go_gc_gogc_percent"); err != nil || gogc != 100 {
		t.Errorf("with GOGC=100: go_gc_gogc_percent %d (%v), want 100", gogc, err)
	}
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
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Options{Directory: t.TempDir(), LogLevel: "warn"})
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

	// Values are compressed in etcd and decompress to the Mount's JSON.
	key := "/mount-apiserver/mounts.kcp.io/mounts/_default/prod"
	raw, err := client.Get(ctx, key)
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("reading %s from etcd: %v", key, err)
	}
	stored := raw.Kvs[0].Value
	plain, _, err := storagevalue.Compressing(nil).TransformFromStorage(ctx, stored, value.DefaultContext(key))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(stored, []byte(storagevalue.Prefix)) || !bytes.Contains(plain, []byte(`"kind":"Mount"`)) || len(stored) >= len(plain) {
		t.Errorf("stored value (%d bytes) is not the compressed Mount (%d bytes): %q", len(stored), len(plain), stored)
	}

	// A value written before compression (plain JSON) is read as it is, and compressed when
	// the Mount is next written.
	legacy := bytes.Replace(plain, []byte(`"name":"prod"`), []byte(`"name":"legacy"`), 1)
	legacy = bytes.Replace(legacy, []byte(`"uid":"`), []byte(`"uid":"1`), 1)
	legacyKey := "/mount-apiserver/mounts.kcp.io/mounts/_default/legacy"
	if _, err := client.Put(ctx, legacyKey, string(legacy)); err != nil {
		t.Fatal(err)
	}
	mounts := s.Client.MountsV1alpha1().Mounts()
	var m *v1alpha1.Mount
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		m, err = mounts.Get(ctx, "legacy", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the plain JSON Mount is not readable: %v", err)
	}
	if m.Spec.Ref.Name != "prod-kubeconfig" {
		t.Errorf("plain JSON Mount read as %+v", m.Spec)
	}
	// A patch, as clients write: the status controller may have written the Mount meanwhile.
	if _, err := mounts.Patch(ctx, "legacy", types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if raw, err = client.Get(ctx, legacyKey); err != nil || len(raw.Kvs) != 1 || !bytes.HasPrefix(raw.Kvs[0].Value, []byte(storagevalue.Prefix)) {
		t.Errorf("the updated Mount is not stored compressed: %v %q", err, raw.Kvs)
	}
}
