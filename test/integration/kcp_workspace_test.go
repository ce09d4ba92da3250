package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// mountProxy is the path of a mount's proxy below prefix: a workspace (/clusters/<path>) or
// the front-proxy's mapping (/services/mounts/clusters/<logical cluster>).
func mountProxy(prefix, mount string) string {
	return prefix + "/apis/mounts.kcp.io/v1alpha1/mounts/" + mount + "/proxy"
}

// requestsIn returns the requests the harness served in the workspace of cluster and path.
func requestsIn(reqs []framework.KcpRequest, cluster, path string) []framework.KcpRequest {
	var in []framework.KcpRequest
	for _, r := range reqs {
		if strings.HasPrefix(r.Path, "/clusters/"+cluster+"/") || strings.HasPrefix(r.Path, "/clusters/"+path+"/") {
			in = append(in, r)
		}
	}
	return in
}

// grantImpersonator lets the provider impersonate callers in the workspace of kube, as a
// workspace must for its Workspace mounts (kcp checks impersonation with RBAC): users, groups,
// and the credential ID of a client certificate, an extra the proxy impersonates too.
func grantImpersonator(t testing.TB, kube *framework.KubeAPIServer) {
	t.Helper()
	// artifacts/kcp/target: the bundle's own RBAC; the harness's provider is called as the
	// bundle's subject.
	applyArtifacts(t, kube, "target")
}

