package integration

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestSIGTERMDuringLongRunning stops the binary, started with a shutdown delay, while the real
// kubectl follows logs, runs an exec session and watches namespaces through a mount of a real
// kube-apiserver (with the framework's kubelet and a pod), and while a plain proxied request
// waits on a slow target. /readyz fails before anything else changes, the plain request
// finishes with its answer, every kubectl ends, and the process exits 0 within the delay plus
// its termination bound.
func TestSIGTERMDuringLongRunning(t *testing.T) {
	ctx := context.Background()
	const delay = 3 * time.Second
	// The slow target answers after the delay has passed, so the request is still in flight
	// when the server stops listening.
	const slowFor = delay + 2*time.Second

	kube, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	kubelet, err := framework.StartKubelet(ctx, kube, "sigterm-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "apps", "app"); err != nil {
		t.Fatal(err)
	}
	slow, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Close)
	slow.Handler = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(slowFor):
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success","message":"slow"}`)
	}

	p := framework.BuildBinary(t).Start(t, t.TempDir(), "--status-controller=false", "--shutdown-delay-duration="+delay.String())
	core, err := kubernetes.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	targetKubeconfig, err := framework.KubeconfigBytes(kube.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	slowKubeconfig, err := slow.Kubeconfig("slow-token")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"target": targetKubeconfig, "slow": slowKubeconfig} {
		if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"kubeconfig": data}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		m := urlMount(name)
		m.Spec.Ref.Name = name
		m.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
		if _, err := p.Client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The real kubectl through the mount: logs -f, exec, and a watch, each started and seen
	// streaming before the signal.
	proxied := rest.CopyConfig(p.Config)
	proxied.Host += "/apis/mounts.kcp.io/v1alpha1/mounts/target/proxy"
	kc, err := framework.KubeconfigBytes(proxied)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	type stream struct {
		name  string
		cmd   *exec.Cmd
		ended chan error
		at    time.Time
	}
	var streams []*stream
	for _, s := range []struct {
		name, first string
		args        []string
	}{
		{"logs -f", "log line 1", []string{"logs", "-f", "-n", "apps", "app"}},
		{"exec", "started", []string{"exec", "-n", "apps", "app", "--", "sh", "-c", "echo started; exec sleep 120"}},
		{"get --watch", "Active", []string{"get", "namespaces", "--watch", "--no-headers"}},
	} {
		cmd := exec.Command(realKubectl(t), append([]string{"--kubeconfig", kubeconfig}, s.args...)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		st := &stream{name: s.name, cmd: cmd, ended: make(chan error, 1)}
		streams = append(streams, st)
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		lines := bufio.NewScanner(out)
		if !lines.Scan() || !strings.Contains(lines.Text(), s.first) {
			t.Fatalf("kubectl %s: first line %q, want %q; stderr %s", s.name, lines.Text(), s.first, stderr.String())
		}
		go func() {
			for lines.Scan() {
			}
			err := cmd.Wait()
			st.at = time.Now()
			if err != nil && stderr.Len() > 0 {
				err = errors.Join(err, errors.New(strings.TrimSpace(stderr.String())))
			}
			st.ended <- err
		}()
	}

	// A plain request through the slow mount, in flight when the signal comes.
	client, err := rest.HTTPClientFor(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		body string
		err  error
		at   time.Time
	}
	plain := make(chan answer, 1)
	go func() {
		resp, err := client.Get(p.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/slow/proxy/api/v1/namespaces/default")
		if err != nil {
			plain <- answer{err: err, at: time.Now()}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		plain <- answer{code: resp.StatusCode, body: string(body), err: err, at: time.Now()}
	}()
	for len(slow.Requests()) == 0 {
		time.Sleep(20 * time.Millisecond)
	}

	// /readyz as a load balancer polls it, from the signal on.
	var mu sync.Mutex
	var readyzFailed, readyzGone time.Time
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for {
			select {
			case <-p.Exited():
				return
			default:
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			code, _, err := readyz(rctx, client, p.URL)
			cancel()
			now := time.Now()
			mu.Lock()
			if err == nil && code != http.StatusOK && readyzFailed.IsZero() {
				readyzFailed = now
			}
			if err != nil && readyzGone.IsZero() {
				readyzGone = now
			}
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()

	start := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	bound := delay + slowFor + shutdownBound
	select {
	case <-p.Exited():
	case <-time.After(bound):
		t.Fatalf("mount-apiserver did not exit within %v of SIGTERM", bound)
	}
	exited := time.Since(start)
	<-pollDone
	if err := p.ExitErr(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if log := readLog(t, p); strings.Contains(log, "Failed to shutdown server") {
		t.Errorf("the HTTP server did not shut down cleanly:\n%s", log)
	}

	mu.Lock()
	if readyzFailed.IsZero() {
		t.Errorf("/readyz never answered non-200 between SIGTERM and exit (connection refused from %v)", readyzGone.Sub(start))
	} else {
		t.Logf("/readyz failed %v after SIGTERM, stopped answering %v after", readyzFailed.Sub(start).Round(time.Millisecond), readyzGone.Sub(start).Round(time.Millisecond))
	}
	mu.Unlock()

	a := <-plain
	if a.err != nil || a.code != http.StatusOK || !strings.Contains(a.body, `"slow"`) {
		t.Errorf("the plain request in flight: %d %q %v, want the slow target's answer", a.code, a.body, a.err)
	}
	t.Logf("plain request answered %d %v after SIGTERM", a.code, a.at.Sub(start).Round(time.Millisecond))
	for _, s := range streams {
		select {
		case err := <-s.ended:
			t.Logf("kubectl %s ended %v after SIGTERM: %v", s.name, s.at.Sub(start).Round(time.Millisecond), err)
			// A streamed response ends as kube-apiserver ends its own at shutdown: the
			// body ends, and kubectl exits 0. An exec session's WebSocket is a tunnel of
			// bytes the proxy cannot close with a close frame of its own; it only has to end.
			if s.name != "exec" && err != nil {
				t.Errorf("kubectl %s did not end cleanly: %v", s.name, err)
			}
			// Ended by the server, not by a timeout of kubectl's: an exec's tunnel ends
			// when the process's connections close, a moment after the exit.
			if !s.at.Before(start.Add(exited + 5*time.Second)) {
				t.Errorf("kubectl %s ended only %v after the server's exit", s.name, s.at.Sub(start)-exited)
			}
		case <-time.After(shutdownBound):
			t.Errorf("kubectl %s still runs %v after the server exited", s.name, shutdownBound)
		}
	}
	t.Logf("SIGTERM to exit: %v (shutdown delay %v, the slow request %v)", exited.Round(time.Millisecond), delay, slowFor)
}
