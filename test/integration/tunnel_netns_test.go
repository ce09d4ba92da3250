package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	mountsv1alpha1 "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned/typed/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// tunnelBed is a target that mount-apiserver cannot reach: a real kube-apiserver, its etcd,
// the test kubelet (with pod default/app) and the agents in a network namespace of the test,
// everything on the namespace's own 127.0.0.1; and the hub: a host kube-apiserver with
// mount-apiserver (the built binary) aggregated into it. Agents reach the hub through a
// Unix-socket bridge into the namespace and attach through the host's aggregator.
type tunnelBed struct {
	ns      *framework.Netns
	target  *framework.KubeAPIServer
	host    *framework.KubeAPIServer
	agg     *framework.Aggregated
	kubectl string
	// targetAddr is the target's host:port inside the namespace.
	targetAddr string
	// hubAddr is the hub's (host kube-apiserver's) address as agents dial it, inside.
	hubAddr string
	// podPort is what port-forwards to pod app reach, inside.
	podPort int
	alice   *rest.Config
}

func startTunnelBed(t *testing.T) *tunnelBed {
	t.Helper()
	ctx := klog.NewContext(context.Background(), klog.Background())
	b := &tunnelBed{kubectl: realKubectl(t)}
	b.ns = framework.NewNetns(t)
	var err error
	if b.target, err = framework.StartKubeAPIServerWith(ctx, t.TempDir(), framework.KubeOptions{Netns: b.ns}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.target.Stop)
	b.targetAddr = strings.TrimPrefix(b.target.InnerURL, "https://")
	kubelet, err := framework.StartKubelet(ctx, b.target, "edge-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "default", "app"); err != nil {
		t.Fatal(err)
	}
	podLn, err := b.ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	podSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "from the pod") }), ReadHeaderTimeout: time.Minute}
	go func() { _ = podSrv.Serve(podLn) }()
	t.Cleanup(func() { _ = podSrv.Close() })
	b.podPort = podLn.Addr().(*net.TCPAddr).Port

	if b.host, err = framework.StartKubeAPIServer(ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.host.Stop)
	b.agg, _ = framework.StartAggregatedBinary(ctx, t, b.host, framework.BuildBinary(t), "Metadata")
	if b.hubAddr, err = b.ns.ForwardIn(strings.TrimPrefix(b.host.URL, "https://")); err != nil {
		t.Fatal(err)
	}

	// alice (group devs) may use every mount's proxy on the hub, and is cluster-admin on the
	// target: what she may do there is the target's decision.
	if b.alice, err = b.host.UserConfig("alice", "devs"); err != nil {
		t.Fatal(err)
	}
	created(t)(b.host.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "mount-proxy"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"*"}}},
	}, metav1.CreateOptions{}))
	created(t)(b.host.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-mount-proxy"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mount-proxy"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"}},
	}, metav1.CreateOptions{}))
	created(t)(b.target.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"}},
	}, metav1.CreateOptions{}))

	// The hub side of agents: artifacts/agent/hub as an operator applies it (mount "prod").
	hubDir := filepath.Join(framework.RepoRoot(), "artifacts", "agent", "hub")
	if out, err := exec.Command(b.kubectl, "--kubeconfig", b.host.AdminKubeconfig, "apply", "-k", hubDir).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -k %s: %v: %s", hubDir, err, out)
	}
	// The target's Secret on the hub, with the target's address inside the namespace.
	created(t)(b.host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{}))
	inner := rest.CopyConfig(b.target.AdminConfig)
	inner.Host = b.target.InnerURL
	kc, err := framework.KubeconfigBytes(inner)
	if err != nil {
		t.Fatal(err)
	}
	created(t)(b.host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "target-kubeconfig"}, Data: map[string][]byte{"kubeconfig": kc},
	}, metav1.CreateOptions{}))
	return b
}

