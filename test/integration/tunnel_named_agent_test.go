package integration

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
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
	h := startTunnelHost(t)
	ctx, host, admin := h.ctx, h.host, h.admin
	h.namespace(t, "agents")
	const named, other = "system:serviceaccount:agents:edge-agent", "system:serviceaccount:agents:other-agent"
	h.mount(t, "edge", named)

	// A fleet's one binding: every ServiceAccount of namespace agents may attach to any mount
	// as far as RBAC goes (the host's aggregator checks "get" before it forwards an attach).
	// Which mount each may serve is the mounts' word.
	leakGrant(ctx, t, host.Client, "agents", []rbacv1.PolicyRule{{
		APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/attach"}, Verbs: []string{"get", "create"},
	}}, rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:agents"})
	anHour := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}
	namedHub, otherHub := h.serviceAccountHub(t, "agents", "edge-agent", anHour), h.serviceAccountHub(t, "agents", "other-agent", anHour)

	namedAgent := h.runAgent(t, namedHub, "edge")
	until(t, "the named agent's session", namedAgent.Connected)
	h.serves(t, "edge to serve", "edge")

	// The other agent, allowed by RBAC, is refused, and says why.
	code, body := attachGet(t, otherHub)
	if code != http.StatusForbidden || !strings.Contains(body, "names another user as its agent") {
		t.Fatalf("the other agent's attach: %d %s", code, body)
	}
	otherAgent := h.runAgent(t, otherHub, "edge")
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
	patch := []byte(`{"spec":{"tunnel":{"agentUser":"` + other + `"}}}`)
	// Until the host's authorizer has seen the new binding, the patch is refused by RBAC
	// ("cannot patch"); the refusal under test is the one that follows.
	var err error
	until(t, "the tenant's patch refused for the Secret, not by RBAC", func() bool {
		_, err = tenant.MountsV1alpha1().Mounts().Patch(ctx, "edge", types.MergePatchType, patch, metav1.PatchOptions{})
		return err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot patch resource")
	})
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
	h.serves(t, "edge to serve through the other agent", "edge")
	if code, body := attachGet(t, namedHub); code != http.StatusForbidden {
		t.Fatalf("the agent no longer named: %d %s", code, body)
	}

	// An agent with no RBAC binding at all attaches to mount-apiserver directly (its token
	// reviewed by the host) to a mount that names it.
	h.namespace(t, "solo")
	h.mount(t, "solo", "system:serviceaccount:solo:agent")
	solo := h.runAgent(t, h.agg.DirectConfig(h.serviceAccountHub(t, "solo", "agent", anHour)), "solo")
	until(t, "the unbound agent's session", solo.Connected)
	h.serves(t, "solo to serve", "solo")
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
