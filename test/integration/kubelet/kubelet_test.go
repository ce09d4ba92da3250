// Package kubelet tests the framework's minimal kubelet behind a real kube-apiserver with the
// real kubectl: exec, attach, logs -f and port-forward.
package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

const (
	nodeName  = "test-node"
	namespace = "kubelet-test"
	podName   = "app"
)

var (
	kube    *framework.KubeAPIServer
	kubelet *framework.Kubelet
	kubectl string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mount-apiserver-kubelet-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := framework.KubeBinDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kubectl = filepath.Join(bin, "kubectl")
	ctx := klog.NewContext(context.Background(), klog.Background())

	start := time.Now()
	if kube, err = framework.StartKubeAPIServer(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer kube.Stop()
	kubeReady := time.Since(start)
	if kubelet, err = framework.StartKubelet(ctx, kube, nodeName); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer kubelet.Stop()
	if err := kubelet.CreatePod(ctx, namespace, podName); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("harness: etcd+kube-apiserver ready in %v, kubelet on port %d with a running pod after %v\n",
		kubeReady.Round(time.Millisecond), kubelet.Port, time.Since(start).Round(time.Millisecond))
	return m.Run()
}

// kubectlCmd returns kubectl with the admin kubeconfig against the test namespace.
// startStreaming starts a kubectl that keeps printing (logs -f, port-forward) and returns its
// output lines and its stderr; the process is killed when the test ends.
func startStreaming(t *testing.T, cmd *exec.Cmd) (*bufio.Scanner, *bytes.Buffer) {
	t.Helper()
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return bufio.NewScanner(out), stderr
}

func kubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kube.AdminKubeconfig, "-n", namespace}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// runKubectl runs kubectl to completion with stdin and returns stdout, stderr and the exit code.
func runKubectl(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := kubectlCmd(ctx, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	start := time.Now()
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		t.Fatalf("kubectl %v: %v", args, err)
	}
	t.Logf("kubectl %s: exit %d after %v", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond))
	return out.String(), errOut.String(), code
}

// lastRequest returns the last kubelet request whose path starts with prefix.
func lastRequest(t *testing.T, prefix string) framework.KubeletRequest {
	t.Helper()
	reqs := kubelet.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if strings.HasPrefix(reqs[i].Path, prefix) {
			r := reqs[i]
			t.Logf("kubelet saw %s %s?%s %s Upgrade=%q Connection=%q X-Stream-Protocol-Version=%q Sec-WebSocket-Protocol=%q client=%q",
				r.Method, r.Path, r.RawQuery, r.Proto, r.Upgrade, r.Connection, r.StreamProtocol, r.WebSocketProtocol, r.ClientCommonName)
			return r
		}
	}
	t.Fatalf("kubelet saw no request for %s", prefix)
	return framework.KubeletRequest{}
}

func TestExecEcho(t *testing.T) {
	stdout, stderr, code := runKubectl(t, "", "exec", podName, "--", "echo", "hello")
	if code != 0 || stdout != "hello\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 0 and hello", code, stdout, stderr)
	}
	r := lastRequest(t, "/exec/"+namespace+"/"+podName+"/main")
	if r.ClientCommonName != framework.KubeletClientCommonName {
		t.Errorf("client %q, want %q", r.ClientCommonName, framework.KubeletClientCommonName)
	}
	if r.Upgrade == "" {
		t.Errorf("exec request to the kubelet was not an upgrade")
	}
}

func TestExecStdin(t *testing.T) {
	in := "first line\nsecond line\n"
	stdout, stderr, code := runKubectl(t, in, "exec", "-i", podName, "--", "cat")
	if code != 0 || stdout != in {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 0 and %q", code, stdout, stderr, in)
	}
}

func TestExecExitCode(t *testing.T) {
	stdout, stderr, code := runKubectl(t, "", "exec", podName, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	if code != 7 {
		t.Fatalf("exit %d, want 7 (stdout %q, stderr %q)", code, stdout, stderr)
	}
	if stdout != "out\n" || !strings.Contains(stderr, "err\n") {
		t.Errorf("stdout %q, stderr %q; want out and err", stdout, stderr)
	}
}

func TestAttach(t *testing.T) {
	in := "attached input\n"
	stdout, stderr, code := runKubectl(t, in, "attach", "-i", podName)
	if code != 0 || !strings.Contains(stdout, in) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 0 and %q", code, stdout, stderr, in)
	}
	lastRequest(t, "/attach/")
}

