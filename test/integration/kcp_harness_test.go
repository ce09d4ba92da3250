package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// kcpEnv is mount-apiserver behind the kcp harness (framework.Kcp, which does what DESIGN.md
// section 1 observed kcp do and refuses what kcp refuses; kcp itself cannot be built here):
// the root workspace, where the export lives, and two consumer workspaces root:ws-a and
// root:ws-b, each a real kube-apiserver holding RBAC and Secrets, and, where asked for, a
// real remote kube-apiserver for URL mounts. Every workspace gets the RBAC of artifacts/kcp
// that real kcp needs: the provider's roles in root (its export's virtual workspace, reading
// Workspaces), the consumer roles and the provider's access reviews in ws-a and ws-b.
type kcpEnv struct {
	kcp      *framework.Kcp
	server   *framework.Server
	root     *framework.KubeAPIServer
	a, b     *framework.KubeAPIServer
	remote   *framework.KubeAPIServer
	provider clientset.Interface // through the APIExport's virtual workspace, all clusters
}

// kcpEnvOptions shape a kcpEnv.
type kcpEnvOptions struct {
	// version is the kcp the harness reproduces; "" is kcp v0.32.3.
	version framework.KcpVersion
	// workspaceMounts turns kcp's feature gate WorkspaceMounts on.
	workspaceMounts bool
	// modify changes mount-apiserver's options after the harness configured them.
	modify func(*options.Options)
	// remote starts the remote kube-apiserver of URL mounts.
	remote bool
}

const (
	kcpClusterA = "2a2a2a2a"
	kcpClusterB = "2b2b2b2b"
)

// startKubes starts n kube-apiservers at once (each takes seconds to become ready) and stops
// them with t.Cleanup.
func startKubes(t testing.TB, n int) []*framework.KubeAPIServer {
	t.Helper()
	kubes := make([]*framework.KubeAPIServer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		dir := t.TempDir()
		wg.Go(func() { kubes[i], errs[i] = framework.StartKubeAPIServer(context.Background(), dir) })
	}
	wg.Wait()
	for i, kube := range kubes {
		if kube != nil {
			t.Cleanup(kube.Stop)
		}
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	return kubes
}

// applyArtifacts applies files or kustomizations of artifacts/kcp in kube, as kcp's admin.
func applyArtifacts(t testing.TB, kube *framework.KubeAPIServer, paths ...string) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(kcpArtifacts(), p)
		flag := "-f"
		if info, err := os.Stat(full); err == nil && info.IsDir() {
			flag = "-k"
		}
		if out, err := exec.Command("kubectl", "--kubeconfig", kube.AdminKubeconfig, "apply", flag, full).CombinedOutput(); err != nil {
			t.Fatalf("applying artifacts/kcp/%s: %v\n%s", p, err, out)
		}
	}
}

// kcpRoot gives the harness's root workspace (the export's) content, with the provider's
// roles of artifacts/kcp: its export's virtual workspace, and reading root's Workspaces.
func kcpRoot(t testing.TB, k *framework.Kcp, root *framework.KubeAPIServer) {
	t.Helper()
	k.AddWorkspace("root", "root", root, false)
	applyArtifacts(t, root, "rbac.yaml", "parent")
}

