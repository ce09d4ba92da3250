package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestQuietLogs: what happens every day is not logged as an error or warning, by the server
// binary and the agent; errors are for what an operator must act on. Before, a user's
// server-side apply typo was "Unhandled Error" (and a 500), a client closing a watch through a
// mount "Timeout or abort while handling", every agent disconnect remotedialer's "use of
// closed network connection", and the agent logged a refused attach as "Tunnel session ended;
// reconnecting".
func TestQuietLogs(t *testing.T) {
	p := framework.BuildBinary(t).Start(t, t.TempDir())
	m := startMountedTargetOn(t, p.Server)
	ctx := context.Background()
	kubectl := func(kubeconfig string, timeout time.Duration, args ...string) kubectlResult {
		return runKubectlWith(ctx, m.kubectl, m.cache, kubeconfig, "", timeout, args...)
	}

	// A typo in a server-side apply of a Mount: the caller's fault.
	typo := "apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata: {name: typo}\nspec:\n  ref: {namespace: clusters, name: prod-kubeconfig}\n  identty: {mode: Impersonate}\n"
	file := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(file, []byte(typo), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := kubectl(p.Kubeconfig, time.Minute, "apply", "--server-side", "--validate=false", "-f", file); r.exitCode != 1 ||
		!strings.Contains(r.out, "Error from server (BadRequest)") || !strings.Contains(r.out, ".spec.identty: field not declared in schema") {
		t.Errorf("server-side apply with a typo: exit %d\n%s", r.exitCode, r.out)
	}

	// A watch through the mount that the client ends (kubectl killed).
	if r := kubectl(m.viaMount, 3*time.Second, "get", "configmaps", "-A", "-w"); r.exitCode == 0 {
		t.Errorf("the watch ended by itself: %s", r.out)
	}

	// An agent attaches to a tunnel mount and goes away; another one is refused.
	mounts := p.Client.MountsV1alpha1().Mounts()
	edge := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1alpha1.MountSpec{
		Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: "prod-kubeconfig"}, Tunnel: &v1alpha1.MountTunnel{},
	}}
	if _, err := mounts.Create(ctx, edge, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(m.kube.URL, "https://")
	agent := framework.StartAgent(t, m.hubKubeconfig(t, "edge-agent", p.URL, authorization.AgentGroupPrefix+"edge"), "edge", target)
	until(t, "the agent's session", agent.Ready)
	waitForMount(ctx, t, mounts, "edge", func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady })
	agent.Kill()
	waitForMount(ctx, t, mounts, "edge", func(m *v1alpha1.Mount) bool { return m.Status.Phase != v1alpha1.MountPhaseReady })
	refused := framework.StartAgent(t, m.hubKubeconfig(t, "viewer", p.URL, authorization.ViewersGroup), "edge", target)
	until(t, "the refused agent's log", func() bool { return strings.Contains(refused.Log(), "refused the attach: 403") })
	refused.Kill()
	if log := refused.Log(); !regexpMatch(`(?m)^E\d{4} .*"The hub refused the attach; retrying" err="the hub refused the attach: 403`, log) || strings.Contains(log, "session ended") {
		t.Errorf("the refused agent's log:\n%s", log)
	}
	time.Sleep(time.Second) // what the server logs after the agent left

	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	// klog's errors and warnings, and remotedialer's (logged with their level as a value).
	noisy := regexp.MustCompile(`(?m)^[EW]\d{4} .*$|^.*"level"="(error|warning)".*$|^.*level="?(error|warning)"?.*$`)
	if lines := noisy.FindAllString(string(data), -1); len(lines) > 0 {
		t.Errorf("the server logged errors or warnings:\n%s", strings.Join(lines, "\n"))
	}
}