// created fails the test on an error of a create, but for AlreadyExists.
func created(t *testing.T) func(any, error) {
	return func(_ any, err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

func (b *tunnelBed) mounts(t *testing.T) clientset.Interface {
	t.Helper()
	c, err := clientset.NewForConfig(b.host.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *tunnelBed) proxyURL(mount string) string {
	return b.host.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/" + mount + "/proxy"
}

// hubKubeconfig writes the kubeconfig of an agent identity on the hub (a token of the hub's
// ServiceAccount namespace/name), with the hub's address inside the namespace.
func (b *tunnelBed) hubKubeconfig(t *testing.T, namespace, name string) string {
	t.Helper()
	tr, err := b.host.Client.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return writeKubeconfig(t, &rest.Config{Host: "https://" + b.hubAddr, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: b.host.ClientCA.CertPEM}})
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	data, err := framework.KubeconfigBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// aliceGet GETs path through a mount's proxy as alice.
func (b *tunnelBed) aliceGet(t *testing.T, client *http.Client, mount, path string) (int, http.Header, string) {
	t.Helper()
	resp, err := client.Get(b.proxyURL(mount) + path)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", path, mount, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// waitAnswers waits until mount's proxy answers /api with 200, and returns how long it took.
func (b *tunnelBed) waitAnswers(t *testing.T, client *http.Client, mount string) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, _, body := b.aliceGet(t, client, mount, "/api")
		last = fmt.Sprintf("%d %s", code, body)
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("mount %s does not answer through its tunnel: last %s", mount, last)
	}
	return time.Since(start)
}

func TestTunnelNetns(t *testing.T) {
	b := startTunnelBed(t)
	ctx := context.Background()
	mounts := b.mounts(t).MountsV1alpha1().Mounts()
	aliceHTTP, err := rest.HTTPClientFor(b.alice)
	if err != nil {
		t.Fatal(err)
	}

	// A plain URL mount of the target: the server cannot reach it.
	direct := urlMount("direct")
	direct.Spec.Ref.Name = "target-kubeconfig"
	if _, err := mounts.Create(ctx, direct, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, _, body := b.aliceGet(t, aliceHTTP, "direct", "/api/v1")
	var status metav1.Status
	if (code != http.StatusBadGateway && code != http.StatusServiceUnavailable) || json.Unmarshal([]byte(body), &status) != nil || status.Kind != "Status" {
		t.Fatalf("a direct mount of the target inside the namespace answered %d: %s", code, body)
	}
	t.Logf("direct mount of the isolated target: %d %s", code, status.Message)

	// Server credentials: the hub's Secret, TLS end to end through the tunnel.
	prod := urlMount("prod")
	prod.Spec.Ref.Name = "target-kubeconfig"
	prod.Spec.Tunnel = &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer}
	if _, err := mounts.Create(ctx, prod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Agent credentials: no credential of the target on the hub at all.
	agentMount := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "prod-agent"}, Spec: v1alpha1.MountSpec{
		Tunnel: &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsAgent},
	}}
	if _, err := mounts.Create(ctx, agentMount, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No agent yet: 503 naming the mount, without Retry-After.
	code, header, body := b.aliceGet(t, aliceHTTP, "prod", "/api/v1")
	if code != http.StatusServiceUnavailable || header.Get("Retry-After") != "" || !strings.Contains(body, `\"prod\"`) {
		t.Fatalf("without an agent: %d %v %s", code, header, body)
	}

	// The hub identity of prod-agent's agent, like artifacts/agent/hub's for prod.
	hc := b.host.Client
	created(t)(hc.CoreV1().ServiceAccounts("mount-agent").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "mount-agent-prod-agent"}}, metav1.CreateOptions{}))
	created(t)(hc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "mount-agent-prod-agent"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/attach"}, ResourceNames: []string{"prod-agent"}, Verbs: []string{"get", "create"}}},
	}, metav1.CreateOptions{}))
	created(t)(hc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mount-agent-prod-agent"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mount-agent-prod-agent"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "mount-agent", Name: "mount-agent-prod-agent"}},
	}, metav1.CreateOptions{}))
	// The agent's own identity on the target: artifacts/agent's ServiceAccount and
	// impersonation RBAC, applied to the target.
	agentDir := filepath.Join(framework.RepoRoot(), "artifacts", "agent")
	if out, err := exec.Command(b.kubectl, "--kubeconfig", b.target.AdminKubeconfig, "apply",
		"-f", filepath.Join(agentDir, "namespace.yaml"), "-f", filepath.Join(agentDir, "serviceaccount.yaml"),
		"-f", filepath.Join(agentDir, "rbac-impersonator.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("applying artifacts/agent to the target: %v: %s", err, out)
	}
	tr, err := b.target.Client.CoreV1().ServiceAccounts("mount-agent").CreateToken(ctx, "mount-agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentTargetKubeconfig := writeKubeconfig(t, &rest.Config{Host: b.target.InnerURL, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: b.target.ClientCA.CertPEM}})

	serverAgent := framework.StartAgentIn(t, b.ns, "--hub-kubeconfig", b.hubKubeconfig(t, "mount-agent", "mount-agent-prod"),
		"--mount", "prod", "--target", b.targetAddr, "--health-bind-address", "", "--max-backoff", "2s")
	framework.StartAgentIn(t, b.ns, "--hub-kubeconfig", b.hubKubeconfig(t, "mount-agent", "mount-agent-prod-agent"),
		"--mount", "prod-agent", "--target", b.targetAddr, "--kubeconfig", agentTargetKubeconfig, "--health-bind-address", "", "--max-backoff", "2s")
	t.Logf("prod answers through its tunnel after %v", b.waitAnswers(t, aliceHTTP, "prod"))
	t.Logf("prod-agent answers through its tunnel after %v", b.waitAnswers(t, aliceHTTP, "prod-agent"))

	for _, mount := range []string{"prod", "prod-agent"} {
		t.Run(mount, func(t *testing.T) {
			cfg := rest.CopyConfig(b.alice)
			cfg.Host = b.proxyURL(mount)
			kubectlSuite(t, b.kubectl, writeKubeconfig(t, cfg), mount, b.podPort)
		})
	}
	// In agent mode the target saw alice, impersonated by the agent's ServiceAccount.
	cfg := rest.CopyConfig(b.alice)
	cfg.Host = b.proxyURL("prod-agent")
	if out, err := exec.Command(b.kubectl, "--kubeconfig", writeKubeconfig(t, cfg), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").CombinedOutput(); err != nil || string(out) != "alice" {
		t.Fatalf("whoami through prod-agent: %v: %s", err, out)
	}

	t.Run("agent killed and restarted", func(t *testing.T) {
		start := time.Now()
		serverAgent.Kill()
		var last string
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			code, header, body := b.aliceGet(t, aliceHTTP, "prod", "/api/v1")
			last = fmt.Sprintf("%d %v %s", code, header, body)
			return code == http.StatusServiceUnavailable && header.Get("Retry-After") == "" && strings.Contains(body, `\"prod\"`), nil
		})
		if err != nil {
			t.Fatalf("no 503 after the agent was killed: last %s", last)
		}
		t.Logf("agent SIGKILLed: 503 after %v", time.Since(start).Round(time.Millisecond))
		// The other mount's agent is untouched.
		if code, _, body := b.aliceGet(t, aliceHTTP, "prod-agent", "/api"); code != http.StatusOK {
			t.Fatalf("prod-agent: %d %s", code, body)
		}
		if err := serverAgent.Start(); err != nil {
			t.Fatal(err)
		}
		t.Logf("agent restarted: prod answers again after %v", b.waitAnswers(t, aliceHTTP, "prod").Round(time.Millisecond))
	})

	t.Run("an agent of one mount cannot serve another", func(t *testing.T) {
		// prod's agent identity tries to take prod-agent's tunnel: the hub refuses it, and
		// prod-agent keeps its own agent (which impersonates; prod's agent has no credentials).
		rogue := framework.StartAgentIn(t, b.ns, "--hub-kubeconfig", b.hubKubeconfig(t, "mount-agent", "mount-agent-prod"),
			"--mount", "prod-agent", "--target", b.targetAddr, "--health-bind-address", "", "--max-backoff", "1s")
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return strings.Contains(rogue.Log(), "403") || strings.Contains(strings.ToLower(rogue.Log()), "forbidden"), nil
		})
		if err != nil {
			t.Fatalf("the agent of prod was not refused the tunnel of prod-agent; its log:\n%s", rogue.Log())
		}
		rogue.Kill()
		if out, err := exec.Command(b.kubectl, "--kubeconfig", writeKubeconfig(t, cfg), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").CombinedOutput(); err != nil || string(out) != "alice" {
			t.Fatalf("whoami through prod-agent after the refused attach: %v: %s", err, out)
		}
	})

	t.Run("no leak after 1000 requests and 50 reconnects", func(t *testing.T) {
		metricsCfg := b.agg.DirectConfig(b.host.AdminConfig)
		metric := func(name string) int {
			v, err := framework.Metric(metricsCfg, name)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		for range 20 {
			b.aliceGet(t, aliceHTTP, "prod", "/api/v1/namespaces/default/pods")
		}
		baseGoroutines, baseFDs := metric("go_goroutines"), metric("process_open_fds")
		requests := 0
		for i := range 50 {
			serverAgent.Kill()
			if err := serverAgent.Start(); err != nil {
				t.Fatal(err)
			}
			b.waitAnswers(t, aliceHTTP, "prod")
			for range 20 {
				mount := "prod"
				if i%2 == 1 {
					mount = "prod-agent"
				}
				if code, _, body := b.aliceGet(t, aliceHTTP, mount, "/api/v1/namespaces/default/pods"); code != http.StatusOK {
					t.Fatalf("request %d through %s: %d %s", requests, mount, code, body)
				}
				requests++
			}
		}
		// A generous bound, reached once connections idle out: not a timing assertion.
		const goroutineSlack, fdSlack = 100, 40
		var goroutines, fds int
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			goroutines, fds = metric("go_goroutines"), metric("process_open_fds")
			return goroutines <= baseGoroutines+goroutineSlack && fds <= baseFDs+fdSlack, nil
		})
		t.Logf("%d proxied requests, 50 agent reconnects: goroutines %d -> %d, open fds %d -> %d", requests, baseGoroutines, goroutines, baseFDs, fds)
		if err != nil {
			t.Fatalf("goroutines %d (baseline %d) or open fds %d (baseline %d) did not come back", goroutines, baseGoroutines, fds, baseFDs)
		}
	})

	t.Run("target down with the agents connected", func(t *testing.T) {
		// Last: the target does not come back. Both agents stay attached; each request is a
		// 502 Status (not the 503 of a missing agent).
		b.target.Stop()
		for _, mount := range []string{"prod", "prod-agent"} {
			// Not a discovery root: kubectl's discovery shows only a text answer's reason.
			code, _, body := b.aliceGet(t, aliceHTTP, mount, "/api/v1/namespaces/default")
			var status metav1.Status
			if code != http.StatusBadGateway || json.Unmarshal([]byte(body), &status) != nil || status.Kind != "Status" {
				t.Errorf("%s with its target down: %d %s", mount, code, body)
			} else {
				t.Logf("%s with its target down: %d %s", mount, code, status.Message)
			}
		}
	})
}

