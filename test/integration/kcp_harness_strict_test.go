package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestKcpHarnessIsStrict checks the harness's refusals that real kcp showed (DESIGN.md
// section 1, issue #28), each against the same request granted what kcp needs, so that no kcp
// test passes only because the harness is kinder than kcp: verb "access" in every workspace,
// access reviews through kcp's chain with exactly the groups sent, the provider's rights in
// its export's workspace and in the parents of targets, the binding window, discovery names
// from the APIResourceSchema, status.URL copied once, and the WorkspaceMounts gate.
func TestKcpHarnessIsStrict(t *testing.T) {
	ctx := context.Background()
	k := framework.StartKcpWith(t, framework.KcpOptions{Version: framework.KcpV0323, WorkspaceMounts: true, BindingDelay: 3 * time.Second})
	kubes := startKubes(t, 2)
	root, a := kubes[0], kubes[1]
	kcpRoot(t, k, root)
	k.AddWorkspace("root:ws-a", kcpClusterA, a, true)
	applyArtifacts(t, a, "consumer")
	k.AddUser("alice-token", framework.KcpUser{Name: "alice", Groups: []string{"team-a"}})
	k.AddUser("dave-token", framework.KcpUser{Name: "dave"})
	k.AddUser("other-token", framework.KcpUser{Name: "other-provider"})
	s := startKcpServer(t, k, apiOnly)
	e := &kcpEnv{kcp: k, server: s}

	t.Run("access", func(t *testing.T) {
		grant(t, a, "alice", "mounts-reader", rbacv1.PolicyRule{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts"}, Verbs: []string{"list"}})
		// kubectl's discovery is refused too ("Forbidden: unknown", as issue #28 saw).
		if out, err := e.kubectl(t, "alice-token", "root:ws-a", "get", "mounts"); err == nil || !strings.Contains(out, "Forbidden") {
			t.Errorf("alice listed mounts without access to the workspace: %v\n%s", err, out)
		}
		out, err := e.kubectl(t, "alice-token", "", "get", "--raw", "/clusters/root:ws-a/apis/mounts.kcp.io/v1alpha1/mounts")
		if err == nil || !strings.Contains(out, `User "alice" cannot list resource "mounts"`) || !strings.Contains(out, "access denied") {
			t.Errorf("alice listed mounts without access to the workspace: %v\n%s", err, out)
		}
		grant(t, a, "alice", "access", kcpAccess)
		if out, err := e.kubectl(t, "alice-token", "root:ws-a", "get", "mounts"); err != nil {
			t.Errorf("alice with access: %v\n%s", err, out)
		}
	})

	t.Run("access reviews through kcp's chain", func(t *testing.T) {
		provider, err := kubernetes.NewForConfig(k.Config(framework.KcpProviderToken, "root:ws-a"))
		if err != nil {
			t.Fatal(err)
		}
		// dave may get secrets through system:authenticated, but has no access.
		if _, err := a.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "authenticated-secrets"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "authenticated-secrets"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "authenticated-secrets"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		review := func(groups ...string) bool {
			t.Helper()
			r, err := provider.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "dave", Groups: groups, ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "default", Name: "x"},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("the provider's access review: %v", err)
			}
			return r.Status.Allowed
		}
		if review("system:authenticated") {
			t.Error("a subject without access was allowed by a review in the workspace")
		}
		grant(t, a, "dave", "access", kcpAccess)
		if !review("system:authenticated") {
			t.Error("a subject with access and the right was denied")
		}
		// Exactly the groups sent: without system:authenticated the right is not there.
		if review() {
			t.Error("a review without system:authenticated was allowed what only that group holds")
		}
		// The reviewer needs the right to review.
		other, err := kubernetes.NewForConfig(k.Config("other-token", "root:ws-a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "dave", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets"}}}, metav1.CreateOptions{}); err == nil {
			t.Error("a user without access or create subjectaccessreviews reviewed access")
		}
	})

	t.Run("the provider's rights", func(t *testing.T) {
		bindings := k.APIExportURL() + "/clusters/*/apis/apis.kcp.io/v1alpha2/apibindings"
		for _, c := range []struct {
			token string
			want  int
		}{{framework.KcpProviderToken, http.StatusOK}, {"other-token", http.StatusForbidden}} {
			if code, body := kcpRaw(t, k, c.token, http.MethodGet, strings.TrimPrefix(bindings, k.URL), nil, nil); code != c.want {
				t.Errorf("%s lists the export's bindings: %d %.300s, want %d", c.token, code, body, c.want)
			}
		}
		// kcp names the export's virtual workspace by logical cluster; the path is refused.
		if code, _ := kcpRaw(t, k, framework.KcpProviderToken, http.MethodGet, "/services/apiexport/root:nowhere/mounts.kcp.io/clusters/*/apis/apis.kcp.io/v1alpha2/apibindings", nil, nil); code != http.StatusNotFound {
			t.Errorf("an unknown export's virtual workspace: %d", code)
		}
		// Workspaces are read with get in the parent (artifacts/kcp/parent grants it).
		for _, c := range []struct {
			token string
			want  int
		}{{framework.KcpProviderToken, http.StatusOK}, {"other-token", http.StatusForbidden}} {
			if code, body := kcpRaw(t, k, c.token, http.MethodGet, "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces/ws-a", nil, nil); code != c.want {
				t.Errorf("%s reads Workspace ws-a in root: %d %.300s, want %d", c.token, code, body, c.want)
			}
		}
	})

	t.Run("binding window and schema names", func(t *testing.T) {
		grant(t, a, "alice", "mounts-all", mountsEditor...)
		// A new binding answers 404 for a while, then serves.
		k.SetBound(false, kcpClusterA)
		k.SetBound(true, kcpClusterA)
		if out, err := e.kubectl(t, "alice-token", "", "get", "--raw", "/clusters/root:ws-a/apis/mounts.kcp.io/v1alpha1/mounts"); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("mounts right after the binding: %v\n%s", err, out)
		}
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			_, err := e.kubectl(t, "alice-token", "root:ws-a", "get", "mounts")
			return err == nil, nil
		}); err != nil {
			t.Fatal("mounts never served after the binding")
		}
		// The short name is the schema's: without it in the schema, kubectl get mnt fails.
		if out, err := e.kubectl(t, "alice-token", "root:ws-a", "get", "mnt"); err != nil {
			t.Errorf("kubectl get mnt with the generated schema: %v\n%s", err, out)
		}
		if err := k.SetSchemaNames("{plural: mounts, singular: mount, kind: Mount, listKind: MountList}"); err != nil {
			t.Fatal(err)
		}
		// A fresh discovery cache: kubectl would otherwise remember the short name.
		if out, err := e.kubectl(t, "alice-token", "root:ws-a", "--cache-dir", t.TempDir(), "get", "mnt"); err == nil || !strings.Contains(out, `doesn't have a resource type "mnt"`) {
			t.Errorf("kubectl get mnt through a schema without short names:\n%s", out)
		}
	})

	t.Run("status.URL copied once", func(t *testing.T) {
		grant(t, root, "alice", "root-ns", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}}, kcpAccess)
		grant(t, a, "alice", "ws-a-ns", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}})
		mounts := mountsIn(t, s.Config, kcpClusterA)
		m, err := mounts.Create(ctx, workspaceMount("once", "root:ws-a"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		setURL := func(u string) {
			t.Helper()
			m.Status = v1alpha1.MountStatus{Phase: v1alpha1.MountPhaseReady, URL: u}
			if m, err = mounts.UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		setURL(k.URL + "/clusters/root:ws-a")
		k.AddMountedWorkspace("root:ws-a:once", "5e5e5e5e", kcpClusterA, "once")
		servedIn := func() string {
			t.Helper()
			var phase string
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if phase = k.WorkspacePhase("root:ws-a:once"); phase == "Ready" {
					break
				}
			}
			before := len(k.Requests())
			if code, body := kcpRaw(t, k, "alice-token", http.MethodGet, "/clusters/root:ws-a:once/api/v1/namespaces/default", nil, nil); code != http.StatusOK {
				t.Fatalf("through the mounted workspace (%s): %d %.300s", phase, code, body)
			}
			for _, r := range k.Requests()[before:] {
				if strings.HasSuffix(r.Path, "/api/v1/namespaces/default") {
					return r.Path
				}
			}
			return ""
		}
		if got := servedIn(); got != "/clusters/root:ws-a/api/v1/namespaces/default" {
			t.Errorf("served at %q", got)
		}
		setURL(k.URL + "/clusters/root")
		if got := servedIn(); got != "/clusters/root:ws-a/api/v1/namespaces/default" {
			t.Errorf("after the Mount's URL changed, served at %q: kcp does not notice", got)
		}
		k.TouchWorkspace("root:ws-a:once")
		time.Sleep(time.Second)
		if got := servedIn(); got != "/clusters/root/api/v1/namespaces/default" {
			t.Errorf("after an event of the Workspace, served at %q", got)
		}
	})

	t.Run("WorkspaceMounts gate", func(t *testing.T) {
		off := framework.StartKcp(t, framework.KcpV0323)
		off.AddUser("alice-token", framework.KcpUser{Name: "alice"})
		off.AddMountedWorkspace("root:mounted", "6f6f6f6f", kcpClusterA, "once")
		if phase := off.WorkspacePhase("root:mounted"); phase != "Scheduling" {
			t.Errorf("a mounted workspace without the gate is %q", phase)
		}
		if code, body := kcpRaw(t, off, "alice-token", http.MethodGet, "/clusters/root:mounted/api", nil, nil); code != http.StatusNotFound {
			t.Errorf("a mounted workspace without the gate: %d %s", code, body)
		}
	})
}