func startKcpEnv(t testing.TB, opts kcpEnvOptions) *kcpEnv {
	t.Helper()
	if opts.version == "" {
		opts.version = framework.KcpV0323
	}
	e := &kcpEnv{kcp: framework.StartKcpWith(t, framework.KcpOptions{Version: opts.version, WorkspaceMounts: opts.workspaceMounts, BindingDelay: 2 * time.Second})}
	n := 3
	if opts.remote {
		n++
	}
	kubes := startKubes(t, n)
	e.root, e.a, e.b = kubes[0], kubes[1], kubes[2]
	if opts.remote {
		e.remote = kubes[3]
	}
	kcpRoot(t, e.kcp, e.root)
	e.kcp.AddWorkspace("root:ws-a", kcpClusterA, e.a, true)
	e.kcp.AddWorkspace("root:ws-b", kcpClusterB, e.b, true)
	e.kcp.AddUser("alice-token", framework.KcpUser{Name: "alice", Groups: []string{"team-a"}})
	e.kcp.AddUser("bob-token", framework.KcpUser{Name: "bob", Groups: []string{"team-b"}})
	e.kcp.AddUser("carol-token", framework.KcpUser{Name: "carol"})
	for _, k := range []*framework.KubeAPIServer{e.a, e.b} {
		// The consumer roles, and the provider's access reviews there.
		applyArtifacts(t, k, "consumer")
	}
	grant(t, e.a, "alice", "mounts-editor", mountsEditor...)
	grant(t, e.b, "bob", "mounts-editor", mountsEditor...)
	grant(t, e.a, "carol", "mounts-viewer", rbacv1.PolicyRule{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts", "mounts/status"}, Verbs: []string{"get", "list", "watch"}}, kcpAccess)

	e.server = startKcpServer(t, e.kcp, opts.modify)
	var err error
	if e.provider, err = clientset.NewForConfig(e.kcp.Config(framework.KcpProviderToken, "")); err != nil {
		t.Fatal(err)
	}
	return e
}

// kcpAccess is kcp's "access" to a workspace, which every user but kcp's admins needs there
// before any other right counts.
var kcpAccess = rbacv1.PolicyRule{NonResourceURLs: []string{"/"}, Verbs: []string{"access"}}

// startKcpServer starts mount-apiserver configured to meet the harness k, then modified, and
// points the export's virtual storage at it.
func startKcpServer(t testing.TB, k *framework.Kcp, modify func(*options.Options)) *framework.Server {
	t.Helper()
	s := framework.StartInProcess(t, "", func(o *options.Options) {
		if err := k.Configure(o); err != nil {
			t.Fatal(err)
		}
		if modify != nil {
			modify(o)
		}
	})
	if err := k.ServeMounts(s.URL, s.CAData); err != nil {
		t.Fatal(err)
	}
	return s
}

// remoteSecretOfAlice has alice create, through kcp, the Secret clusters/remote in root:ws-a
// with the remote kube-apiserver's admin kubeconfig, for URL mounts to reference.
func (e *kcpEnv) remoteSecretOfAlice(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	kubeconfig, err := framework.KubeconfigBytes(e.remote.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	aliceWS, err := kubernetes.NewForConfig(e.kcp.Config("alice-token", "root:ws-a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aliceWS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := aliceWS.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "remote"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// mountsEditor is what an editor of Mounts holds in a consumer workspace: Mounts, the proxy,
// lending, reading the Secrets its mounts reference, and kcp's "access".
var mountsEditor = []rbacv1.PolicyRule{
	{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts", "mounts/status", "mounts/proxy"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "lend"}},
	{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create"}},
	{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"create"}},
	kcpAccess,
}

func grant(t testing.TB, k *framework.KubeAPIServer, userName, role string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if _, err := k.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role + "-" + userName}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role + "-" + userName},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role + "-" + userName},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: userName}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// kubectl runs the real kubectl as token in workspace path of the harness.
func (e *kcpEnv) kubectl(t *testing.T, token, path string, args ...string) (string, error) {
	t.Helper()
	kubeconfig, err := e.kcp.Kubeconfig(token, path)
	if err != nil {
		t.Fatal(err)
	}
	// Every call here is one short request: a hang fails the test in minutes, not at the
	// suite's timeout (once, CI saw kubectl wait 12 minutes on a proxied create's answer).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("kubectl %s did not finish within 2 minutes: %w", strings.Join(args, " "), ctx.Err())
	}
	return string(out), err
}

func (e *kcpEnv) mustKubectl(t *testing.T, token, path string, args ...string) string {
	t.Helper()
	out, err := e.kubectl(t, token, path, args...)
	if err != nil {
		t.Fatalf("kubectl %s (as %s in %s): %v\n%s", strings.Join(args, " "), token, path, err, out)
	}
	return out
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestKcpConsumerWorkspaces drives Mounts with real kubectl through the kcp harness in two
// consumer workspaces, as kcp v0.32.3 forwards them (no caller identity): each workspace sees
// only its own, the provider's wildcard watch through the APIExport's virtual workspace sees
// both, discovery and explain work, and kcp's RBAC decides who may proxy.
func TestKcpConsumerWorkspaces(t *testing.T) {
	e := startKcpEnv(t, kcpEnvOptions{modify: apiOnly})
	ctx := context.Background()

	all, err := e.provider.MountsV1alpha1().Mounts().Watch(ctx, metav1.ListOptions{})
	if err == nil {
		all.Stop()
		t.Fatal("a watch at kcp's base URL, outside any workspace, was served")
	}
	provider, err := clientset.NewForConfig(func() *rest.Config {
		c := e.kcp.Config(framework.KcpProviderToken, "")
		c.Host = e.kcp.APIExportURL() + "/clusters/*"
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	watchAll, err := provider.MountsV1alpha1().Mounts().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("the provider's wildcard watch through the APIExport's virtual workspace: %v", err)
	}
	defer watchAll.Stop()

	file := writeFile(t, "mount.yaml", "apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata: {name: team}\nspec: {type: Workspace, ref: {name: \"root:ws-b\"}}\n")
	e.mustKubectl(t, "alice-token", "root:ws-a", "apply", "-f", file)
	e.mustKubectl(t, "bob-token", "root:ws-b", "apply", "--server-side", "-f", file)
	e.mustKubectl(t, "alice-token", "root:ws-a", "create", "-f", writeFile(t, "other.yaml", "apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata: {name: only-a}\nspec: {type: Redirect, ref: {name: \"root:ws-b\"}}\n"))

	for _, c := range []struct{ token, path, want string }{
		{"alice-token", "root:ws-a", "only-a@" + kcpClusterA + " team@" + kcpClusterA},
		{"bob-token", "root:ws-b", "team@" + kcpClusterB},
		{"carol-token", "root:ws-a", "only-a@" + kcpClusterA + " team@" + kcpClusterA},
	} {
		out := e.mustKubectl(t, c.token, c.path, "get", "mounts", "-o", `jsonpath={range .items[*]}{.metadata.name}@{.metadata.annotations.kcp\.io/cluster}{" "}{end}`)
		if strings.TrimSpace(out) != c.want {
			t.Errorf("%s in %s sees %q, want %q", c.token, c.path, out, c.want)
		}
	}
	// Bob may not use ws-a at all; a workspace he has no rights in looks like any other.
	if out, err := e.kubectl(t, "bob-token", "root:ws-a", "get", "mounts"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("bob lists mounts of ws-a: %v\n%s", err, out)
	}
	// The wildcard path is the provider's: kcp refuses it to consumers.
	if out, err := e.kubectl(t, "alice-token", "*", "get", "mounts"); err == nil {
		t.Errorf("alice listed mounts of all workspaces:\n%s", out)
	}

	seen := map[string]bool{}
	deadline := time.After(30 * time.Second)
	for len(seen) < 3 {
		select {
		case ev := <-watchAll.ResultChan():
			m, ok := ev.Object.(interface{ GetAnnotations() map[string]string })
			if !ok {
				t.Fatalf("wildcard watch: %v", ev.Object)
			}
			meta := ev.Object.(metav1.Object)
			seen[m.GetAnnotations()["kcp.io/cluster"]+"/"+meta.GetName()] = true
		case <-deadline:
			t.Fatalf("the wildcard watch saw %v, want both workspaces' mounts", seen)
		}
	}
	if !seen[kcpClusterA+"/team"] || !seen[kcpClusterB+"/team"] || !seen[kcpClusterA+"/only-a"] {
		t.Errorf("wildcard watch saw %v", seen)
	}

	if out := e.mustKubectl(t, "alice-token", "root:ws-a", "api-resources", "--api-group", "mounts.kcp.io"); !strings.Contains(out, "Mount") {
		t.Errorf("api-resources through kcp:\n%s", out)
	}
	if out := e.mustKubectl(t, "alice-token", "root:ws-a", "explain", "mount.spec.type"); !strings.Contains(out, "FIELD: type <string>") {
		t.Errorf("explain through kcp:\n%s", out)
	}

	// A watch in one workspace sees its own changes only.
	w := exec.Command("kubectl", "--kubeconfig", mustKubeconfig(t, e.kcp, "bob-token", "root:ws-b"), "get", "mounts", "-w", "--output-watch-events", "--no-headers", "-o", "custom-columns=EVENT:.type,NAME:.object.metadata.name")
	stdout, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
	e.mustKubectl(t, "alice-token", "root:ws-a", "delete", "mount", "team")
	e.mustKubectl(t, "bob-token", "root:ws-b", "delete", "mount", "team")
	lines := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		var acc string
		for {
			n, err := stdout.Read(buf)
			acc += string(buf[:n])
			for {
				line, rest, ok := strings.Cut(acc, "\n")
				if !ok {
					break
				}
				lines <- line
				acc = rest
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	var events []string
	timeout := time.After(30 * time.Second)
	for !strings.Contains(strings.Join(events, ","), "DELETED") {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl get -w ended: %v", events)
			}
			events = append(events, strings.Join(strings.Fields(l), " "))
		case <-timeout:
			t.Fatalf("kubectl get -w in ws-b saw %v, want its mount's deletion", events)
		}
	}
	if got := strings.Join(events, ","); got != "ADDED team,DELETED team" {
		t.Errorf("kubectl get -w in ws-b: %q, want its own mount added and deleted only", got)
	}

	// What went to mount-apiserver carried no credentials or identity of the caller: kcp
	// v0.32.3 strips them all and names nobody.
	for _, f := range e.kcp.Forwarded() {
		for key := range f.Header {
			if key == "Authorization" || strings.HasPrefix(key, "Impersonate-") || strings.HasPrefix(key, "X-Remote-") {
				t.Errorf("forwarded %s with %s", f.Path, key)
			}
		}
	}
}

func mustKubeconfig(t *testing.T, k *framework.Kcp, token, path string) string {
	t.Helper()
	file, err := k.Kubeconfig(token, path)
	if err != nil {
		t.Fatal(err)
	}
	return file
}

// TestKcpURLMountIdentity proxies a URL mount of a consumer workspace, whose kubeconfig
// Secret lives in that workspace and is read through the APIExport's permission claim, to a
// real remote kube-apiserver. kcp v0.32.3 names no caller: a mount that impersonates its
// callers refuses such requests, one with its own credentials serves them; kcp main's
// X-Remote-* (both states of main) and the front-proxy's mapping carry the caller, who
// reaches the target as themself. A user without mounts/proxy in the workspace is refused by
// kcp.
func TestKcpURLMountIdentity(t *testing.T) {
	for _, version := range []framework.KcpVersion{framework.KcpV0323, framework.KcpMain202608, framework.KcpMain} {
		t.Run(string(version), func(t *testing.T) {
			e := startKcpEnv(t, kcpEnvOptions{version: version, modify: apiOnly, remote: true})
			e.remoteSecretOfAlice(t)
			urlMountYAML := func(name, mode string) string {
				return writeFile(t, name+".yaml", "apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata: {name: "+name+"}\nspec: {type: URL, ref: {namespace: clusters, name: remote}, identity: {mode: "+mode+"}}\n")
			}

			// Creating a URL mount needs the Secret's reader: a caller kcp names.
			out, err := e.kubectl(t, "alice-token", "root:ws-a", "create", "-f", urlMountYAML("as-caller", "Impersonate"))
			if version == framework.KcpV0323 {
				if err == nil || !strings.Contains(out, "without naming its caller") {
					t.Fatalf("kcp v0.32.3 created a URL mount for nobody: %v\n%s", err, out)
				}
				// The front-proxy's mapping names the caller.
				mapping := mustKubeconfigAt(t, e, "alice-token", framework.KcpMountsMapping+"/clusters/"+kcpClusterA)
				for _, m := range []struct{ name, mode string }{{"as-caller", "Impersonate"}, {"as-mount", "MountCredentials"}} {
					if out, err := runKubectl(mapping, "create", "-f", urlMountYAML(m.name, m.mode)); err != nil {
						t.Fatalf("creating %s through the front-proxy mapping: %v\n%s", m.name, err, out)
					}
				}
			} else {
				if err != nil {
					t.Fatalf("kcp main: %v\n%s", err, out)
				}
				e.mustKubectl(t, "alice-token", "root:ws-a", "create", "-f", urlMountYAML("as-mount", "MountCredentials"))
			}
			// Carol may read mounts but not lend: the lending check asks kcp's RBAC.
			if out, err := runKubectl(mustKubeconfigAt(t, e, "carol-token", framework.KcpMountsMapping+"/clusters/"+kcpClusterA), "create", "-f", urlMountYAML("carols", "Impersonate")); err == nil || !strings.Contains(out, "forbidden") {
				t.Errorf("carol created a URL mount: %v\n%s", err, out)
			}

			// kubectl's --raw paths are absolute: they name the workspace or the mapping.
			viaKcp := func(name string) string {
				return "/clusters/root:ws-a/apis/mounts.kcp.io/v1alpha1/mounts/" + name + "/proxy/apis/authentication.k8s.io/v1/selfsubjectreviews"
			}
			viaMapping := func(name string) string {
				return framework.KcpMountsMapping + "/clusters/" + kcpClusterA + "/apis/mounts.kcp.io/v1alpha1/mounts/" + name + "/proxy/apis/authentication.k8s.io/v1/selfsubjectreviews"
			}
			whoami := func(out string) string {
				var review struct {
					Status struct {
						UserInfo struct {
							Username string `json:"username"`
						} `json:"userInfo"`
					} `json:"status"`
				}
				if err := json.Unmarshal([]byte(out), &review); err != nil {
					return "(" + out + ")"
				}
				return review.Status.UserInfo.Username
			}
			review := writeFile(t, "review.json", `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)

			// Through kcp's virtual storage.
			out, err = e.kubectl(t, "alice-token", "", "create", "--raw", viaKcp("as-caller"), "-f", review)
			if version == framework.KcpV0323 {
				if err == nil || !strings.Contains(out, "without naming its caller") {
					t.Errorf("kcp v0.32.3: a mount impersonating its callers served a request of nobody: %v\n%s", err, out)
				}
			} else if err != nil || whoami(out) != "alice" {
				t.Errorf("kcp main: the target saw %q (%v), want alice", whoami(out), err)
			}
			out, err = e.kubectl(t, "alice-token", "", "create", "--raw", viaKcp("as-mount"), "-f", review)
			if who := whoami(out); err != nil || who == "alice" || who == "" || strings.HasPrefix(who, "(") {
				t.Errorf("a mount with its own credentials: the target saw %q (%v)", whoami(out), err)
			}
			// Through the front-proxy's mapping, as a mounted workspace's status.URL is called.
			mapping := mustKubeconfigAt(t, e, "alice-token", framework.KcpMountsMapping+"/clusters/"+kcpClusterA)
			if out, err := runKubectl(mapping, "create", "--raw", viaMapping("as-caller"), "-f", review); err != nil || whoami(out) != "alice" {
				t.Errorf("through the front-proxy mapping the target saw %q (%v), want alice", whoami(out), err)
			}
			// Carol lacks mounts/proxy: kcp refuses her, and so does the mapping.
			if out, err := e.kubectl(t, "carol-token", "", "create", "--raw", viaKcp("as-mount"), "-f", review); err == nil || !strings.Contains(out, "forbidden") {
				t.Errorf("carol proxied through kcp: %v\n%s", err, out)
			}
			if out, err := runKubectl(mustKubeconfigAt(t, e, "carol-token", framework.KcpMountsMapping+"/clusters/"+kcpClusterA), "create", "--raw", viaMapping("as-mount"), "-f", review); err == nil || !strings.Contains(out, "forbidden") {
				t.Errorf("carol proxied through the front-proxy mapping: %v\n%s", err, out)
			}
			// Bob's workspace has no such mount; his rights are not alice's.
			if out, err := runKubectl(mustKubeconfigAt(t, e, "bob-token", framework.KcpMountsMapping+"/clusters/"+kcpClusterA), "create", "--raw", viaMapping("as-caller"), "-f", review); err == nil {
				t.Errorf("bob proxied through alice's mount: %s", out)
			}
		})
	}
}

func mustKubeconfigAt(t *testing.T, e *kcpEnv, token, path string) string {
	t.Helper()
	cfg := e.kcp.Config(token, "")
	cfg.Host += path
	data, err := framework.KubeconfigBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, token+".kubeconfig", string(data))
}

func runKubectl(kubeconfig string, args ...string) (string, error) {
	out, err := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// TestKcpMountedWorkspace mounts a URL Mount as a workspace, as kcp's workspace mounts do:
// the status controller makes the Mount Ready with status.URL under the front-proxy's
// /services/mounts mapping, the front-proxy (harness) reads that Mount and sends the
// workspace's requests there with its requestheader certificate and X-Remote-*, and the
// caller reaches the real remote kube-apiserver as themself; kcp's RBAC in the mount's
// workspace (mounts/proxy) decides who may.
func TestKcpMountedWorkspace(t *testing.T) {
	e := startKcpEnv(t, kcpEnvOptions{remote: true, workspaceMounts: true})
	ctx := context.Background()
	e.remoteSecretOfAlice(t)
	// kcp v0.32.3 names nobody, so the URL mount is created through the mapping, as alice.
	mapping := mustKubeconfigAt(t, e, "alice-token", framework.KcpMountsMapping+"/clusters/"+kcpClusterA)
	if out, err := runKubectl(mapping, "create", "-f", writeFile(t, "m.yaml", "apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata: {name: prod}\nspec: {type: URL, ref: {namespace: clusters, name: remote}}\n")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	wantURL := e.kcp.URL + framework.KcpMountsMapping + "/clusters/" + kcpClusterA + "/apis/mounts.kcp.io/v1alpha1/mounts/prod/proxy"
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := e.kubectl(t, "alice-token", "root:ws-a", "get", "mount", "prod", "-o", `jsonpath={.status.phase} {.status.URL}`)
		last = out
		return err == nil && out == "Ready "+wantURL, nil
	}); err != nil {
		t.Fatalf("the mount never became Ready with the front-proxy's URL: %q", last)
	}
	// kcp copies status.URL once, when it reconciles the Workspace, and is Ready only if the
	// Mount was: the Workspace is created once the Mount is Ready.
	e.kcp.AddMountedWorkspace("root:prod", "3c3c3c3c", kcpClusterA, "prod")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return e.kcp.WorkspacePhase("root:prod") == "Ready", nil
	}); err != nil {
		t.Fatalf("the mounted workspace is %s", e.kcp.WorkspacePhase("root:prod"))
	}

	// The mounted workspace is the remote cluster, seen as the caller.
	out := e.mustKubectl(t, "alice-token", "root:prod", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if out != "alice" {
		t.Errorf("in the mounted workspace alice is %q at the target", out)
	}
	if out, err := e.kubectl(t, "alice-token", "root:prod", "get", "namespaces"); err == nil || !strings.Contains(out, `User "alice" cannot list resource "namespaces"`) {
		t.Errorf("the remote cluster's RBAC decides in the mounted workspace: %v\n%s", err, out)
	}
	// Bob may not proxy through ws-a's mount: he is refused by the mount's workspace RBAC.
	review := writeFile(t, "review.json", `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	if out, err := e.kubectl(t, "bob-token", "", "create", "--raw", "/clusters/root:prod/apis/authentication.k8s.io/v1/selfsubjectreviews", "-f", review); err == nil || !strings.Contains(out, `User "bob" cannot create resource "mounts/proxy"`) {
		t.Errorf("bob in alice's mounted workspace: %v\n%s", err, out)
	}
}