// TestWorkspaceMounts: through the kcp harness, a Workspace mount in root:ws-a is a soft link
// to root:ws-b, resolved through kcp. Its proxy reaches ws-b under the caller's identity (user,
// groups and extras, whether the caller came through kcp's front-proxy or is mount-apiserver's
// own admin; kcp sees the provider impersonating the caller, and ws-b's RBAC decides), for
// plain requests and upgrades (kubectl exec into a pod of ws-b), and never for a caller kcp
// did not name. A Redirect mount answers 307 to ws-b's URL with path and query, which kubectl
// follows with its own credentials, even when kcp named nobody. Paths cannot escape ws-b
// (nothing reaches it), and a mount of a workspace that does not exist answers 503.
func TestWorkspaceMounts(t *testing.T) {
	e := startKcpEnv(t, kcpEnvOptions{modify: apiOnly})
	ctx := context.Background()
	grantImpersonator(t, e.b)
	// alice may list namespaces in the target workspace, carol may not; both may enter it
	// (kcp's "access"), as may mount-apiserver's own admin.
	grant(t, e.b, "alice", "ns-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}}, kcpAccess)
	grant(t, e.b, "carol", "access", kcpAccess)
	grant(t, e.b, pki.AdminUser, "access", kcpAccess)
	grant(t, e.a, "carol", "mounts-proxy", rbacv1.PolicyRule{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"get"}})

	e.mustKubectl(t, "alice-token", "root:ws-a", "create", "-f", writeFile(t, "mounts.yaml", `apiVersion: mounts.kcp.io/v1alpha1
kind: Mount
metadata: {name: link}
spec: {type: Workspace, ref: {kind: Workspace, name: "root:ws-b"}}
---
apiVersion: mounts.kcp.io/v1alpha1
kind: Mount
metadata: {name: jump}
spec: {type: Redirect, ref: {kind: Workspace, name: "root:ws-b"}}
---
apiVersion: mounts.kcp.io/v1alpha1
kind: Mount
metadata: {name: nowhere}
spec: {type: Workspace, ref: {kind: Workspace, name: "root:gone"}}
`))
	const namespace = "/api/v1/namespaces/default"
	viaKcp, viaMapping := "/clusters/root:ws-a", framework.KcpMountsMapping+"/clusters/"+kcpClusterA
	inB := func(reqs []framework.KcpRequest) []framework.KcpRequest {
		return requestsIn(reqs, kcpClusterB, "root:ws-b")
	}

	// Through kcp v0.32.3 nobody is named: a soft link impersonates, so it refuses.
	if out, err := e.kubectl(t, "alice-token", "", "get", "--raw", mountProxy(viaKcp, "link")+namespace); err == nil || !strings.Contains(out, "without naming its caller") {
		t.Errorf("a Workspace mount served a request of nobody: %v\n%s", err, out)
	}

	// Through the front-proxy's mapping, which names the caller: ws-b sees alice and her
	// groups, and kcp sees the provider impersonating her.
	link := mustKubeconfigAt(t, e, "alice-token", mountProxy(viaMapping, "link"))
	before := len(e.kcp.Requests())
	out, err := runKubectl(link, "auth", "whoami", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl auth whoami through the Workspace mount: %v\n%s", err, out)
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &review); err != nil {
		t.Fatalf("whoami: %v\n%s", err, out)
	}
	if u := review.Status.UserInfo; u.Username != "alice" || !slices.Contains(u.Groups, "team-a") {
		t.Errorf("the workspace saw %+v, want the caller alice in team-a", u)
	}
	seen := inB(e.kcp.Requests()[before:])
	if len(seen) == 0 {
		t.Fatalf("kcp saw no request in ws-b: %+v", e.kcp.Requests()[before:])
	}
	for _, r := range seen {
		if r.User != framework.KcpProviderUser || r.As != "alice" {
			t.Errorf("kcp saw %+v, want the provider impersonating alice", r)
		}
	}

	// mount-apiserver's own admin, calling it directly with its client certificate, reaches
	// ws-b as itself too: its groups, and its certificate's credential ID as an extra.
	out = mustKubectl(t, e.server, "--server="+e.server.URL+mountProxy("/clusters/"+kcpClusterA, "link"), "auth", "whoami", "-o", "json")
	var adminReview struct {
		Status struct {
			UserInfo struct {
				Username string              `json:"username"`
				Groups   []string            `json:"groups"`
				Extra    map[string][]string `json:"extra"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &adminReview); err != nil {
		t.Fatalf("whoami: %v\n%s", err, out)
	}
	if u := adminReview.Status.UserInfo; u.Username != pki.AdminUser || !slices.Contains(u.Groups, authorization.AdminsGroup) || len(u.Extra["authentication.kubernetes.io/credential-id"]) != 1 {
		t.Errorf("the workspace saw %+v, want the caller %s in %s with its credential ID", u, pki.AdminUser, authorization.AdminsGroup)
	}

	// ws-b's RBAC decides: alice may list namespaces, carol, who may proxy in ws-a, may not.
	asUser := func(token string) *rest.Config {
		c := e.kcp.Config(token, "")
		c.Host += mountProxy(viaMapping, "link")
		return c
	}
	alice, err := kubernetes.NewForConfig(asUser("alice-token"))
	if err != nil {
		t.Fatal(err)
	}
	if list, err := alice.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil || !hasNamespace(list.Items, "default") {
		t.Errorf("alice lists namespaces of ws-b through the soft link: %v", err)
	}
	carol, err := kubernetes.NewForConfig(asUser("carol-token"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := carol.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "carol" cannot list resource "namespaces"`) {
		t.Errorf("carol lists namespaces of ws-b: %v, want ws-b's Forbidden for carol", err)
	}

	// An upgrade through the soft link: kubectl exec reaches a pod of ws-b as alice, whom
	// ws-b grants pods/exec.
	kubelet, err := framework.StartKubelet(ctx, e.b, "ws-b-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "apps", "app"); err != nil {
		t.Fatal(err)
	}
	grant(t, e.b, "alice", "exec",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}})
	before = len(e.kcp.Requests())
	if out, err := runKubectl(link, "-n", "apps", "exec", "app", "--", "echo", "through kcp"); err != nil || out != "through kcp\n" {
		t.Errorf("kubectl exec through the Workspace mount: %v %q", err, out)
	}
	execSeen := false
	for _, r := range inB(e.kcp.Requests()[before:]) {
		if strings.HasPrefix(r.Path, "/clusters/"+kcpClusterB+"/api/v1/namespaces/apps/pods/app/exec") {
			execSeen = true
			if r.User != framework.KcpProviderUser || r.As != "alice" {
				t.Errorf("kcp saw the exec as %+v, want the provider impersonating alice", r)
			}
		}
	}
	if !execSeen {
		t.Errorf("kcp saw no exec in ws-b: %+v", e.kcp.Requests()[before:])
	}

	// Redirect: 307 to ws-b's URL with path and query, not proxied.
	httpClient, err := rest.HTTPClientFor(e.kcp.Config("alice-token", ""))
	if err != nil {
		t.Fatal(err)
	}
	noFollow := *httpClient
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Get(e.kcp.URL + mountProxy(viaMapping, "jump") + namespace + "?pretty=true")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if want := e.kcp.URL + "/clusters/root:ws-b" + namespace + "?pretty=true"; resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
		t.Errorf("redirect: %d Location %q, want 307 to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	// A Redirect lends nothing: kubectl follows it to ws-b with alice's own token, even when
	// kcp named nobody, and ws-b sees alice herself.
	for _, prefix := range []string{viaKcp, viaMapping} {
		before := len(e.kcp.Requests())
		if out, err := e.kubectl(t, "alice-token", "", "get", "--raw", mountProxy(prefix, "jump")+namespace); err != nil || !strings.Contains(out, `"name":"default"`) {
			t.Errorf("alice through the redirect (%s): %v\n%s", prefix, err, out)
		}
		if after := inB(e.kcp.Requests()[before:]); len(after) != 1 || after[0].User != "alice" || after[0].As != "alice" || after[0].Path != "/clusters/root:ws-b"+namespace {
			t.Errorf("kcp saw %+v in ws-b after the redirect (%s), want alice herself at the workspace's path", after, prefix)
		}
	}
	if out, err := e.kubectl(t, "carol-token", "", "get", "--raw", mountProxy(viaKcp, "jump")+namespace); err == nil {
		t.Errorf("carol followed the redirect into ws-b:\n%s", out)
	}

	// Paths stay inside the target workspace: refused, nothing reaches ws-b.
	before = len(e.kcp.Requests())
	for _, inner := range []string{"../../other/api", "..%2F..%2Fother/api", "%2e%2e/%2e%2e/other/api", "api%2F..%2F..%2F..%2Fother", "..%5C..%5Cother", "..%2F..%2Fclusters%2Froot:ws-a/api/v1/namespaces"} {
		resp, err := httpClient.Get(e.kcp.URL + mountProxy(viaMapping, "link") + "/" + inner)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("inner path %q: %d %s, want 400", inner, resp.StatusCode, body)
		}
	}
	// What kcp saw meanwhile is mount-apiserver authorizing the caller in ws-a, no more.
	for _, r := range e.kcp.Requests()[before:] {
		if r.User != framework.KcpProviderUser || r.Path != "/clusters/"+kcpClusterA+"/apis/authorization.k8s.io/v1/subjectaccessreviews" {
			t.Errorf("an escaping path reached kcp: %+v", r)
		}
	}

	// A workspace that does not exist: 502 (a failure of the hop, never the caller's) that says so.
	resp, err = httpClient.Get(e.kcp.URL + mountProxy(viaMapping, "nowhere") + "/api")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "workspace root:gone does not exist") {
		t.Errorf("mount of a missing workspace: %d %s", resp.StatusCode, body)
	}
}

