package integration

import (
	"net/http"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
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
	h := startTunnelHost(t)
	ctx, host := h.ctx, h.host
	h.namespace(t, "agents")
	agents := map[string]*agent.Agent{}
	for _, name := range []string{"direct", "aggregated"} {
		h.mount(t, name, "")
		sa := "agent-" + name
		spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}
		if name == "direct" {
			// The token is bound to a Secret; the ServiceAccount is created by
			// serviceAccountHub, the Secret first so that the token can name its UID.
			binding, err := host.Client.CoreV1().Secrets("agents").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "direct-binding"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: binding.Name, UID: binding.UID}
		}
		hub := h.serviceAccountHub(t, "agents", sa, spec)
		leakGrant(ctx, t, host.Client, sa, []rbacv1.PolicyRule{{
			APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/attach"}, Verbs: []string{"get", "create"}, ResourceNames: []string{name},
		}}, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: "agents"})
		if name == "direct" {
			hub = h.agg.DirectConfig(hub)
		}
		agents[name] = h.runAgent(t, hub, name)
	}

	for name, a := range agents {
		until(t, "the session of "+name, a.Connected)
		h.serves(t, name+" to serve", name)
	}

	for _, name := range []string{"direct", "aggregated"} {
		a := agents[name]
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
			code, _ := haProxyGet(t, h.caller, name, "/version")
			return code == http.StatusServiceUnavailable && !a.Connected()
		})
		t.Logf("%s: the session ended %v after %s was deleted", name, time.Since(deleted).Round(time.Millisecond), what)
		// It stays out: every new attach is refused.
		time.Sleep(3 * time.Second)
		if a.Connected() {
			t.Errorf("%s attached again after %s was deleted", name, what)
		}
	}
	// The other mounts' sessions were not touched by the checks: none left here, but the
	// server still serves its API.
	if _, err := h.admin.MountsV1alpha1().Mounts().Get(ctx, "direct", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}