// TestTunnelAgentConnectedCondition: a tunnel mount's conditions follow its agent. The agent
// starts right after the status controller has found no agent (as an operator applies the
// Mount and then the agent), is killed, and started again.
func TestTunnelAgentConnectedCondition(t *testing.T) {
	b := startTunnelBed(t)
	ctx := context.Background()
	mounts := b.mounts(t).MountsV1alpha1().Mounts()
	aliceHTTP, err := rest.HTTPClientFor(b.alice)
	if err != nil {
		t.Fatal(err)
	}
	prod := urlMount("prod")
	prod.Spec.Ref.Name = "target-kubeconfig"
	prod.Spec.Tunnel = &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer}
	if _, err := mounts.Create(ctx, prod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, mounts, "prod", "Ready", metav1.ConditionFalse)
	agent := framework.StartAgentIn(t, b.ns, "--hub-kubeconfig", b.hubKubeconfig(t, "mount-agent", "mount-agent-prod"),
		"--mount", "prod", "--target", b.targetAddr, "--health-bind-address", "", "--max-backoff", "2s")
	b.waitAnswers(t, aliceHTTP, "prod")
	waitCondition(t, mounts, "prod", v1alpha1.ConditionAgentConnected, metav1.ConditionTrue)
	waitCondition(t, mounts, "prod", "Ready", metav1.ConditionTrue)
	agent.Kill()
	waitCondition(t, mounts, "prod", v1alpha1.ConditionAgentConnected, metav1.ConditionFalse)
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	b.waitAnswers(t, aliceHTTP, "prod")
	waitCondition(t, mounts, "prod", v1alpha1.ConditionAgentConnected, metav1.ConditionTrue)
	waitCondition(t, mounts, "prod", "Ready", metav1.ConditionTrue)
}