func TestLogs(t *testing.T) {
	stdout, stderr, code := runKubectl(t, "", "logs", podName)
	if want := "log line 1\nlog line 2\nlog line 3\n"; code != 0 || stdout != want {
		t.Fatalf("exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
}

func TestLogsFollow(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := kubectlCmd(ctx, "logs", "-f", podName)
	start := time.Now()
	lines, stderr := startStreaming(t, cmd)
	for i := 1; i <= 5; i++ {
		if !lines.Scan() {
			t.Fatalf("kubectl logs -f ended after %d lines: %v; stderr %q", i-1, lines.Err(), stderr.String())
		}
		if want := "log line " + strconv.Itoa(i); lines.Text() != want {
			t.Fatalf("line %d is %q, want %q", i, lines.Text(), want)
		}
	}
	t.Logf("kubectl logs -f streamed 5 lines in %v", time.Since(start).Round(time.Millisecond))
	if r := lastRequest(t, "/containerLogs/"); !strings.Contains(r.RawQuery, "follow=true") {
		t.Errorf("containerLogs query %q lacks follow=true", r.RawQuery)
	}

	// Killing kubectl ends the follow at the kubelet too.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	killed := time.Now()
	for kubelet.ActiveLogStreams() != 0 {
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("kubelet still streams logs 30s after kubectl was killed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("kubelet stopped streaming %v after kubectl was killed", time.Since(killed).Round(time.Millisecond))
}

func TestPortForward(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the pod, path %s", r.URL.Path)
	}))
	defer backend.Close()
	remotePort := backend.Listener.Addr().(*net.TCPAddr).Port
	localPort := freePort(t)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := kubectlCmd(ctx, "port-forward", "--address", "127.0.0.1", "pod/"+podName, fmt.Sprintf("%d:%d", localPort, remotePort))
	start := time.Now()
	lines, stderr := startStreaming(t, cmd)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "Forwarding from 127.0.0.1:") {
		t.Fatalf("kubectl port-forward printed %q (%v); stderr %q", lines.Text(), lines.Err(), stderr.String())
	}
	go func() { // drain "Handling connection for ..." lines
		for lines.Scan() {
		}
	}()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	for i := range 3 {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/request-%d", localPort, i))
		if err != nil {
			t.Fatalf("request %d through the forward: %v; kubectl stderr %q", i, err, stderr.String())
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("hello from the pod, path /request-%d", i); err != nil || string(body) != want {
			t.Fatalf("request %d: body %q (%v), want %q", i, body, err, want)
		}
	}
	t.Logf("port-forward: ready and 3 requests in %v", time.Since(start).Round(time.Millisecond))
	lastRequest(t, "/portForward/"+namespace+"/"+podName)
}

// TestKubeletRejectsOtherClients checks that the kubelet only serves kube-apiserver's
// kubelet client certificate.
func TestKubeletRejectsOtherClients(t *testing.T) {
	cfg, err := kube.UserConfig("someone", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/containerLogs/%s/%s/main", kubelet.Port, namespace, podName))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d for another client, want 403", resp.StatusCode)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestStop checks that Stop ends streams in flight: a long exec is killed, and the kubectl
// exec and port-forward clients see their connections end.
func TestStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	kl, err := framework.StartKubelet(ctx, kube, "test-node-stop")
	if err != nil {
		t.Fatal(err)
	}
	defer kl.Stop()
	if err := kl.CreatePod(ctx, namespace, "stop-me"); err != nil {
		t.Fatal(err)
	}
	// Gone at once (no kubelet waits for it), so that the next run in this process
	// (go test -count=2) can create it again.
	t.Cleanup(func() {
		_ = kube.Client.CoreV1().Pods(namespace).Delete(context.Background(), "stop-me", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	marker := filepath.Join(t.TempDir(), "started")
	// The marker holds the exec'd process's pid (sh execs sleep in its own process), so the
	// check below looks at exactly that process, not at others' sleeps on the machine.
	execCmd := kubectlCmd(ctx, "exec", "stop-me", "--", "sh", "-c", "echo $$ > "+marker+".tmp && mv "+marker+".tmp "+marker+"; exec sleep 120")
	if err := execCmd.Start(); err != nil {
		t.Fatal(err)
	}
	execDone := make(chan error, 1)
	go func() { execDone <- execCmd.Wait() }()
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		select {
		case err := <-execDone:
			t.Fatalf("kubectl exec ended early: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	start := time.Now()
	kl.Stop()
	t.Logf("Stop took %v", time.Since(start).Round(time.Millisecond))
	select {
	case err := <-execDone:
		t.Logf("kubectl exec ended after Stop: %v", err)
	case <-time.After(30 * time.Second):
		_ = execCmd.Process.Kill()
		t.Fatal("kubectl exec still running 30s after Stop")
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", kl.Port), time.Second); err == nil {
		c.Close()
		t.Errorf("kubelet port %d still accepts connections after Stop", kl.Port)
	}
	// SIGKILL is delivered at once but takes effect asynchronously; on a loaded machine the
	// process can still be listed for a few milliseconds.
	pid, err := os.ReadFile(marker)
	if err != nil || strings.TrimSpace(string(pid)) == "" {
		t.Fatalf("the exec'd process's pid: %v %q", err, pid)
	}
	proc := "/proc/" + strings.TrimSpace(string(pid))
	deadline := time.Now().Add(5 * time.Second)
	for {
		cmdline, err := os.ReadFile(proc + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), "sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("exec'd process %s still running 5s after Stop", proc)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}
