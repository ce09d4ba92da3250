package aggregation

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestTunnelThroughAggregator: an agent attaches through the host kube-apiserver's
// aggregator (which passes the WebSocket upgrade of mounts/<name>/attach on, as long-running),
// authenticated by the host and authorized by RBAC with resourceNames: an agent bound to one
// mount cannot attach to another. Requests through the host then reach the remote cluster
// through the tunnel.
func TestTunnelThroughAggregator(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	m := urlMountOf("tunneled", "remote-kubeconfig")
	m.Spec.Tunnel = &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer}
	createMount(t, m)
	other := urlMountOf("tunneled-other", "remote-kubeconfig")
	other.Spec.Tunnel = &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer}
	createMount(t, other)

	// The hub-side Role of an agent: get (the upgrade is a GET) and create on mounts/attach,
	// for its mount only.
	if _, err := kube.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "tunneled-agent"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/attach"}, ResourceNames: []string{"tunneled"}, Verbs: []string{"get", "create"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.Client.RbacV1().ClusterRoles().Delete(context.Background(), "tunneled-agent", metav1.DeleteOptions{})
	})
	bind(t, "tunnel-agent", "tunneled-agent")
	hubKubeconfig, err := kube.WriteKubeconfig(user(t, "tunnel-agent"), "tunnel-agent")
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(remote.URL, "https://")

	wrong := framework.StartAgent(t, hubKubeconfig, "tunneled-other", target)
	agent := framework.StartAgent(t, hubKubeconfig, "tunneled", target)
	for deadline := time.Now().Add(2 * time.Minute); !agent.Ready(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent did not attach through the aggregator")
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(wrong.Log(), "refused the attach: 403"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent of another mount was not refused")
		}
	}

	remoteBind(t, "tina", "namespace-reader")
	tina := proxyUser(t, "tina")
	through := throughProxy(tina, "tunneled")
	client, err := kubernetes.NewForConfig(through)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("through the aggregator and the tunnel: %v", err)
	}
	// tina is herself on the remote: reading is allowed, writing is not.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tina-was-here"}}, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), `User "tina"`) {
		t.Errorf("create as tina through the tunnel: %v", err)
	}
	rt, err := rest.TransportFor(tina)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, kube.URL+proxyPath("tunneled-other")+"/api/v1", nil)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "" {
		t.Errorf("the mount without an agent: %d %s", resp.StatusCode, body)
	}
}
