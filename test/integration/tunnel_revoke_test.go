package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestTunnelAgentRevoked: mount-apiserver aggregated into a real kube-apiserver (the host), a
// real target kube-apiserver behind two agents whose hub identities are ServiceAccounts of
// the host with a token each (a TokenRequest of a day, as the README's `kubectl create
// token`), allowed to attach to their own mount only:
//   - "direct" attaches to mount-apiserver itself with a token bound to a Secret: the server
//     reviews the token (TokenReview, cached for the delegated authentication's
//     --authentication-token-webhook-cache-ttl, 10 s). The Secret is deleted, which revokes
//     the token while the ServiceAccount stays;
//   - "aggregated" attaches through the host's aggregator, as the README's agent does: the
//     server sees only the aggregator's word for who it is (its token never reaches it). Its
//     ServiceAccount is deleted.
//
// Both serve their mount, then are revoked (RoleBindings left in place, so the agent's name
// would still be authorized): the session ends, with --tunnel-authorization-interval=1s, and
// the agent cannot attach again. Before issue #23 the re-check asked the authorizer about the
// cached name, and both sessions lived on.
func TestTunnelAgentRevoked(t *testing.T) {
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
	admin := leakMountsClient(t, host.AdminConfig)

	type running struct {
		agent *agent.Agent
		done  chan struct{}
	}
	agents := map[string]running{}
	for _, name := range []string{"direct", "aggregated"} {
		if _, err := admin.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MountSpec{
			Ref:      v1alpha1.ObjectReference{Namespace: "clusters", Name: "target"},
			Identity: v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeMountCredentials},
			Tunnel:   &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		sa := "agent-" + name
		leakMust(t, leakErr(host.Client.CoreV1().ServiceAccounts("agents").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})))
		leakGrant(ctx, t, host.Client, sa, []rbacv1.PolicyRule{{
			APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/attach"}, Verbs: []string{"get", "create"}, ResourceNames: []string{name},
		}}, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: "agents"})
		spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}
		if name == "direct" {
			binding, err := host.Client.CoreV1().Secrets("agents").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "direct-binding"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: binding.Name, UID: binding.UID}
		}
		token, err := host.Client.CoreV1().ServiceAccounts("agents").CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hub := &rest.Config{Host: host.URL, BearerToken: token.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: host.ClientCA.CertPEM}}
		if name == "direct" {
			hub = agg.DirectConfig(hub)
		}
		attachURL, err := agent.AttachURL(hub.Host, "", name)
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(&agent.Config{Hub: hub, AttachURL: attachURL, Mount: name, Target: strings.TrimPrefix(target.URL, "https://"), MaxBackoff: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		agentCtx, stop := context.WithCancel(ctx)
		r := running{agent: a, done: make(chan struct{})}
		go func() { defer close(r.done); _ = a.Run(agentCtx) }()
		t.Cleanup(func() { stop(); <-r.done })
		agents[name] = r
	}

	caller := agg.DirectConfig(host.AdminConfig)
	for name, r := range agents {
		until(t, "the session of "+name, r.agent.Connected)
		until(t, name+" to serve", func() bool {
			code, body := haProxyGet(t, caller, name, "/version")
			return code == http.StatusOK && strings.Contains(body, "gitVersion")
		})
	}

	for _, name := range []string{"direct", "aggregated"} {
		r := agents[name]
		what := "its ServiceAccount"
		var err error
		if name == "direct" {
			what = "the Secret its token is bound to"
			err = host.Client.CoreV1().Secrets("agents").Delete(ctx, "direct-binding", metav1.DeleteOptions{})
		} else {
			err = host.Client.CoreV1().ServiceAccounts("agents").Delete(ctx, "agent-"+name, metav1.DeleteOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		until(t, "the session of "+name+" to end", func() bool {
			code, _ := haProxyGet(t, caller, name, "/version")
			return code == http.StatusServiceUnavailable && !r.agent.Connected()
		})
		t.Logf("%s: the session ended %v after %s was deleted", name, time.Since(deleted).Round(time.Millisecond), what)
		// It stays out: every new attach is refused.
		time.Sleep(3 * time.Second)
		if r.agent.Connected() {
			t.Errorf("%s attached again after %s was deleted", name, what)
		}
	}
	// The other mounts' sessions were not touched by the checks: none left here, but the
	// server still serves its API.
	if _, err := admin.MountsV1alpha1().Mounts().Get(ctx, "direct", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}
