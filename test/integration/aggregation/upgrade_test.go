package aggregation

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestProxyUpgrades runs kubectl exec, logs -f and port-forward through the host aggregator and
// the mount's proxy against the remote kube-apiserver, whose pod runs on a minimal kubelet
// built on Kubernetes' own streaming server (framework.StartKubelet).
func TestProxyUpgrades(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	kubelet, err := framework.StartKubelet(ctx, remote, "node-upgrades")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	// The namespace stays for later runs in this process (go test -count=2): no namespace
	// controller runs to delete it. The pod goes at once, with no kubelet to wait for.
	if _, err := remote.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "upgrades"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := kubelet.CreatePod(ctx, "upgrades", "pod"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = remote.Client.CoreV1().Pods("upgrades").Delete(context.Background(), "pod", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	remoteBind(t, "jack", "cluster-admin")
	kubeconfig, err := kube.WriteKubeconfig(proxyUser(t, "jack"), "jack")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectlCmd := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kubeconfig, "--server", kube.URL + proxyPath("remote"), "-n", "upgrades"}, args...)...)
	}

	t.Run("exec", func(t *testing.T) {
		out, err := kubectlCmd(ctx, "exec", "pod", "--", "echo", "hello through the mount").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "hello through the mount" {
			t.Errorf("exec: %v %q", err, out)
		}
	})
	t.Run("exec with stdin and exit code", func(t *testing.T) {
		cmd := kubectlCmd(ctx, "exec", "-i", "pod", "--", "sh", "-c", "cat; exit 3")
		cmd.Stdin = strings.NewReader("piped through\n")
		out, err := cmd.Output()
		var exitErr *exec.ExitError
		if string(out) != "piped through\n" || !errorsAs(err, &exitErr) || exitErr.ExitCode() != 3 {
			t.Errorf("exec -i: %v %q, want the input back and exit code 3", err, out)
		}
	})
	t.Run("logs -f", func(t *testing.T) {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := kubectlCmd(lctx, "logs", "-f", "pod")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = cmd.Wait() }()
		lines := bufio.NewScanner(stdout)
		for i := range 4 {
			if !lines.Scan() {
				t.Fatalf("logs -f ended after %d lines: %v", i, lines.Err())
			}
		}
	})
	t.Run("port-forward", func(t *testing.T) {
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "forwarded %s", r.URL.Path)
		}))
		defer backend.Close()
		remotePort := strings.TrimPrefix(backend.URL, "http://127.0.0.1:")
		localPort, err := framework.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := kubectlCmd(pctx, "port-forward", "--address", "127.0.0.1", "pod/pod", fmt.Sprintf("%d:%s", localPort, remotePort))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = cmd.Wait() }()
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() || !strings.Contains(lines.Text(), "Forwarding from") {
			t.Fatalf("port-forward printed %q; stderr %q", lines.Text(), stderr.String())
		}
		go func() { _, _ = io.Copy(io.Discard, stdout) }()
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
		for i := range 3 {
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/req-%d", localPort, i))
			if err != nil {
				t.Fatalf("request %d through the forward: %v; stderr %q", i, err, stderr.String())
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != fmt.Sprintf("forwarded /req-%d", i) {
				t.Errorf("request %d: %q", i, body)
			}
		}
	})
	t.Run("upgrades need create on mounts/proxy", func(t *testing.T) {
		// kate may get mounts/proxy but not create: reads work, exec does not.
		_, err := kube.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "mounts-proxy-get"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kube.Client.RbacV1().ClusterRoles().Delete(context.Background(), "mounts-proxy-get", metav1.DeleteOptions{})
		})
		bind(t, "kate", "mounts-proxy-get")
		remoteBind(t, "kate", "cluster-admin")
		kateConfig, err := kube.WriteKubeconfig(user(t, "kate"), "kate")
		if err != nil {
			t.Fatal(err)
		}
		kate := func(args ...string) (string, error) {
			out, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kateConfig, "--server", kube.URL + proxyPath("remote"), "-n", "upgrades"}, args...)...).CombinedOutput()
			return string(out), err
		}
		eventually(t, "kate reads through the proxy", func() error {
			out, err := kate("get", "pods", "-o", "name")
			if err != nil || !strings.Contains(out, "pod/pod") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		// Through the host, kubectl's exec is refused before it reaches mount-apiserver.
		out, err := kate("exec", "pod", "--", "echo", "should not run")
		if err == nil || strings.Contains(out, "should not run") || !strings.Contains(out, `cannot create resource "mounts/proxy"`) {
			t.Errorf("exec with only get on mounts/proxy: %v\n%q", err, out)
		}

		// Directly at mount-apiserver, a WebSocket upgrade is a GET, which kate may do:
		// mount-apiserver itself must ask for "create" as well.
		direct := agg.DirectConfig(user(t, "kate"))
		tlsConfig, err := rest.TLSConfigFor(direct)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodGet, direct.Host+proxyPath("remote")+"/api/v1/namespaces/upgrades/pods/pod/exec?command=echo&stdout=true", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		req.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
		resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `also need verb \"create\" on mounts/proxy`) {
			t.Errorf("direct WebSocket exec with only get: %d %s", resp.StatusCode, body)
		}
	})
}

func errorsAs(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}
