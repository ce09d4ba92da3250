package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server"
	"github.com/kcp-dev/mount-apiserver/pkg/lockfile"
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
	// The standalone server keeps the Secret itself.
	p := framework.BuildBinary(t).Start(t, t.TempDir())
	core, err := kubernetes.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "target"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := urlMount("target")
	m.Spec.Ref.Name = "target"
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

// TestGoRunStopsOnCtrlC runs the server as the README's first command does and presses
// Ctrl-C, which signals the terminal's foreground process group: go run and the server it
// started. The server shuts down cleanly and releases its root directory. (go run itself exits
// with status 1 after an interrupt, whatever the server's status.)
func TestGoRunStopsOnCtrlC(t *testing.T) {
	root := t.TempDir()
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./cmd/mount-apiserver", "--root-directory", root, "--secure-port", strconv.Itoa(port), "--status-controller=false")
	cmd.Dir = framework.RepoRoot()
	// A process group of its own, like a shell's job.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath := filepath.Join(t.TempDir(), "go-run.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
		if out, err := os.ReadFile(logPath); err == nil && t.Failed() {
			t.Logf("go run output:\n%s", out)
		}
	})

	// Ready once /readyz answers over TLS verified against the generated CA; go run compiles
	// first.
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("go run exited before the server was ready: %v", err)
		default:
		}
		ca, err := os.ReadFile(filepath.Join(root, "pki", "ca.crt"))
		if err != nil {
			return false, nil //nolint:nilerr // not written yet
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := client.Get(url)
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(shutdownBound):
		t.Fatalf("go run did not exit within %v of Ctrl-C", shutdownBound)
	}
	// The server, go run's child, is gone once its lock is free.
	var lock *lockfile.Lock
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, shutdownBound, true, func(context.Context) (bool, error) {
		lock, err = lockfile.Acquire(filepath.Join(root, server.LockFile))
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the server still runs %v after Ctrl-C: %v", shutdownBound, err)
	}
	t.Logf("Ctrl-C to the server's exit: %v", time.Since(start).Round(time.Millisecond))
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	if out, _ := os.ReadFile(logPath); !strings.Contains(string(out), `"Server stopped"`) {
		t.Errorf("the server did not shut down cleanly:\n%s", out)
	}
}
