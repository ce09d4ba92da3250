package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// tunnelHost is the set-up of the tunnel tests whose agents are ServiceAccounts of a real
// host: a host kube-apiserver, mount-apiserver aggregated into it (agents re-checked and
// mounts probed every second), and a target kube-apiserver that only agents reach, its
// kubeconfig in the host's Secret clusters/target.
type tunnelHost struct {
	ctx    context.Context
	host   *framework.KubeAPIServer
	target *framework.KubeAPIServer
	agg    *framework.Aggregated
	// admin manages Mounts through the host; caller is the host's admin sent to
	// mount-apiserver directly, for proxied requests.
	admin  clientset.Interface
	caller *rest.Config
}

func startTunnelHost(t *testing.T) *tunnelHost {
	t.Helper()
	ctx := klog.NewContext(context.Background(), klog.Background())
	host, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	target, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Stop)
	agg, err := framework.StartAggregated(ctx, host, t.TempDir(), func(o *options.Options) {
		o.Tunnel.AuthorizationInterval = time.Second
		o.StatusProbeInterval = time.Second
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agg.Stop() })
	kubeconfig, err := framework.KubeconfigBytes(target.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	leakMust(t, leakErr(host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{})))
	leakMust(t, leakErr(host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "target"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{})))
	return &tunnelHost{ctx: ctx, host: host, target: target, agg: agg, admin: leakMountsClient(t, host.AdminConfig), caller: agg.DirectConfig(host.AdminConfig)}
}

// namespace creates a namespace of the host.
func (h *tunnelHost) namespace(t *testing.T, name string) {
	t.Helper()
	leakMust(t, leakErr(h.host.Client.CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})))
}

// mount creates a tunnel mount of the target (Server credentials) that names agentUser as its
// agent, or none when it is empty.
func (h *tunnelHost) mount(t *testing.T, name, agentUser string) {
	t.Helper()
	if _, err := h.admin.MountsV1alpha1().Mounts().Create(h.ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MountSpec{
		Ref:      v1alpha1.ObjectReference{Namespace: "clusters", Name: "target"},
		Identity: v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeMountCredentials},
		Tunnel:   &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer, AgentUser: agentUser},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// serviceAccountHub creates ServiceAccount namespace/name on the host and returns a hub config
// with a token of it (TokenRequest spec), aimed at the host, as the README's `kubectl create
// token`.
func (h *tunnelHost) serviceAccountHub(t *testing.T, namespace, name string, spec authenticationv1.TokenRequestSpec) *rest.Config {
	t.Helper()
	leakMust(t, leakErr(h.host.Client.CoreV1().ServiceAccounts(namespace).Create(h.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})))
	token, err := h.host.Client.CoreV1().ServiceAccounts(namespace).CreateToken(h.ctx, name, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: h.host.URL, BearerToken: token.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: h.host.ClientCA.CertPEM}}
}

// runAgent runs an agent of mount with hub's credentials until the test ends.
func (h *tunnelHost) runAgent(t *testing.T, hub *rest.Config, mount string) *agent.Agent {
	t.Helper()
	attachURL, err := agent.AttachURL(hub.Host, "", mount)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(&agent.Config{Hub: hub, AttachURL: attachURL, Mount: mount, Target: strings.TrimPrefix(h.target.URL, "https://"), MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return a
}

// serves waits until the target's /version answers through mount.
func (h *tunnelHost) serves(t *testing.T, what, mount string) {
	t.Helper()
	until(t, what, func() bool {
		code, body := haProxyGet(t, h.caller, mount, "/version")
		return code == http.StatusOK && strings.Contains(body, "gitVersion")
	})
}
