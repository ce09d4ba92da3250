package integration

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// shutdownBound is how long a server may take from SIGTERM to exit with nothing in flight but
// long-running requests: the watch grace period (5 s) ends watches at once, and proxied
// streams end with the rest.
const shutdownBound = 10 * time.Second

// stopAndTime sends SIGTERM and returns how long the process took to exit, which must be 0.
func stopAndTime(t *testing.T, p *framework.Process) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(shutdownBound):
		t.Fatalf("mount-apiserver did not exit within %v of SIGTERM", shutdownBound)
	}
	took := time.Since(start)
	if err := p.ExitErr(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if log := readLog(t, p); strings.Contains(log, "Failed to shutdown server") {
		t.Errorf("the HTTP server did not shut down cleanly:\n%s", log)
	}
	return took
}

// TestShutdownWithWatchOpen stops the binary while the real kubectl watches mounts.
func TestShutdownWithWatchOpen(t *testing.T) {
	// Without the status controller, whose informer's watch would end with it, the only watch
	// is kubectl's.
	p := framework.BuildBinary(t).Start(t, t.TempDir(), "--status-controller=false")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watch := exec.CommandContext(ctx, realKubectl(t), "--kubeconfig", p.Kubeconfig, "get", "mounts", "--watch")
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()
	waitForWatch(t, p.Server)

	t.Logf("SIGTERM to exit with a watch open: %v", stopAndTime(t, p).Round(time.Millisecond))
}

// TestShutdownWithProxiedWatchOpen stops the binary while a watch on a real kube-apiserver
// runs through a mount's proxy.
func TestShutdownWithProxiedWatchOpen(t *testing.T) {
	ctx := context.Background()
	kube, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	kubeconfig, err := framework.KubeconfigBytes(kube.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "target"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}
	if _, err := kube.Client.CoreV1().Secrets("clusters").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	p := framework.BuildBinary(t).Start(t, t.TempDir(), "--secrets-kubeconfig", kube.AdminKubeconfig)
	m := urlMount("target")
	m.Spec.Ref.Name = "target"
	// The standalone admin is in system:masters, which is never impersonated on a target.
	m.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
	if _, err := p.Client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	proxied := rest.CopyConfig(p.Config)
	proxied.Host += "/apis/mounts.kcp.io/v1alpha1/mounts/target/proxy"
	client, err := rest.HTTPClientFor(proxied)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, proxied.Host+"/api/v1/namespaces?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("proxied watch: %d %s", resp.StatusCode, body)
	}
	events := bufio.NewScanner(resp.Body)
	if !events.Scan() || !strings.Contains(events.Text(), `"type":"ADDED"`) {
		t.Fatalf("proxied watch: no first event: %v %q", events.Err(), events.Text())
	}

	t.Logf("SIGTERM to exit with a proxied watch open: %v", stopAndTime(t, p).Round(time.Millisecond))
	for events.Scan() {
	}
	t.Logf("the proxied watch ended: %v", events.Err())
}
