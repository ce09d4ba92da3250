package integration

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestTunnelHAStoppedOwner: kubectl exec -i cat through replica 2, relayed to replica 1 which
// holds the agent's session; replica 1 is then stopped (SIGSTOP: a hung process on a live
// machine, whose kernel still holds every connection, so neither TCP keepalive nor
// TCP_USER_TIMEOUT ends them, and an exec stream carries no pings). Replica 2 asks the owner
// of its open hops for /livez every 10 s and closes them once it has not answered for 10 s:
// kubectl exits within about 20 s instead of hanging until its user gives up. Before that, the
// stream outlives a check of the live owner.
func TestTunnelHAStoppedOwner(t *testing.T) {
	ha := startTunnelHA(t)
	ctx := ha.ctx
	kubelet, err := framework.StartKubelet(ctx, ha.target, "ha-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "default", "app"); err != nil {
		t.Fatal(err)
	}
	// edge-user may exec through the mount, and into the pod on the target (impersonated).
	leakGrant(ctx, t, ha.host.Client, "edge-user-exec", []rbacv1.PolicyRule{{
		APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"get", "create"}, ResourceNames: []string{"edge"},
	}}, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "edge-user"})
	leakGrant(ctx, t, ha.target.Client, "edge-user-exec", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}},
	}, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "edge-user"})

	viaR2 := direct(ha.user, ha.r2)
	viaR2.Host += "/apis/mounts.kcp.io/v1alpha1/mounts/edge/proxy"
	cmd := exec.Command(realKubectl(t), "--kubeconfig", writeKubeconfig(t, viaR2), "-n", "default", "exec", "-i", "app", "--", "cat")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	out := bufio.NewReader(stdout)
	if _, err := io.WriteString(in, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := out.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("kubectl exec -i cat through replica 2 and the hop: %q %v (%s)", line, err, stderr.String())
	}

	// A live owner keeps the hop past its first liveness check (10 s): the check reaches a
	// real replica as the hop does (its CA, its server name, the replica's credentials).
	time.Sleep(11 * time.Second)
	if _, err := io.WriteString(in, "still\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := out.ReadString('\n'); err != nil || line != "still\n" {
		t.Fatalf("kubectl exec -i cat after the owner's first liveness check: %q %v (%s)", line, err, stderr.String())
	}
	admin := direct(ha.host.AdminConfig, ha.r2)
	if n := metricValue(t, admin, "mount_tunnel_peer_hops_closed_owner_hung_total"); n != 0 {
		t.Fatalf("replica 2 closed %v hops to a live owner", n)
	}

	// Registered after the replicas' cleanup, so it runs first: a stopped process ignores
	// every signal but SIGKILL until it is continued.
	t.Cleanup(func() { _ = ha.r1.Cmd.Process.Signal(syscall.SIGCONT) })
	if err := ha.r1.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	exited := make(chan error, 1)
	go func() {
		_, _ = io.Copy(io.Discard, out)
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		t.Logf("kubectl exec exited %v after replica 1 was stopped: %v (%s)", time.Since(stopped).Round(100*time.Millisecond), err, strings.TrimSpace(stderr.String()))
	case <-time.After(time.Minute):
		t.Fatalf("kubectl exec through a hop to a stopped replica still runs after a minute")
	}
	if n := metricValue(t, admin, "mount_tunnel_peer_hops_closed_owner_hung_total"); n < 1 {
		t.Errorf("replica 2 counted %v hops closed for a hung owner, want at least the exec's", n)
	}
}