func hasNamespace(items []corev1.Namespace, name string) bool {
	for _, ns := range items {
		if ns.Name == name {
			return true
		}
	}
	return false
}

// BenchmarkWorkspaceMount: GET /version of a workspace straight from kcp (the harness, as the
// provider, itself and impersonating the caller) and through a Workspace mount (resolution
// cached, the provider impersonating the caller), all over kept-alive connections. The
// harness checks impersonation with an access review in the workspace per name, which real
// kcp does in process: compare the mount with kcp-direct-impersonating. Run with:
//
//	go test ./test/integration -run '^$' -bench BenchmarkWorkspaceMount -benchtime 2000x
func BenchmarkWorkspaceMount(b *testing.B) {
	e := startKcpEnv(b, kcpEnvOptions{modify: apiOnly})
	ctx := context.Background()
	grantImpersonator(b, e.b)
	grant(b, e.b, pki.AdminUser, "access", kcpAccess)
	inA := rest.CopyConfig(e.server.Config)
	inA.Host += "/clusters/" + kcpClusterA
	mountsClient, err := clientset.NewForConfig(inA)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := mountsClient.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec:       v1alpha1.MountSpec{Type: v1alpha1.MountTypeWorkspace, Ref: v1alpha1.ObjectReference{Kind: "Workspace", Name: "root:ws-b"}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	get := func(b *testing.B, cfg *rest.Config, url string) {
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			resp, err := client.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("%s: %d %s", url, resp.StatusCode, body)
			}
		}
	}
	b.Run("kcp-direct", func(b *testing.B) {
		get(b, e.kcp.Config(framework.KcpProviderToken, ""), e.kcp.URL+"/clusters/"+kcpClusterB+"/version")
	})
	// What the mount sends, sent by the provider itself: the harness checks the same
	// impersonation (user, two groups, one extra) with access reviews in the workspace.
	b.Run("kcp-direct-impersonating", func(b *testing.B) {
		cfg := e.kcp.Config(framework.KcpProviderToken, "")
		cfg.Impersonate = rest.ImpersonationConfig{UserName: pki.AdminUser, Groups: []string{authorization.AdminsGroup, "system:authenticated"},
			Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"X509SHA256=0"}}}
		get(b, cfg, e.kcp.URL+"/clusters/"+kcpClusterB+"/version")
	})
	b.Run("workspace-mount", func(b *testing.B) {
		get(b, e.server.Config, e.server.URL+"/clusters/"+kcpClusterA+"/apis/mounts.kcp.io/v1alpha1/mounts/team/proxy/version")
	})
}
