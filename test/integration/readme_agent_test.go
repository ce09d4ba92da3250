package integration

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// pageBlock returns the shell block of page (relative to the repository root) between
// <!-- name --> and <!-- /name -->.
func pageBlock(t *testing.T, page, name string) string {
	t.Helper()
	blocks, _, err := parseDocBlocks(framework.RepoRoot(), page)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if slices.Contains(b.Comments, name) {
			return b.Body
		}
	}
	t.Fatalf("%s has no block marked <!-- %s -->", page, name)
	return ""
}

// TestReadmeAgentHub runs the hub block of docs/firewall.md ("In a cluster", once README's
// "Mount a cluster behind a firewall") with the real kubectl against a host kube-apiserver
// with mount-apiserver aggregated, in a copy of the repository's artifacts and a $HOME of its
// own: it applies artifacts/agent/hub, creates the Mount and writes the agent's hub
// kubeconfig under $HOME. That kubeconfig holds only the agent's token, may attach to "prod"
// and to no other mount, and a real mount-agent started with it serves the mount. (TestDocs
// runs the whole page, with the agent as its Deployment would run.)
func TestReadmeAgentHub(t *testing.T) {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 5*time.Minute)
	defer cancel()
	bin, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(bin, "kubectl")
	c, err := framework.StartClusters(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)

	work, home := t.TempDir(), t.TempDir()
	if err := os.CopyFS(filepath.Join(work, "artifacts"), os.DirFS(filepath.Join(framework.RepoRoot(), "artifacts"))); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", pageBlock(t, "docs/firewall.md", "agent-hub"))
	cmd.Dir = work
	cmd.Env = append(docBaseEnv(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+c.Host.AdminKubeconfig, "HOME="+home)
	out, err := cmd.CombinedOutput()
	t.Logf("the hub block's output:\n%s", out)
	if err != nil {
		t.Fatalf("the hub block of docs/firewall.md failed: %v", err)
	}
	for _, want := range []string{"serviceaccount/mount-agent-prod created", "mount.mounts.kcp.io/prod created"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the output lacks %q", want)
		}
	}

	hubKubeconfig := filepath.Join(home, "mount-agent-prod", "hub.kubeconfig")
	kc, err := clientcmd.LoadFromFile(hubKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(kc.AuthInfos) != 1 || kc.AuthInfos["agent"] == nil || kc.AuthInfos["agent"].Token == "" || len(kc.AuthInfos["agent"].ClientKeyData) > 0 {
		t.Fatalf("the hub kubeconfig's users: %v; want the agent's token only", kc.AuthInfos)
	}
	canI := func(name string) string {
		out, _ := exec.Command(kubectl, "--kubeconfig", hubKubeconfig, "auth", "can-i", "create", "mounts.mounts.kcp.io/"+name, "--subresource=attach").Output()
		return strings.TrimSpace(string(out))
	}
	if got := canI("prod"); got != "yes" {
		t.Errorf("the agent may create mounts/attach of prod: %q", got)
	}
	if got := canI("other"); got != "no" {
		t.Errorf("the agent may create mounts/attach of another mount: %q", got)
	}

	// A real agent with that kubeconfig, its own credentials on the remote (a user that may
	// impersonate), serves alice's requests through prod.
	remote := c.Remote
	created(t)(remote.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "impersonator"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"users", "groups"}, Verbs: []string{"impersonate"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}}},
	}, metav1.CreateOptions{}))
	for user, role := range map[string]string{"agent": "impersonator", "alice": "cluster-admin"} {
		created(t)(remote.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
		}, metav1.CreateOptions{}))
	}
	created(t)(c.Host.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "prod-proxy"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, ResourceNames: []string{"prod"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}))
	created(t)(c.Host.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-prod-proxy"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "prod-proxy"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}},
	}, metav1.CreateOptions{}))
	agentCfg, err := remote.UserConfig("agent")
	if err != nil {
		t.Fatal(err)
	}
	framework.StartAgent(t, hubKubeconfig, "prod", strings.TrimPrefix(remote.URL, "https://"), "--kubeconfig", writeKubeconfig(t, agentCfg))
	alice, err := c.Host.UserConfig("alice")
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(alice)
	if err != nil {
		t.Fatal(err)
	}
	url := c.Host.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/prod/proxy/api/v1/namespaces/kube-system"
	var last int
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		resp.Body.Close()
		last = resp.StatusCode
		return last == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the agent started with the page's kubeconfig does not serve prod: last %d", last)
	}
}
