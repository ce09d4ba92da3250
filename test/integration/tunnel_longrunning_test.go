package integration

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestTunnelLongRunningEndWhenAgentDies: requests that stay open through a tunnel (a watch,
// kubectl logs -f, kubectl exec -i of cat) end when the agent is killed (SIGKILL: its
// connection to the hub is gone): the watch's result channel closes, with at most an ERROR
// event carrying a Status, and both kubectl processes exit; none hangs. A client-go
// RetryWatcher through the same mount survives the agent's death and, once the agent is back,
// delivers what happened on the target meanwhile and afterwards.
func TestTunnelLongRunningEndWhenAgentDies(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	target, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Stop)
	framework.BuildAgent(t)
	s := framework.StartInProcess(t, "", func(o *options.Options) { o.Tunnel.ReplicaName = "replica-1" })
	core, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	lender, err := target.UserConfig("mount-lender")
	if err != nil {
		t.Fatal(err)
	}
	leakGrant(ctx, t, target.Client, "impersonator", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
	}, rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "mount-lender"})
	leakGrant(ctx, t, target.Client, "hub-admin", []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
		rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "mount-admin"})
	kubeconfig, err := framework.KubeconfigBytes(lender)
	if err != nil {
		t.Fatal(err)
	}
	leakMust(t, leakErr(core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{})))
	leakMust(t, leakErr(s.Client.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1alpha1.MountSpec{
		Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: "edge"}, Tunnel: &v1alpha1.MountTunnel{},
	}}, metav1.CreateOptions{})))
	serverPKI, err := pki.Load(filepath.Join(s.RootDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := serverPKI.UserKubeconfig(s.URL, "edge-agent", []string{authorization.AgentGroupPrefix + "edge"}, true)
	if err != nil {
		t.Fatal(err)
	}
	agentKubeconfig := filepath.Join(t.TempDir(), "edge-agent.kubeconfig")
	if err := os.WriteFile(agentKubeconfig, data, 0o600); err != nil {
		t.Fatal(err)
	}
	targetAddr := strings.TrimPrefix(target.URL, "https://")
	agent := framework.StartAgent(t, agentKubeconfig, "edge", targetAddr)
	until(t, "the agent's session", agent.Ready)

	kubelet, err := framework.StartKubelet(ctx, target, "tunnel-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "default", "app"); err != nil {
		t.Fatal(err)
	}
	proxied := rest.CopyConfig(s.Config)
	proxied.Host = s.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/edge/proxy"
	remote, err := kubernetes.NewForConfig(proxied)
	if err != nil {
		t.Fatal(err)
	}
	configMaps := remote.CoreV1().ConfigMaps("default")

	// A plain watch, and a RetryWatcher from the same resourceVersion.
	list, err := configMaps.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := configMaps.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	retryCtx, stopRetry := context.WithCancel(ctx)
	defer stopRetry()
	retrying, err := watchtools.NewRetryWatcherWithContext(retryCtx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return configMaps.Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer retrying.Stop()
	leakMust(t, leakErr(configMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{})))
	for _, w := range []watch.Interface{plain, retrying} {
		if ev := nextEvent(t, w); ev.Type != watch.Added || cmName(ev.Object) != "before" {
			t.Fatalf("first event through the tunnel: %s %s", ev.Type, cmName(ev.Object))
		}
	}

	// kubectl logs -f and kubectl exec -i cat, each with a line through.
	kubectl := func(args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", s.Kubeconfig, "--server", proxied.Host, "-n", "default"}, args...)...)
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd, in, bufio.NewReader(out)
	}
	logs, _, logsOut := kubectl("logs", "-f", "app")
	if line, err := logsOut.ReadString('\n'); err != nil || !strings.Contains(line, "log line") {
		t.Fatalf("kubectl logs -f through the tunnel: %q %v", line, err)
	}
	execCmd, execIn, execOut := kubectl("exec", "-i", "app", "--", "cat")
	if _, err := io.WriteString(execIn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := execOut.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("kubectl exec -i cat through the tunnel: %q %v", line, err)
	}

	agent.Kill()

	// The plain watch ends: its channel closes, after at most an ERROR event with a Status.
	ended := make(chan []watch.Event, 1)
	go func() {
		var events []watch.Event
		for ev := range plain.ResultChan() {
			events = append(events, ev)
		}
		ended <- events
	}()
	select {
	case events := <-ended:
		for _, ev := range events {
			status, ok := ev.Object.(*metav1.Status)
			if ev.Type != watch.Error || !ok {
				t.Errorf("the watch ended with %s %T, want nothing or an ERROR event with a Status", ev.Type, ev.Object)
				continue
			}
			t.Logf("the plain watch ended with an ERROR event: %d %s", status.Code, status.Message)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the watch through the tunnel did not end after the agent was killed")
	}
	// Both kubectl processes exit; their streams end.
	for what, cmd := range map[string]*exec.Cmd{"logs -f": logs, "exec -i cat": execCmd} {
		exited := make(chan error, 1)
		go func() {
			_, _ = io.Copy(io.Discard, map[string]*bufio.Reader{"logs -f": logsOut, "exec -i cat": execOut}[what])
			exited <- cmd.Wait()
		}()
		select {
		case err := <-exited:
			t.Logf("kubectl %s exited: %v", what, err)
		case <-time.After(2 * time.Minute):
			t.Fatalf("kubectl %s through the tunnel did not end after the agent was killed", what)
		}
	}

	// Meanwhile on the target; then the agent is back: the RetryWatcher delivers both, in order.
	leakMust(t, leakErr(target.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "while-down"}}, metav1.CreateOptions{})))
	agent = framework.StartAgent(t, agentKubeconfig, "edge", targetAddr)
	until(t, "the restarted agent's session", agent.Ready)
	leakMust(t, leakErr(target.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})))
	for _, want := range []string{"while-down", "after"} {
		if ev := nextEvent(t, retrying); ev.Type != watch.Added || cmName(ev.Object) != want {
			t.Fatalf("the RetryWatcher after the agent came back: %s %s, want ADDED %s", ev.Type, cmName(ev.Object), want)
		}
	}
}

// nextEvent is the next event of w, failing after two minutes.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(2 * time.Minute):
		t.Fatal("no watch event")
	}
	return watch.Event{}
}

func cmName(obj runtime.Object) string {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		return cm.Name
	}
	return ""
}