// TestKcpDirectCallerIsAuthenticated: a caller who reaches mount-apiserver directly with a
// client certificate of its CA (not through kcp) is authorized in a logical cluster by
// kcp's RBAC, through access reviews the server sends to kcp. kcp evaluates them with exactly
// the groups sent (the harness does, as real kcp v0.32.3 did), so the review must carry
// system:authenticated, as a Kubernetes authenticator would give it: a workspace that grants
// "access" and reading Mounts to all authenticated users lets this caller list Mounts
// (issue #28, bug 1: without the group, "Forbidden: unknown").
func TestKcpDirectCallerIsAuthenticated(t *testing.T) {
	ctx := context.Background()
	k := framework.StartKcp(t, framework.KcpV0323)
	a := startKubes(t, 1)[0]
	k.AddWorkspace("root:ws-a", kcpClusterA, a, true)
	applyArtifacts(t, a, "consumer")
	// mounts-view (with access) for every authenticated user of ws-a.
	if _, err := a.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "authenticated-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mounts-view"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := startKcpServer(t, k, apiOnly)
	cfg, err := pkiUserKubeconfig(t, s, "edith")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mountsIn(t, cfg, kcpClusterA).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("a direct caller, whom ws-a lets read Mounts as an authenticated user: %v", err)
	}
}