// waitCondition waits until the Mount's condition has status (at most a minute, two status
// probe intervals), and logs it.
func waitCondition(t *testing.T, mounts mountsv1alpha1.MountInterface, name, condition string, status metav1.ConditionStatus) {
	t.Helper()
	var last metav1.Condition
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := mounts.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range m.Status.Conditions {
			if c.Type == condition {
				last = c
				return c.Status == status, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("mount %s: condition %s is not %s: last %+v", name, condition, status, last)
	}
	t.Logf("mount %s: %s %s (%s: %s)", name, condition, status, last.Reason, last.Message)
}

// kubectlSuite runs the real kubectl through a mount with kubeconfig: get, list, watch,
// apply, exec (WebSocket and SPDY), logs -f and port-forward (WebSocket and SPDY) to
// podPort of pod default/app.
func kubectlSuite(t *testing.T, kubectl, kubeconfig, tag string, podPort int) {
	run := func(t *testing.T, env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// start runs a long-running kubectl and returns its stdout lines; it is killed at the end
	// of the test.
	start := func(t *testing.T, env []string, args ...string) *bufio.Scanner {
		t.Helper()
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return bufio.NewScanner(stdout)
	}

	t.Run("get and list", func(t *testing.T) {
		if out := run(t, nil, "get", "namespace", "default", "-o", "name"); out != "namespace/default\n" {
			t.Fatalf("get: %q", out)
		}
		if out := run(t, nil, "get", "pods", "-A"); !strings.Contains(out, "app") {
			t.Fatalf("list: %q", out)
		}
	})
	t.Run("watch and apply", func(t *testing.T) {
		name := "applied-" + tag
		lines := start(t, nil, "get", "configmaps", "-w", "--output-watch-events", "--field-selector", "metadata.name="+name)
		apply := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-")
		apply.Stdin = strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: default\ndata:\n  a: b\n")
		if out, err := apply.CombinedOutput(); err != nil {
			t.Fatalf("apply: %v: %s", err, out)
		}
		for lines.Scan() {
			if strings.Contains(lines.Text(), name) {
				return
			}
		}
		t.Fatalf("the watch ended without %s: %v", name, lines.Err())
	})
	t.Run("logs -f", func(t *testing.T) {
		lines := start(t, nil, "logs", "-f", "app")
		for i := range 3 {
			if !lines.Scan() {
				t.Fatalf("logs -f ended after %d lines: %v", i, lines.Err())
			}
		}
	})
	for _, p := range []string{"true", "false"} {
		env := []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + p, "KUBECTL_PORT_FORWARD_WEBSOCKETS=" + p}
		proto := map[string]string{"true": "websocket", "false": "spdy"}[p]
		t.Run("exec over "+proto, func(t *testing.T) {
			if out := run(t, env, "exec", "app", "--", "echo", "hello"); out != "hello\n" {
				t.Fatalf("exec: %q", out)
			}
		})
		t.Run("port-forward over "+proto, func(t *testing.T) {
			lines := start(t, env, "port-forward", "pod/app", fmt.Sprintf(":%d", podPort))
			if !lines.Scan() {
				t.Fatalf("port-forward: %v", lines.Err())
			}
			// "Forwarding from 127.0.0.1:<local> -> <port>"
			f := strings.Fields(lines.Text())
			if len(f) < 3 {
				t.Fatalf("port-forward said %q", lines.Text())
			}
			resp, err := http.Get("http://" + f[2] + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "from the pod" {
				t.Fatalf("through port-forward: %q", body)
			}
		})
	}
}
