package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestTunnelNamedAgent: mount-apiserver aggregated into a real kube-apiserver (the host), a
// real target kube-apiserver reached only through agents whose hub identities are
// ServiceAccounts of the host, all in one namespace with one RBAC binding for all of them (the
// layout of a fleet). Mount "edge" names its agent (spec.tunnel.agentUser):
//   - the named ServiceAccount attaches through the host's aggregator and the mount serves;
//   - another ServiceAccount, which RBAC allows to attach to "edge" too, is refused, with the
//     reason;
//   - a tenant who may update Mounts but not read their Secret cannot name itself the agent
//     (the field is authorized like creating the mount);
//   - the admin names a user that runs no agent: the first agent's session ends (the Mount's
//     update closes it) and it cannot attach again although RBAC allows it, nor can anyone
//     else; named, the other one serves;
//   - an agent with no RBAC binding at all attaches to mount-apiserver directly to a mount
//     that names it.
func TestTunnelNamedAgent(t *testing.T) {
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
	leakMust(t, leakErr(host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents"}}, metav1.CreateOptions{})))
	leakMust(t, leakErr(host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "target"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{})))
	const named, other = "system:serviceaccount:agents:edge-agent", "system:serviceaccount:agents:other-agent"
	admin := leakMountsClient(t, host.AdminConfig)
	if _, err := admin.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1alpha1.MountSpec{
		Ref:      v1alpha1.ObjectReference{Namespace: "clusters", Name: "target"},
		Identity: v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeMountCredentials},
		Tunnel:   &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer, AgentUser: named},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A fleet's one binding: every ServiceAccount of namespace agents may attach to any mount
	// as far as RBAC goes (the host's aggregator checks "get" before it forwards an attach).
	// Which mount each may serve is the mounts' word.
	leakGrant(ctx, t, host.Client, "agents", []rbacv1.PolicyRule{{
		APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/attach"}, Verbs: []string{"get", "create"},
	}}, rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:agents"})
	hubOf := func(sa string) *rest.Config {
		leakMust(t, leakErr(host.Client.CoreV1().ServiceAccounts("agents").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})))
		token, err := host.Client.CoreV1().ServiceAccounts("agents").CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return &rest.Config{Host: host.URL, BearerToken: token.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: host.ClientCA.CertPEM}}
	}
	run := func(hub *rest.Config, mount string) *agent.Agent {
		attachURL, err := agent.AttachURL(hub.Host, "", mount)
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(&agent.Config{Hub: hub, AttachURL: attachURL, Mount: mount, Target: strings.TrimPrefix(target.URL, "https://"), MaxBackoff: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		agentCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(agentCtx) }()
		t.Cleanup(func() { stop(); <-done })
		return a
	}
	namedHub, otherHub := hubOf("edge-agent"), hubOf("other-agent")

	caller := agg.DirectConfig(host.AdminConfig)
	namedAgent := run(namedHub, "edge")
	until(t, "the named agent's session", namedAgent.Connected)
	until(t, "edge to serve", func() bool {
		code, body := haProxyGet(t, caller, "edge", "/version")
		return code == http.StatusOK && strings.Contains(body, "gitVersion")
	})

	// The other agent, allowed by RBAC, is refused, and says why.
	code, body := attachGet(t, otherHub)
	if code != http.StatusForbidden || !strings.Contains(body, "names another user as its agent") {
		t.Fatalf("the other agent's attach: %d %s", code, body)
	}
	otherAgent := run(otherHub, "edge")
	time.Sleep(3 * time.Second)
	if otherAgent.Connected() || !namedAgent.Connected() {
		t.Fatalf("the other agent attached (%v), or the named one lost its session (%v)", otherAgent.Connected(), namedAgent.Connected())
	}

	// A tenant who may update Mounts, and not read their Secret, may not name the agent.
	leakGrant(ctx, t, host.Client, "mount-updater", []rbacv1.PolicyRule{{
		APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts"}, Verbs: []string{"get", "update", "patch"},
	}}, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "tenant"})
	tenantConfig := rest.CopyConfig(host.AdminConfig)
	tenantConfig.Impersonate = rest.ImpersonationConfig{UserName: "tenant"}
	tenant := leakMountsClient(t, tenantConfig)
	patch := []byte(`{"spec":{"tunnel":{"agentUser":"system:serviceaccount:agents:other-agent"}}}`)
	_, err = tenant.MountsV1alpha1().Mounts().Patch(ctx, "edge", types.MergePatchType, patch, metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may not get Secret") {
		t.Fatalf("a tenant named the agent: %v", err)
	}

	// The admin names a user that runs no agent: the named one's session ends, RBAC still
	// allows it but it cannot attach again, and nobody takes its place.
	nobody := []byte(`{"spec":{"tunnel":{"agentUser":"system:serviceaccount:agents:nobody"}}}`)
	if _, err := admin.MountsV1alpha1().Mounts().Patch(ctx, "edge", types.MergePatchType, nobody, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, "the first agent's session to end", func() bool { return !namedAgent.Connected() })
	time.Sleep(3 * time.Second)
	if namedAgent.Connected() || otherAgent.Connected() {
		t.Fatalf("an agent the mount does not name holds its session: first %v, other %v", namedAgent.Connected(), otherAgent.Connected())
	}

	// The admin names the other agent: it serves.
	if _, err := admin.MountsV1alpha1().Mounts().Patch(ctx, "edge", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, "the other agent's session", otherAgent.Connected)
	until(t, "edge to serve through the other agent", func() bool {
		code, body := haProxyGet(t, caller, "edge", "/version")
		return code == http.StatusOK && strings.Contains(body, "gitVersion")
	})
	if code, body := attachGet(t, namedHub); code != http.StatusForbidden {
		t.Fatalf("the agent no longer named: %d %s", code, body)
	}

	// An agent with no RBAC binding at all attaches to mount-apiserver directly (its token
	// reviewed by the host) to a mount that names it.
	leakMust(t, leakErr(host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "solo"}}, metav1.CreateOptions{})))
	if _, err := admin.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "solo"}, Spec: v1alpha1.MountSpec{
		Ref:      v1alpha1.ObjectReference{Namespace: "clusters", Name: "target"},
		Identity: v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeMountCredentials},
		Tunnel:   &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer, AgentUser: "system:serviceaccount:solo:agent"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leakMust(t, leakErr(host.Client.CoreV1().ServiceAccounts("solo").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{})))
	token, err := host.Client.CoreV1().ServiceAccounts("solo").CreateToken(ctx, "agent", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	soloHub := agg.DirectConfig(&rest.Config{Host: host.URL, BearerToken: token.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: host.ClientCA.CertPEM}})
	solo := run(soloHub, "solo")
	until(t, "the unbound agent's session", solo.Connected)
	until(t, "solo to serve", func() bool {
		code, body := haProxyGet(t, caller, "solo", "/version")
		return code == http.StatusOK && strings.Contains(body, "gitVersion")
	})
}

// attachGet sends a plain GET (no upgrade) to mounts/edge/attach with hub's credentials: the
// server's authorization answers it before its handler does (which wants an upgrade).
func attachGet(t *testing.T, hub *rest.Config) (int, string) {
	t.Helper()
	client, err := rest.HTTPClientFor(hub)
	if err != nil {
		t.Fatal(err)
	}
	client.Timeout = 30 * time.Second
	resp, err := client.Get(hub.Host + "/apis/mounts.kcp.io/v1alpha1/mounts/edge/attach")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := new(strings.Builder)
	_, _ = io.Copy(body, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, body.String()
}
