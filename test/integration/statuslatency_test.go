package integration

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// statusBound is how long a mount's status may lag behind what the proxy and the tunnel
// observe in these tests: about a second of work, with room for a loaded machine. Before,
// the status controller's backoff and its shared probe results kept a mount Unknown for
// 14 to 62 s after its target answered again, and Connecting for 16 s after its agent
// re-attached.
const statusBound = 8 * time.Second

// TestStatusFollowsTheProxy measures how far a mount's status lags behind what the proxy and
// the tunnel see, with the real binary, a real target and a real agent:
//   - a target that was down for long enough that the controller backs off comes back, and
//     requests through the mount are answered: the mount is Ready soon after the first answer;
//   - an agent re-attaches after a while without one: the mount is Ready soon after the
//     AgentConnected condition says so;
//   - the hub is killed along with the agent and started again: the tunnel mount does not
//     stay Ready (what the dead process wrote last) for long.
//
// The latencies are logged as the figures.
func TestStatusFollowsTheProxy(t *testing.T) {
	ctx := context.Background()
	kube, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	framework.BuildAgent(t)
	bin := framework.BuildBinary(t)
	root := t.TempDir()
	hub := bin.Start(t, root)
	core, err := kubernetes.NewForConfig(hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := framework.KubeconfigBytes(kube.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-kubeconfig"}, Data: map[string][]byte{"kubeconfig": kc}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prod := urlMount("prod")
	prod.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
	edge := urlMount("edge")
	edge.Spec.Ref.Name = "prod-kubeconfig"
	edge.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
	edge.Spec.Tunnel = &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer}
	for _, m := range []*v1alpha1.Mount{prod, edge} {
		if _, err := hub.Client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := pki.Load(filepath.Join(root, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	agentKubeconfig := filepath.Join(t.TempDir(), "edge-agent.kubeconfig")
	data, err := ca.UserKubeconfig(hub.URL, "edge-agent", []string{authorization.AgentGroupPrefix + "edge"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agentKubeconfig, data, 0o600); err != nil {
		t.Fatal(err)
	}
	targetAddr := strings.TrimPrefix(kube.URL, "https://")
	agent := framework.StartAgent(t, agentKubeconfig, "edge", targetAddr)

	mounts := func() *v1alpha1.MountList {
		list, err := hub.Client.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{})
		if err != nil {
			return &v1alpha1.MountList{}
		}
		return list
	}
	phase := func(name string) (v1alpha1.MountPhase, *v1alpha1.Mount) {
		list := mounts()
		for i, m := range list.Items {
			if m.Name == name {
				return m.Status.Phase, &list.Items[i]
			}
		}
		return "", nil
	}
	waitPhase := func(name string, want func(v1alpha1.MountPhase) bool, what string) {
		t.Helper()
		until(t, name+" "+what, func() bool { p, _ := phase(name); return want(p) })
	}
	isReady := func(p v1alpha1.MountPhase) bool { return p == v1alpha1.MountPhaseReady }
	waitPhase("prod", isReady, "Ready")
	waitPhase("edge", isReady, "Ready")
	proxied := func(mount string) int {
		client, err := rest.HTTPClientFor(hub.Config)
		if err != nil {
			return 0
		}
		resp, err := client.Get(hub.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/" + mount + "/proxy/api/v1/namespaces/default")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var figures []string
	logFigure := func(s string) { figures = append(figures, s); t.Log(s) }

	t.Run("target back", func(t *testing.T) {
		// Down for 35 s: the controller's backoff for a failing target has grown to 32 s.
		restarted := make(chan error, 1)
		go func() { _, _, err := kube.RestartAfter(ctx, 35*time.Second); restarted <- err }()
		waitPhase("prod", func(p v1alpha1.MountPhase) bool { return p == v1alpha1.MountPhaseUnknown }, "Unknown")
		if err := <-restarted; err != nil {
			t.Fatal(err)
		}
		var answered time.Time
		until(t, "an answer through prod", func() bool {
			if proxied("prod") == http.StatusOK {
				answered = time.Now()
				return true
			}
			return false
		})
		for p, _ := phase("prod"); !isReady(p); p, _ = phase("prod") {
			if time.Since(answered) > 2*time.Minute {
				t.Fatal("prod not Ready 2 minutes after its target answered again")
			}
			proxied("prod") // a user keeps using the mount
			time.Sleep(100 * time.Millisecond)
		}
		lag := time.Since(answered)
		logFigure("target back: prod Ready " + lag.Round(10*time.Millisecond).String() + " after the proxy's first answer")
		if lag > statusBound {
			t.Errorf("prod Ready %v after its target answered again, want within %v", lag, statusBound)
		}
	})

	t.Run("agent back", func(t *testing.T) {
		waitPhase("edge", isReady, "Ready again after the target's restart")
		agent.Kill()
		// A probe has found no agent: its result serves the mount's next probes for a while.
		until(t, "a probe of edge without its agent", func() bool {
			_, m := phase("edge")
			c := (*metav1.Condition)(nil)
			if m != nil {
				c = meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionTargetReachable)
			}
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "AgentNotConnected"
		})
		// Re-attached a moment later, as an agent restarted by its Deployment.
		agent = framework.StartAgent(t, agentKubeconfig, "edge", targetAddr)
		var connected time.Time
		until(t, "AgentConnected", func() bool {
			_, m := phase("edge")
			if m != nil && meta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.ConditionAgentConnected) {
				connected = time.Now()
				return true
			}
			return false
		})
		waitPhase("edge", isReady, "Ready with its agent")
		lag := time.Since(connected)
		logFigure("agent back: edge Ready " + lag.Round(10*time.Millisecond).String() + " after AgentConnected=True")
		if lag > statusBound {
			t.Errorf("edge Ready %v after AgentConnected, want within %v", lag, statusBound)
		}
	})

	t.Run("hub restart", func(t *testing.T) {
		waitPhase("edge", isReady, "Ready")
		u, err := url.Parse(hub.URL)
		if err != nil {
			t.Fatal(err)
		}
		port, err := strconv.Atoi(u.Port())
		if err != nil {
			t.Fatal(err)
		}
		// The hub dies with its agent (a node lost): what the dead process wrote last says
		// Ready. A reader polls the mount from the moment the restarted hub answers at all.
		_ = hub.Cmd.Process.Kill()
		<-hub.Exited()
		agent.Kill()
		old := hub.Config
		firstRead := make(chan time.Time, 1)
		notReady := make(chan time.Time, 1)
		pollCtx, stopPolling := context.WithCancel(ctx)
		defer stopPolling()
		go func() {
			client, err := clientsetFor(old)
			if err != nil {
				return
			}
			read := false
			for pollCtx.Err() == nil {
				m, err := client.MountsV1alpha1().Mounts().Get(pollCtx, "edge", metav1.GetOptions{})
				if err == nil {
					if !read {
						read = true
						firstRead <- time.Now()
					}
					if m.Status.Phase != v1alpha1.MountPhaseReady {
						notReady <- time.Now()
						return
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		hub = bin.StartOnPort(t, root, port)
		serving := <-firstRead
		var left time.Time
		select {
		case left = <-notReady:
		case <-time.After(2 * time.Minute):
			t.Fatal("edge Ready 2 minutes after the restart, without an agent")
		}
		stale := left.Sub(serving)
		logFigure("hub restart: edge read as Ready for " + stale.Round(10*time.Millisecond).String() + " after the restarted hub first answered")
		if stale > statusBound {
			t.Errorf("edge stayed Ready %v after the restart without an agent, want within %v", stale, statusBound)
		}
	})
	t.Logf("status latencies (load %s):\n%s", loadAverage(), strings.Join(figures, "\n"))
}

func clientsetFor(cfg *rest.Config) (clientset.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 2 * time.Second
	return clientset.NewForConfig(cfg)
}
