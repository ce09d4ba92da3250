package integration

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// requestTimeout is the server's --request-timeout in TestTunnel.
const requestTimeout = 4 * time.Second

// until polls cond, failing the test after two minutes; the tests assert outcomes, not how
// long they took.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
	}
}

// proxyGet sends a GET through the mount's proxy and returns the code, Retry-After and body.
func proxyGet(t *testing.T, cfg *rest.Config, mount, path string) (int, string, string) {
	t.Helper()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, cfg.Host+"/apis/mounts.kcp.io/v1alpha1/mounts/"+mount+"/proxy"+path, nil)
	resp, err := (&http.Client{Transport: rt, Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(body)
}

// TestTunnel: a standalone mount-apiserver reaches a real kube-apiserver only through a
// mount-agent process (the mount's Secret names the target, spec.tunnel says how it is
// reached; the netns tests show that the server cannot dial it, this one that everything goes
// through the tunnel). Without an agent, requests get 503 naming the mount;
// an agent without the right to attach to the mount is refused, also an agent of another
// mount; with the agent, kubectl get, list and watch work through the mount, and the mount
// says which replica holds the agent; a killed agent turns requests into 503 and a restarted
// one serves again; deleting the Mount closes the session.
func TestTunnel(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	target, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Stop)
	framework.BuildAgent(t)
	s := framework.StartInProcess(t, "", func(o *options.Options) {
		o.StatusProbeInterval = time.Second
		o.Tunnel.ReplicaName = "replica-1"
		o.Tunnel.AuthorizationInterval = time.Second
		// A session is long-running: it outlives the request timeout (checked below).
		o.ServerRun.RequestTimeout = requestTimeout
	})
	core, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	mounts := s.Client.MountsV1alpha1().Mounts()

	// On the target: the mount's credentials may impersonate; the hub's admin (impersonated
	// as itself) may do everything.
	lender, err := target.UserConfig("mount-lender")
	if err != nil {
		t.Fatal(err)
	}
	leakGrant(ctx, t, target.Client, "impersonator", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
	}, rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "mount-lender"})
	leakMust(t, leakErr(target.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "hub-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "mount-admin"}},
	}, metav1.CreateOptions{})))
	kubeconfig, err := framework.KubeconfigBytes(lender)
	if err != nil {
		t.Fatal(err)
	}
	leakMust(t, leakErr(core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{})))
	for _, name := range []string{"edge", "other"} {
		m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MountSpec{
			Ref:    v1alpha1.ObjectReference{Namespace: "clusters", Name: "edge"},
			Tunnel: &v1alpha1.MountTunnel{},
		}}
		if _, err := mounts.Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	targetAddr := strings.TrimPrefix(target.URL, "https://")

	// No agent: 503 naming the mount, without Retry-After (client-go obeys it ten times).
	code, retry, body := proxyGet(t, s.Config, "edge", "/api/v1")
	if code != http.StatusServiceUnavailable || retry != "" || !strings.Contains(body, `mount \"edge\"`) || !strings.Contains(body, "no agent") {
		t.Fatalf("without an agent: %d Retry-After=%q %s", code, retry, body)
	}

	// Hub credentials of agents: one of edge, one of nobody (a viewer).
	serverPKI, err := pki.Load(filepath.Join(s.RootDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	hubKubeconfig := func(name string, groups ...string) string {
		data, err := serverPKI.UserKubeconfig(s.URL, name, groups, true)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), name+".kubeconfig")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	edgeAgent := hubKubeconfig("edge-agent", authorization.AgentGroupPrefix+"edge")
	viewer := hubKubeconfig("viewer", authorization.ViewersGroup)

	// Refused: a viewer for edge, the agent of edge for other.
	refused := framework.StartAgent(t, viewer, "edge", targetAddr)
	wrongMount := framework.StartAgent(t, edgeAgent, "other", targetAddr)
	until(t, "the refusals", func() bool {
		return strings.Contains(refused.Log(), "refused the attach: 403") && strings.Contains(wrongMount.Log(), "refused the attach: 403")
	})
	if code, _, _ := proxyGet(t, s.Config, "edge", "/api/v1"); code != http.StatusServiceUnavailable {
		t.Fatalf("edge with only a refused agent: %d", code)
	}
	refused.Kill()
	wrongMount.Kill()

	// The agent of edge: kubectl get, list and watch through the mount.
	agent := framework.StartAgent(t, edgeAgent, "edge", targetAddr)
	until(t, "the agent's session", agent.Ready)
	attached := time.Now()
	proxied := rest.CopyConfig(s.Config)
	proxied.Host = s.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/edge/proxy"
	out := mustKubectl(t, s, "--server", proxied.Host, "get", "namespaces", "-o", "name")
	if !strings.Contains(out, "namespace/kube-system") {
		t.Fatalf("kubectl get namespaces through the tunnel: %s", out)
	}
	remote, err := kubernetes.NewForConfig(proxied)
	if err != nil {
		t.Fatal(err)
	}
	w, err := remote.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=through-tunnel"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "through-tunnel"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ns, ok := ev.Object.(*corev1.Namespace); ev.Type != watch.Added || !ok || ns.Name != "through-tunnel" {
			t.Fatalf("watch through the tunnel: %s %#v", ev.Type, ev.Object)
		}
	case <-time.After(time.Minute):
		t.Fatal("no watch event through the tunnel")
	}
	w.Stop()
	// The namespace is on the target, created under the caller's name.
	if ns, err := target.Client.CoreV1().Namespaces().Get(ctx, "through-tunnel", metav1.GetOptions{}); err != nil {
		t.Fatalf("the namespace is not on the target: %v", err)
	} else if ns.Name != "through-tunnel" {
		t.Fatalf("namespace %q", ns.Name)
	}

	// Upgrades and streams use the same tunnel: kubectl exec (SPDY or WebSocket through the
	// upgrade path) and logs -f.
	kubelet, err := framework.StartKubelet(ctx, target, "tunnel-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "default", "app"); err != nil {
		t.Fatal(err)
	}
	if out := mustKubectl(t, s, "--server", proxied.Host, "exec", "-n", "default", "app", "--", "echo", "through the tunnel"); out != "through the tunnel\n" {
		t.Errorf("kubectl exec through the tunnel: %q", out)
	}
	logsCtx, cancelLogs := context.WithTimeout(ctx, time.Minute)
	logs := exec.CommandContext(logsCtx, "kubectl", "--kubeconfig", s.Kubeconfig, "--server", proxied.Host, "logs", "-f", "-n", "default", "app")
	logsOut, err := logs.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(logsOut).ReadString('\n')
	if err != nil || !strings.Contains(line, "log line") {
		t.Errorf("kubectl logs -f through the tunnel: %q %v", line, err)
	}
	cancelLogs()
	_ = logs.Wait()

	// The mount says who holds the agent, and is Ready.
	m := waitForMount(ctx, t, mounts, "edge", func(m *v1alpha1.Mount) bool {
		c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionAgentConnected)
		return c != nil && c.Status == metav1.ConditionTrue && m.Status.Phase == v1alpha1.MountPhaseReady
	})
	if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionAgentConnected); !strings.Contains(c.Message, `"replica-1"`) {
		t.Errorf("AgentConnected: %+v", c)
	}
	if other, err := mounts.Get(ctx, "other", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if other.Status.Phase == v1alpha1.MountPhaseReady {
		t.Errorf("mount other is Ready without an agent")
	}

	// Still the first session, past the request timeout: attach is long-running.
	time.Sleep(time.Until(attached.Add(2 * requestTimeout)))
	if n := agent.Metric(t, `mount_tunnel_attaches_total{mount="edge"}`); n != "1" {
		t.Errorf("sessions of the agent after twice the request timeout: %s, want 1", n)
	}
	if code, _, body := proxyGet(t, s.Config, "edge", "/api/v1"); code != http.StatusOK {
		t.Fatalf("after the request timeout: %d %s", code, body)
	}

	// Killed: 503 (once the server sees the connection gone); restarted: works again.
	agent.Kill()
	until(t, "503 after the agent was killed", func() bool {
		code, retry, _ := proxyGet(t, s.Config, "edge", "/api/v1")
		return code == http.StatusServiceUnavailable && retry == ""
	})
	waitForMount(ctx, t, mounts, "edge", func(m *v1alpha1.Mount) bool {
		return meta.IsStatusConditionFalse(m.Status.Conditions, v1alpha1.ConditionAgentConnected) && m.Status.Phase != v1alpha1.MountPhaseReady
	})
	// An agent whose target is down: 502, the session lives on.
	closedPort, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	broken := framework.StartAgent(t, edgeAgent, "edge", "127.0.0.1:"+strconv.Itoa(closedPort))
	until(t, "the session of the agent whose target is down", broken.Ready)
	if code, _, body := proxyGet(t, s.Config, "edge", "/api/v1"); code != http.StatusBadGateway || !strings.Contains(body, `"kind":"Status"`) {
		t.Fatalf("target down behind the agent: %d %s", code, body)
	}
	if !broken.Ready() {
		t.Fatal("a failed dial ended the agent's session")
	}
	broken.Kill()

	agent = framework.StartAgent(t, edgeAgent, "edge", targetAddr)
	until(t, "the restarted agent's session", agent.Ready)
	if code, _, body := proxyGet(t, s.Config, "edge", "/api/v1"); code != http.StatusOK {
		t.Fatalf("after the restart: %d %s", code, body)
	}

	// Deleted: the session closes, and the agent cannot attach again.
	if err := mounts.Delete(ctx, "edge", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, "the session to close", func() bool { return !agent.Ready() })
	until(t, "the agent to be refused", func() bool { return strings.Contains(agent.Log(), "refused the attach: 404") })
	if _, err := mounts.Get(ctx, "edge", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
	// SIGTERM: the agent stops cleanly.
	if err := agent.Terminate(); err != nil {
		t.Fatal(err)
	}
	if !agent.Cmd.ProcessState.Success() || !strings.Contains(agent.Log(), "Agent stopped") {
		t.Errorf("the agent after SIGTERM: %v", agent.Cmd.ProcessState)
	}
	// No credential in anything the agent printed.
	for _, needle := range []string{string(lender.KeyData), string(lender.CertData)} {
		if needle != "" && strings.Contains(agent.Log(), needle) {
			t.Error("the agent's log holds a credential of the mount")
		}
	}
}
