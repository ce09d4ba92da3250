package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/fanout"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// fanoutMemberTimeout is the hub's --fanout-member-timeout in the fan-out tests.
const fanoutMemberTimeout = 5 * time.Second

// fanoutEnv is mount-apiserver aggregated into a host kube-apiserver (whose RBAC decides who
// may use which mount), with mounts of three real target kube-apiservers: t1 reached only
// through an agent's tunnel, t2 through a plain and a renaming mount, t3 through a mount that
// impersonates callers and one that lends its own credentials; t3 goes down in the middle.
type fanoutEnv struct {
	c          *framework.Clusters
	t1, t2, t3 *framework.KubeAPIServer
	kubectl    string
	// admin may proxy through every mount and do everything on the targets; alice may use
	// the fan-out and the mounts t2-plain and t3-a and read on the targets; bob may use
	// t2-plain only, not the fan-out; carol may use every mount, and read on t1 and t3 only.
	admin, alice, bob, carol *rest.Config
	// agentUp and agentDown start and stop t1's agent: t1-tunnel goes offline while t1
	// stays up and keeps its history.
	agentUp   func(t *testing.T)
	agentDown func()
}

// The mounts of fanoutEnv: name -> target, labels.
var fanoutMounts = []struct {
	name, target string
	labels       map[string]string
}{
	{"t1-tunnel", "t1", map[string]string{"env": "prod"}},
	{"t2-plain", "t2", map[string]string{"env": "prod"}},
	{"t2-renamed", "t2", map[string]string{"env": "dev"}},
	{"t3-a", "t3", map[string]string{"env": "prod"}},
	{"t3-b", "t3", map[string]string{"env": "dev"}},
}

func startFanoutEnv(ctx context.Context, t *testing.T) *fanoutEnv {
	t.Helper()
	start := time.Now()
	e := &fanoutEnv{kubectl: realKubectl(t)}
	var err error
	e.c, err = framework.StartClusters(ctx, t.TempDir(), func(o *options.Options) {
		o.StatusController = false
		o.FanOutMemberTimeout = fanoutMemberTimeout
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.c.Stop)
	e.t1 = e.c.Remote
	for _, k := range []**framework.KubeAPIServer{&e.t2, &e.t3} {
		if *k, err = framework.StartKubeAPIServer(ctx, t.TempDir()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup((*k).Stop)
	}
	host := e.c.Host
	for name, cfg := range map[string]**rest.Config{"fan-admin": &e.admin, "alice": &e.alice, "bob": &e.bob, "carol": &e.carol} {
		if *cfg, err = host.UserConfig(name, "system:authenticated"); err != nil {
			t.Fatal(err)
		}
	}
	proxyRule := func(names ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"get"}, ResourceNames: names}}
	}
	user := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
	}
	// The admin may send every verb through every mount: writes reach the fan-out itself.
	leakGrant(ctx, t, host.Client, "fan-admin", []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"*"}}}, user("fan-admin"))
	// "*" in resourceNames lets alice use the fan-out; it reaches the mounts she may use.
	leakGrant(ctx, t, host.Client, "fan-alice", proxyRule(fanout.Name, "t2-plain", "t3-a"), user("alice"))
	leakGrant(ctx, t, host.Client, "fan-bob", proxyRule("t2-plain"), user("bob"))
	leakGrant(ctx, t, host.Client, "fan-carol", proxyRule(), user("carol"))
	leakGrant(ctx, t, host.Client, "t1-agent", []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/attach"}, Verbs: []string{"get", "create"}, ResourceNames: []string{"t1-tunnel"}}}, user("t1-agent"))

	kubeconfigs := map[string][]byte{}
	for name, target := range map[string]*framework.KubeAPIServer{"t1": e.t1, "t2": e.t2, "t3": e.t3} {
		kubeconfigs[name] = prepareTarget(ctx, t, target)
		bind := func(binding, role string, subjects ...rbacv1.Subject) {
			leakMust(t, leakErr(target.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: binding},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects:   subjects,
			}, metav1.CreateOptions{})))
		}
		bind("fan-admin", "cluster-admin", user("fan-admin"), user("hub:fan-admin"))
		// "view" is filled by kube-controller-manager, which does not run here.
		leakMust(t, leakErr(target.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fan-reader"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{})))
		readers := []rbacv1.Subject{user("alice"), user("bob"), user("hub:alice"), user("mount-lender")}
		if name != "t2" {
			readers = append(readers, user("carol"), user("hub:carol"))
		}
		bind("fan-readers", "fan-reader", readers...)
		leakMust(t, leakErr(target.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fan"}}, metav1.CreateOptions{})))
		for _, cm := range []struct{ name, app string }{{name + "-a", "web"}, {name + "-b", "db"}} {
			labels := map[string]string{"app": cm.app}
			if name == "t2" && cm.app == "web" {
				labels[targetGroup+"/tier"] = "gold" // the renaming mount shows it as kubevirt.io/tier
			}
			leakMust(t, leakErr(target.Client.CoreV1().ConfigMaps("fan").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm.name, Labels: labels}}, metav1.CreateOptions{})))
		}
	}

	leakMust(t, leakErr(host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{})))
	mountsClient := leakMountsClient(t, host.AdminConfig).MountsV1alpha1().Mounts()
	for _, fm := range fanoutMounts {
		leakMust(t, leakErr(host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fm.name}, Data: map[string][]byte{"kubeconfig": kubeconfigs[fm.target]}}, metav1.CreateOptions{})))
		m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: fm.name, Labels: fm.labels}, Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: fm.name}}}
		switch fm.name {
		case "t1-tunnel":
			m.Spec.Tunnel = &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer}
		case "t2-renamed":
			m.Spec.Rewrites = renamingMountSpec()
			m.Spec.Identity = v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeImpersonate, UserPrefix: "hub:"}
		case "t3-b":
			m.Spec.Identity = v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeMountCredentials}
		}
		leakMust(t, leakErr(mountsClient.Create(ctx, m, metav1.CreateOptions{})))
	}

	// t1's agent, in this process, attached through the host's aggregator.
	agentHub, err := host.UserConfig("t1-agent")
	if err != nil {
		t.Fatal(err)
	}
	attachURL, err := agent.AttachURL(agentHub.Host, "", "t1-tunnel")
	if err != nil {
		t.Fatal(err)
	}
	var stopAgent func()
	e.agentUp = func(t *testing.T) {
		t.Helper()
		ag, err := agent.New(&agent.Config{Hub: agentHub, AttachURL: attachURL, Mount: "t1-tunnel", Target: strings.TrimPrefix(e.t1.URL, "https://"), MaxBackoff: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		agentCtx, cancel := context.WithCancel(ctx)
		agentDone := make(chan struct{})
		go func() { defer close(agentDone); _ = ag.Run(agentCtx) }()
		stopAgent = func() { cancel(); <-agentDone }
	}
	e.agentDown = func() {
		if stopAgent != nil {
			stopAgent()
			stopAgent = nil
		}
	}
	e.agentUp(t)
	t.Cleanup(func() { e.agentDown() })
	until(t, "the tunnel of t1-tunnel serves", func() bool {
		code, _ := haProxyGet(t, e.admin, "t1-tunnel", "/api/v1/namespaces/fan/configmaps")
		return code == http.StatusOK
	})
	t.Logf("set-up ready after %v", time.Since(start).Round(time.Millisecond))
	return e
}

// kubeconfig writes a kubeconfig of cfg whose server is the hub's mounts/*/proxy through the
// host's aggregator, with suffix (e.g. "/labels/env=prod").
func (e *fanoutEnv) kubeconfig(t *testing.T, cfg *rest.Config, suffix string) string {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Host = strings.TrimSuffix(cfg.Host, "/") + "/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy" + suffix
	data, err := framework.KubeconfigBytes(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fanout.kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (e *fanoutEnv) run(kubeconfig string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.kubectl, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(filepath.Dir(kubeconfig), "cache")}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *fanoutEnv) must(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := e.run(kubeconfig, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// prepareTarget lets the mount's credentials (user mount-lender) impersonate on target; it
// returns the kubeconfig of mount-lender.
func prepareTarget(ctx context.Context, t *testing.T, target *framework.KubeAPIServer) []byte {
	t.Helper()
	lender, err := target.UserConfig("mount-lender")
	if err != nil {
		t.Fatal(err)
	}
	leakGrant(ctx, t, target.Client, "impersonator", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
	}, rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "mount-lender"})
	kubeconfig, err := framework.KubeconfigBytes(lender)
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// tableRows parses kubectl's table output into "mount/name" per row, sorted, with the
// header's columns; mountCol and nameCol name the columns to read.
func tableRows(t *testing.T, out string) (header []string, rows []string) {
	t.Helper()
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(line)
		if strings.HasPrefix(line, "Warning:") || len(fields) == 0 {
			continue
		}
		if header == nil && i >= 0 && fields[0] != "" && strings.ToUpper(fields[0]) == fields[0] && (slices.Contains(fields, "MOUNT") || slices.Contains(fields, "NAME")) {
			header = fields
			continue
		}
		m, n := slices.Index(header, "MOUNT"), slices.Index(header, "NAME")
		if m < 0 || n < 0 || len(fields) <= max(m, n) {
			t.Fatalf("row %q under header %q", line, header)
		}
		rows = append(rows, fields[m]+"/"+fields[n])
	}
	sort.Strings(rows)
	return header, rows
}

// every is "mount/name" for each mount of names and each of their target's objects.
func every(mounts ...string) []string {
	var rows []string
	for _, m := range mounts {
		target := strings.SplitN(m, "-", 2)[0]
		rows = append(rows, m+"/"+target+"-a", m+"/"+target+"-b")
	}
	sort.Strings(rows)
	return rows
}

var allFanoutMounts = []string{"t1-tunnel", "t2-plain", "t2-renamed", "t3-a", "t3-b"}

// TestFanOut: kubectl lists, pages, selects, watches and is refused through mounts/*/proxy of
// a hub aggregated into a host whose RBAC says who may use which mount, over three real
// target kube-apiservers (one behind a tunnel, one behind a renaming mount too); a client-go
// informer lists and watches across them, keeps streaming while one target is down, sees
// that target's changes once it is back, and resumes from its last resourceVersion without
// listing again.
func TestFanOut(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	e := startFanoutEnv(ctx, t)
	admin := e.kubeconfig(t, e.admin, "")

	t.Run("list", func(t *testing.T) {
		header, rows := tableRows(t, e.must(t, admin, "get", "configmaps", "-n", "fan"))
		if len(header) == 0 || header[0] != "MOUNT" {
			t.Errorf("header %v: the first column is not MOUNT", header)
		}
		if want := every(allFanoutMounts...); !slices.Equal(rows, want) {
			t.Errorf("rows %v, want %v", rows, want)
		}
		out := e.must(t, admin, "get", "configmaps", "-A")
		for _, w := range every(allFanoutMounts...) {
			if m, n, _ := strings.Cut(w, "/"); !regexpMatch(`(?m)^fan\s+`+m+`\s+`+n+`\s`, out) {
				t.Errorf("kubectl get -A lacks %s:\n%s", w, out)
			}
		}
		names := strings.Fields(e.must(t, admin, "get", "configmaps", "-n", "fan", "-o", "name"))
		sort.Strings(names)
		var want []string
		for _, w := range every(allFanoutMounts...) {
			want = append(want, "configmap/"+strings.Replace(w, "/", fanout.NameSeparator, 1))
		}
		if !slices.Equal(names, want) {
			t.Errorf("-o name: %v, want %v (names unique across mounts)", names, want)
		}
		// One unpaged LIST, streamed: every object, a composite resourceVersion.
		whole := listRaw(t, e.admin, "/api/v1/namespaces/fan/configmaps", url.Values{})
		sort.Strings(whole.Items)
		var wantNames []string
		for _, w := range every(allFanoutMounts...) {
			wantNames = append(wantNames, strings.Replace(w, "/", fanout.NameSeparator, 1))
		}
		if !slices.Equal(whole.Items, wantNames) || whole.Continue != "" || !fanout.IsComposite(whole.ResourceVersion) {
			t.Errorf("unpaged LIST: %v, continue %q, resourceVersion %q", whole.Items, whole.Continue, whole.ResourceVersion)
		}
		// A cluster-scoped resource: each mount's namespaces.
		out = e.must(t, admin, "get", "namespaces", "--field-selector", "metadata.name=fan")
		if _, rows := tableRows(t, out); !slices.Equal(rows, []string{"t1-tunnel/fan", "t2-plain/fan", "t2-renamed/fan", "t3-a/fan", "t3-b/fan"}) {
			t.Errorf("kubectl get namespaces --field-selector metadata.name=fan: %v\n%s", rows, out)
		}
		// Field selectors on the names the fan-out gives: one mount's object, or all but it.
		if _, rows := tableRows(t, e.must(t, admin, "get", "configmaps", "-n", "fan", "--field-selector", "metadata.name=t2-renamed:t2-b")); !slices.Equal(rows, []string{"t2-renamed/t2-b"}) {
			t.Errorf("--field-selector metadata.name=t2-renamed:t2-b: %v", rows)
		}
		_, rows = tableRows(t, e.must(t, admin, "get", "configmaps", "-n", "fan", "--field-selector", "metadata.name!=t2-renamed:t2-b"))
		if want := slices.DeleteFunc(every(allFanoutMounts...), func(r string) bool { return r == "t2-renamed/t2-b" }); !slices.Equal(rows, want) {
			t.Errorf("--field-selector metadata.name!=t2-renamed:t2-b: %v, want %v", rows, want)
		}
		// Discovery is what the targets serve in common, so kubectl resolves short names.
		if _, rows := tableRows(t, e.must(t, admin, "get", "cm", "-n", "fan")); len(rows) != 10 {
			t.Errorf("kubectl get cm: %v", rows)
		}
	})

	t.Run("labels", func(t *testing.T) {
		_, rows := tableRows(t, e.must(t, admin, "get", "configmaps", "-n", "fan", "-l", "app=web"))
		var want []string
		for _, w := range every(allFanoutMounts...) {
			if strings.HasSuffix(w, "-a") {
				want = append(want, w)
			}
		}
		if !slices.Equal(rows, want) {
			t.Errorf("-l app=web: %v, want %v", rows, want)
		}
		if _, rows := tableRows(t, e.must(t, admin, "get", "configmaps", "-n", "fan", "-l", fanout.MountLabel+"=t3-a")); !slices.Equal(rows, every("t3-a")) {
			t.Errorf("-l %s=t3-a: %v", fanout.MountLabel, rows)
		}
		if _, rows := tableRows(t, e.must(t, admin, "get", "configmaps", "-n", "fan", "-l", fanout.MountLabel+" in (t1-tunnel,t2-renamed),app=db")); !slices.Equal(rows, []string{"t1-tunnel/t1-b", "t2-renamed/t2-b"}) {
			t.Errorf("-l mount in (...),app=db: %v", rows)
		}
		// The renaming mount presents t2's label x.virtualization.example.org/tier as
		// kubevirt.io/tier and renames the selector it is asked; the plain one does not.
		if _, rows := tableRows(t, e.must(t, admin, "get", "configmaps", "-n", "fan", "-l", presentedGroup+"/tier=gold")); !slices.Equal(rows, []string{"t2-renamed/t2-a"}) {
			t.Errorf("-l kubevirt.io/tier=gold: %v", rows)
		}
		if _, rows := tableRows(t, e.must(t, admin, "get", "configmaps", "-n", "fan", "-l", targetGroup+"/tier=gold")); !slices.Contains(rows, "t2-plain/t2-a") {
			t.Errorf("-l x.virtualization.example.org/tier=gold: %v", rows)
		}
		out := e.must(t, admin, "get", "configmaps", "-n", "fan", "-L", fanout.MountLabel, "--no-headers")
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != f[len(f)-1] {
				t.Errorf("-L %s: the label column of %q is not its mount", fanout.MountLabel, line)
			}
		}
		// The subset form: mounts selected by their own labels, in the path kubectl keeps.
		prod := e.kubeconfig(t, e.admin, "/labels/env=prod")
		if _, rows := tableRows(t, e.must(t, prod, "get", "configmaps", "-n", "fan")); !slices.Equal(rows, every("t1-tunnel", "t2-plain", "t3-a")) {
			t.Errorf("labels/env=prod: %v", rows)
		}
		notProd := e.kubeconfig(t, e.admin, "/labels/env!=prod,env")
		if _, rows := tableRows(t, e.must(t, notProd, "get", "configmaps", "-n", "fan")); !slices.Equal(rows, every("t2-renamed", "t3-b")) {
			t.Errorf("labels/env!=prod,env: %v", rows)
		}
	})

	t.Run("paging", func(t *testing.T) {
		_, rows := tableRows(t, e.must(t, admin, "get", "configmaps", "-n", "fan", "--chunk-size=3"))
		if want := every(allFanoutMounts...); !slices.Equal(rows, want) {
			t.Errorf("--chunk-size=3: %v, want %v", rows, want)
		}
		// Page by page: each page at most its limit, every object once, one resourceVersion.
		var names []string
		cont, rv := "", ""
		for page := 0; ; page++ {
			l := listRaw(t, e.admin, "/api/v1/namespaces/fan/configmaps", url.Values{"limit": {"3"}, "continue": {cont}})
			if len(l.Items) > 3 {
				t.Errorf("page %d has %d items", page, len(l.Items))
			}
			if rv == "" {
				rv = l.ResourceVersion
			} else if l.ResourceVersion != rv {
				t.Errorf("page %d: resourceVersion %s, first page %s", page, l.ResourceVersion, rv)
			}
			names = append(names, l.Items...)
			if cont = l.Continue; cont == "" {
				break
			}
			if page > 10 {
				t.Fatal("more pages than objects")
			}
		}
		sort.Strings(names)
		var want []string
		for _, w := range every(allFanoutMounts...) {
			want = append(want, strings.Replace(w, "/", fanout.NameSeparator, 1))
		}
		if !slices.Equal(names, want) {
			t.Errorf("pages gave %v, want %v", names, want)
		}
		if !fanout.IsComposite(rv) {
			t.Errorf("resourceVersion %q is not a composite one", rv)
		}
	})

	t.Run("restricted caller", func(t *testing.T) {
		_, rows := tableRows(t, e.must(t, e.kubeconfig(t, e.alice, ""), "get", "configmaps", "-n", "fan"))
		if want := every("t2-plain", "t3-a"); !slices.Equal(rows, want) {
			t.Errorf("alice sees %v, want %v", rows, want)
		}
		if out, err := e.run(e.kubeconfig(t, e.bob, ""), "get", "configmaps", "-n", "fan"); err == nil || !strings.Contains(out, "Forbidden") {
			t.Errorf("bob, who may not use the fan-out: %v\n%s", err, out)
		}
		if code, body := getRaw(t, e.bob, "/api/v1/namespaces/fan/configmaps", nil); code != http.StatusForbidden || !strings.Contains(body, `"*"`) || !strings.Contains(body, "mounts/proxy") {
			t.Errorf("bob, who may not use the fan-out: %d %s", code, body)
		}
	})

	t.Run("forged continue token", func(t *testing.T) {
		path := "/api/v1/namespaces/fan/configmaps"
		first := listRaw(t, e.alice, path, url.Values{"limit": {"1"}})
		if first.Continue == "" {
			t.Fatal("no continue token")
		}
		mid := len(first.Continue) / 2
		c := byte('A')
		if first.Continue[mid] == 'A' {
			c = 'B'
		}
		changed := first.Continue[:mid] + string(c) + first.Continue[mid+1:]
		if code, body := getRaw(t, e.alice, path, url.Values{"limit": {"1"}, "continue": {changed}}); code != http.StatusBadRequest || !strings.Contains(body, "continue token") {
			t.Errorf("a changed token: %d %s", code, body)
		}
		// A token that names mounts alice may not use (the admin's) is refused, not served.
		adminTok := listRaw(t, e.admin, path, url.Values{"limit": {"1"}}).Continue
		code, body := getRaw(t, e.alice, path, url.Values{"limit": {"1"}, "continue": {adminTok}})
		if code != http.StatusForbidden || !strings.Contains(body, "t1-tunnel") {
			t.Errorf("the admin's token used by alice: %d %s", code, body)
		}
		if code, body := getRaw(t, e.alice, "/api/v1/namespaces/kube-system/configmaps", url.Values{"limit": {"1"}, "continue": {first.Continue}}); code != http.StatusBadRequest {
			t.Errorf("a token of another list: %d %s", code, body)
		}
	})

	t.Run("writes refused", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			says string
		}{
			{[]string{"create", "configmap", "x", "-n", "fan"}, "mounts/*/proxy serves reads across mounts only (list, watch, discovery), and POST is no read: send it to one mount, through mounts/<name>/proxy/api/v1/namespaces/fan/configmaps"},
			{[]string{"delete", "configmap", "t2-plain:t2-a", "-n", "fan"}, "DELETE is no read"},
			// kubectl label reads the object first.
			{[]string{"label", "configmap", "t2-plain:t2-a", "-n", "fan", "x=y"}, `"t2-plain:t2-a" is in mount "t2-plain": get it through mounts/t2-plain/proxy/api/v1/namespaces/fan/configmaps/t2-a`},
		} {
			out, err := e.run(admin, c.args...)
			if err == nil || !strings.Contains(out, c.says) {
				t.Errorf("kubectl %s: %v\n%s\nwant it to say %s", strings.Join(c.args, " "), err, out, c.says)
			}
		}
		out, err := e.run(admin, "get", "configmap", "t2-plain:t2-a", "-n", "fan")
		if err == nil || !strings.Contains(out, "mounts/t2-plain/proxy/api/v1/namespaces/fan/configmaps/t2-a") {
			t.Errorf("kubectl get one object: %v\n%s", err, out)
		}
		for _, target := range []*framework.KubeAPIServer{e.t1, e.t2, e.t3} {
			if _, err := target.Client.CoreV1().ConfigMaps("fan").Get(ctx, "x", metav1.GetOptions{}); err == nil {
				t.Errorf("%s: the refused create reached it", target.URL)
			}
		}
	})

	t.Run("watch", func(t *testing.T) {
		w := startKubectl(t, e.kubectl, admin, "get", "configmaps", "-n", "fan", "-w", "--no-headers")
		w.waitLines(t, 10)
		leakMust(t, leakErr(e.t2.Client.CoreV1().ConfigMaps("fan").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "t2-w"}}, metav1.CreateOptions{})))
		w.waitFor(t, `(?m)^t2-plain\s+t2-w\s`)
		w.waitFor(t, `(?m)^t2-renamed\s+t2-w\s`)
		leakMust(t, e.t2.Client.CoreV1().ConfigMaps("fan").Delete(ctx, "t2-w", metav1.DeleteOptions{}))
	})

	t.Run("partial failure", func(t *testing.T) { e.partialFailure(ctx, t) })

	t.Run("more mounts than request slots", func(t *testing.T) { e.manyMounts(ctx, t) })

	t.Run("informer and a target that goes down", func(t *testing.T) { e.informer(ctx, t) })
}

// partialFailure: a member whose target refuses the caller, and one whose target never
// answers, are named in Warnings; the others answer, within the member deadline.
func (e *fanoutEnv) partialFailure(ctx context.Context, t *testing.T) {
	out := e.must(t, e.kubeconfig(t, e.carol, ""), "get", "configmaps", "-n", "fan")
	if _, rows := tableRows(t, out); !slices.Equal(rows, every("t1-tunnel", "t3-a", "t3-b")) {
		t.Errorf("carol, refused by t2: %v", rows)
	}
	for _, m := range []string{"t2-plain", "t2-renamed"} {
		if !regexpMatch(`Warning: mount "`+m+`" did not take part: configmaps is forbidden: User "(hub:)?carol" cannot list`, out) {
			t.Errorf("no Warning says that t2 refused carol through %s:\n%s", m, out)
		}
	}

	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		hole.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	kubeconfig, err := framework.KubeconfigBytes(&rest.Config{Host: "https://" + hole.Addr().String(), BearerToken: "never-used", TLSClientConfig: rest.TLSClientConfig{CAData: e.t1.AdminConfig.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	host := e.c.Host
	leakMust(t, leakErr(host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "silent"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{})))
	mounts := leakMountsClient(t, host.AdminConfig).MountsV1alpha1().Mounts()
	leakMust(t, leakErr(mounts.Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "silent"}, Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: "silent"}}}, metav1.CreateOptions{})))
	start := time.Now()
	out = e.must(t, e.kubeconfig(t, e.admin, ""), "get", "configmaps", "-n", "fan")
	took := time.Since(start)
	if _, rows := tableRows(t, out); !slices.Equal(rows, every(allFanoutMounts...)) {
		t.Errorf("with a silent member: %v", rows)
	}
	if !strings.Contains(out, `Warning: mount "silent" did not take part: no answer within `+fanoutMemberTimeout.String()) {
		t.Errorf("no Warning names the silent member:\n%s", out)
	}
	t.Logf("kubectl get with a silent member took %v (member deadline %v; discovery and the LIST each wait for it)", took.Round(time.Millisecond), fanoutMemberTimeout)
	leakMust(t, mounts.Delete(ctx, "silent", metav1.DeleteOptions{}))
}

// manyMounts: an unpaged LIST across more mounts than one request has slots for member
// requests (fanout.DefaultMaxConcurrency), each answering more than a member may read ahead,
// so that the answer begins while members still wait for a slot; those of them whose target
// is down are named in Warnings and the others' items all arrive, instead of the answer
// breaking off when they fail after it began.
func (e *fanoutEnv) manyMounts(ctx context.Context, t *testing.T) {
	// big members (over t2) answer more than they may read ahead; mid members (over t3) a
	// few chunks, so that those beginning after the answer did never fill their buffers.
	const big, mid, down, perBig, perMid = fanout.DefaultMaxConcurrency + 2, 6, 8, 700, 200
	host := e.c.Host
	data := strings.Repeat("x", 400)
	var wg sync.WaitGroup
	for _, f := range []struct {
		target *framework.KubeAPIServer
		n      int
	}{{e.t2, perBig}, {e.t3, perMid}} {
		leakMust(t, leakErr(f.target.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "big"}}, metav1.CreateOptions{})))
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < f.n; i += 8 {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%04d", i)}, Data: map[string]string{"data": data}}
					if _, err := f.target.Client.CoreV1().ConfigMaps("big").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	// A port nothing listens on: the down members' targets refuse connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	downKubeconfig, err := framework.KubeconfigBytes(&rest.Config{Host: "https://" + closed, BearerToken: "never-used", TLSClientConfig: rest.TLSClientConfig{CAData: e.t2.AdminConfig.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	t2Secret, err := host.Client.CoreV1().Secrets("clusters").Get(ctx, "t2-plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t2Kubeconfig := t2Secret.Data["kubeconfig"]
	t3Secret, err := host.Client.CoreV1().Secrets("clusters").Get(ctx, "t3-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mounts := leakMountsClient(t, host.AdminConfig).MountsV1alpha1().Mounts()
	var names []string
	add := func(name string, kubeconfig []byte) {
		leakMust(t, leakErr(host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{})))
		leakMust(t, leakErr(mounts.Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"many": "yes"}}, Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: name}}}, metav1.CreateOptions{})))
		names = append(names, name)
	}
	for i := range big {
		add(fmt.Sprintf("many-%03d", i), t2Kubeconfig)
	}
	// Last in name order: the members most likely still waiting when the answer begins.
	for i := range mid {
		add(fmt.Sprintf("zz-mid-%d", i), t3Secret.Data["kubeconfig"])
	}
	for i := range down {
		add(fmt.Sprintf("zz-down-%d", i), downKubeconfig)
	}
	t.Cleanup(func() {
		for _, n := range names {
			_ = mounts.Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})

	client, err := rest.HTTPClientFor(e.admin)
	if err != nil {
		t.Fatal(err)
	}
	client.Timeout = 2 * time.Minute
	resp, err := client.Get(e.admin.Host + "/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/labels/many=yes/api/v1/namespaces/big/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l2 struct {
		Items []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l2); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("unpaged LIST across %d mounts: %d, %v (the answer broke off?)", big+mid+down, resp.StatusCode, err)
	}
	if len(l2.Items) != big*perBig+mid*perMid {
		t.Errorf("%d items, want %d", len(l2.Items), big*perBig+mid*perMid)
	}
	warnings := strings.Join(resp.Header.Values("Warning"), "\n")
	for i := range down {
		if !strings.Contains(warnings, fmt.Sprintf(`mount \"zz-down-%d\" did not take part`, i)) {
			t.Errorf("no Warning names zz-down-%d:\n%s", i, warnings)
		}
	}
	if strings.Contains(warnings, "many-") || strings.Contains(warnings, "zz-mid-") {
		t.Errorf("a healthy member is named in a Warning:\n%s", warnings)
	}
}

// informer runs a client-go informer of ConfigMaps in namespace fan through the fan-out.
func (e *fanoutEnv) informer(ctx context.Context, t *testing.T) {
	cfg := rest.CopyConfig(e.admin)
	cfg.Host += "/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingLW{lw: cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "configmaps", "fan", fields.Everything())}
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	reflector := cache.NewReflectorWithOptions(rec, &corev1.ConfigMap{}, store, cache.ReflectorOptions{Name: "fanout"})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); reflector.RunWithContext(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	keys := func() []string {
		k := store.ListKeys()
		sort.Strings(k)
		return k
	}
	has := func(want ...string) func() bool {
		return func() bool {
			for _, w := range want {
				if _, ok, _ := store.GetByKey("fan/" + w); !ok {
					return false
				}
			}
			return true
		}
	}
	until(t, "the informer has every object", func() bool { return len(store.ListKeys()) == 10 })
	if want := every(allFanoutMounts...); len(keys()) != len(want) {
		t.Fatalf("keys %v", keys())
	}
	create := func(target *framework.KubeAPIServer, name string) {
		t.Helper()
		leakMust(t, leakErr(target.Client.CoreV1().ConfigMaps("fan").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})))
	}
	create(e.t1, "t1-i1")
	until(t, "t1-i1 through the tunnel", has("t1-tunnel:t1-i1"))

	// t1's agent goes away: t1-tunnel is offline while t1 changes. Lists name it in a
	// Warning; when the agent is back, the member's watch resumes where it stood and the
	// informer gets what it missed, without listing again.
	e.agentDown()
	leakMust(t, e.t1.Client.CoreV1().ConfigMaps("fan").Delete(ctx, "t1-i1", metav1.DeleteOptions{}))
	create(e.t1, "t1-i0")
	out, err := e.run(e.kubeconfig(t, e.admin, ""), "get", "configmaps", "-n", "fan")
	if err != nil {
		t.Fatalf("kubectl get with t1's agent away: %v\n%s", err, out)
	}
	if _, rows := tableRows(t, out); !slices.Equal(rows, every("t2-plain", "t2-renamed", "t3-a", "t3-b")) || !strings.Contains(out, `Warning: mount "t1-tunnel" did not take part`) {
		t.Errorf("with t1's agent away: %v\n%s", rows, out)
	}
	if _, ok, _ := store.GetByKey("fan/t1-tunnel:t1-i1"); !ok {
		t.Error("t1-i1 left the informer's store while t1-tunnel was offline")
	}
	e.agentUp(t)
	until(t, "t1-i0 and t1-i1's deletion after the agent came back", func() bool {
		_, gone, _ := store.GetByKey("fan/t1-tunnel:t1-i1")
		return has("t1-tunnel:t1-i0")() && !gone
	})

	// t3 goes down: lists answer with the others and name t3's mounts in Warnings, within
	// the member deadline; the informer's watch goes on with the others.
	e.t3.Down()
	start := time.Now()
	out, err = e.run(e.kubeconfig(t, e.admin, ""), "get", "configmaps", "-n", "fan")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("kubectl get with t3 down: %v\n%s", err, out)
	}
	_, rows := tableRows(t, out)
	if want := append(every("t1-tunnel", "t2-plain", "t2-renamed"), "t1-tunnel/t1-i0"); !slices.Equal(rows, sorted(want)) {
		t.Errorf("with t3 down: %v, want %v", rows, sorted(want))
	}
	for _, m := range []string{"t3-a", "t3-b"} {
		if !strings.Contains(out, `Warning: mount "`+m+`" did not take part`) {
			t.Errorf("no Warning names %s:\n%s", m, out)
		}
	}
	t.Logf("kubectl get with t3 down took %v (member deadline %v)", took.Round(time.Millisecond), fanoutMemberTimeout)
	create(e.t2, "t2-i2")
	until(t, "t2-i2 while t3 is down", has("t2-plain:t2-i2", "t2-renamed:t2-i2"))

	// t3 comes back: its members resume (or are listed again), without the informer
	// listing again.
	if err := e.t3.Up(ctx); err != nil {
		t.Fatal(err)
	}
	leakMust(t, e.t3.Client.CoreV1().ConfigMaps("fan").Delete(ctx, "t3-b", metav1.DeleteOptions{}))
	create(e.t3, "t3-i3")
	until(t, "t3-i3 after t3 came back", has("t3-a:t3-i3", "t3-b:t3-i3"))
	until(t, "t3-b deleted after t3 came back", func() bool {
		_, a, _ := store.GetByKey("fan/t3-a:t3-b")
		_, b, _ := store.GetByKey("fan/t3-b:t3-b")
		return !a && !b
	})

	// The client's watch ends: the informer watches again from its last resourceVersion,
	// a composite one, and misses nothing.
	rec.endWatch()
	create(e.t1, "t1-i4")
	until(t, "t1-i4 after the watch was resumed", has("t1-tunnel:t1-i4"))
	lists, watches := rec.calls()
	if lists != 1 {
		t.Errorf("the informer listed %d times (a watch with initial events counts), want once: %v", lists, watches)
	}
	if len(watches) == 0 || !fanout.IsComposite(watches[len(watches)-1]) {
		t.Errorf("the informer's watches began at %q, want a composite resourceVersion last", watches)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// recordingLW records how an informer lists and watches, and lets the test end its watch.
type recordingLW struct {
	lw *cache.ListWatch
	mu sync.Mutex
	// lists counts lists and watches with initial events; watches records each plain
	// watch's resourceVersion.
	lists   int
	watches []string
	current *endableWatch
}

func (r *recordingLW) List(options metav1.ListOptions) (runtime.Object, error) {
	r.mu.Lock()
	r.lists++
	r.mu.Unlock()
	return r.lw.List(options)
}

func (r *recordingLW) Watch(options metav1.ListOptions) (watch.Interface, error) {
	w, err := r.lw.Watch(options)
	r.mu.Lock()
	defer r.mu.Unlock()
	if options.SendInitialEvents != nil && *options.SendInitialEvents {
		r.lists++
	} else {
		r.watches = append(r.watches, options.ResourceVersion)
	}
	if err != nil {
		return nil, err
	}
	ew := &endableWatch{inner: w, ch: make(chan watch.Event), end: make(chan struct{})}
	go ew.forward()
	r.current = ew
	return ew, nil
}

// endWatch ends the informer's watch as a server ends one (its timeout): the stream just ends.
func (r *recordingLW) endWatch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current != nil {
		r.current.once.Do(func() { close(r.current.end) })
	}
}

// endableWatch passes a watch's events on until the test ends it.
type endableWatch struct {
	inner watch.Interface
	ch    chan watch.Event
	end   chan struct{}
	once  sync.Once
}

func (w *endableWatch) forward() {
	defer close(w.ch)
	defer w.inner.Stop()
	for {
		select {
		case ev, ok := <-w.inner.ResultChan():
			if !ok {
				return
			}
			select {
			case w.ch <- ev:
			case <-w.end:
				return
			}
		case <-w.end:
			return
		}
	}
}

func (w *endableWatch) Stop()                          { w.once.Do(func() { close(w.end) }) }
func (w *endableWatch) ResultChan() <-chan watch.Event { return w.ch }

func (r *recordingLW) calls() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists, slices.Clone(r.watches)
}

// rawList is what a test reads of a list: its items' names, resourceVersion and continue.
type rawList struct {
	Items           []string
	ResourceVersion string
	Continue        string
}

// getRaw GETs path through mounts/*/proxy as cfg.
func getRaw(t *testing.T, cfg *rest.Config, path string, q url.Values) (int, string) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client.Timeout = time.Minute
	for k, v := range q {
		if len(v) == 1 && v[0] == "" {
			delete(q, k)
		}
	}
	resp, err := client.Get(cfg.Host + "/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy" + path + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func listRaw(t *testing.T, cfg *rest.Config, path string, q url.Values) rawList {
	t.Helper()
	code, body := getRaw(t, cfg, path, q)
	if code != http.StatusOK {
		t.Fatalf("GET %s?%s: %d %s", path, q.Encode(), code, body)
	}
	var l struct {
		Metadata metav1.ListMeta `json:"metadata"`
		Items    []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	out := rawList{ResourceVersion: l.Metadata.ResourceVersion, Continue: l.Metadata.Continue}
	for _, it := range l.Items {
		out.Items = append(out.Items, it.Metadata.Name)
		if it.Metadata.Labels[fanout.MountLabel] == "" {
			t.Errorf("%s has no label %s", it.Metadata.Name, fanout.MountLabel)
		}
	}
	return out
}

// runningKubectl is a kubectl that runs in the background, its output collected.
type runningKubectl struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	cancel context.CancelFunc
}

func startKubectl(t *testing.T, kubectl, kubeconfig string, args ...string) *runningKubectl {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := &runningKubectl{cmd: cmd, cancel: cancel}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			k.mu.Lock()
			k.lines = append(k.lines, s.Text())
			k.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	return k
}

func (k *runningKubectl) output() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return strings.Join(k.lines, "\n")
}

func (k *runningKubectl) waitLines(t *testing.T, n int) {
	t.Helper()
	until(t, fmt.Sprintf("kubectl printed %d lines", n), func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return len(k.lines) >= n
	})
}

func (k *runningKubectl) waitFor(t *testing.T, pattern string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !regexpMatch(pattern, k.output()); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("kubectl never printed %s:\n%s", pattern, k.output())
		}
	}
}

// TestKcpFanOut: in kcp mode, /clusters/<workspace>/.../mounts/*/proxy fans out to the mounts
// of that workspace the caller may use, as kcp main forwards requests (naming the caller;
// the harness does what DESIGN.md section 1 observed of kcp): kcp's RBAC in the workspace
// authorizes the name "*", this server each mount (a review in the workspace); the mounts
// of another workspace take no part.
func TestKcpFanOut(t *testing.T) {
	ctx := context.Background()
	e := startKcpEnv(t, kcpEnvOptions{version: framework.KcpMain, modify: apiOnly, remote: true})
	e.remoteSecretOfAlice(t)
	kubeconfig, err := framework.KubeconfigBytes(e.remote.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	bobWS, err := kubernetes.NewForConfig(e.kcp.Config("bob-token", "root:ws-b"))
	if err != nil {
		t.Fatal(err)
	}
	leakMust(t, leakErr(bobWS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{})))
	leakMust(t, leakErr(bobWS.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "remote"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{})))
	mountYAML := func(name, mode string) string {
		return writeFile(t, name+".yaml", "apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata: {name: "+name+"}\nspec: {type: URL, ref: {namespace: clusters, name: remote}, identity: {mode: "+mode+"}}\n")
	}
	e.mustKubectl(t, "alice-token", "root:ws-a", "create", "-f", mountYAML("r1", "MountCredentials"))
	e.mustKubectl(t, "alice-token", "root:ws-a", "create", "-f", mountYAML("r2", "Impersonate"))
	e.mustKubectl(t, "bob-token", "root:ws-b", "create", "-f", mountYAML("b1", "MountCredentials"))
	// On the remote: alice (impersonated by r2) may read; two ConfigMaps.
	grant(t, e.remote, "alice", "fan-reader", rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}})
	leakMust(t, leakErr(e.remote.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fan"}}, metav1.CreateOptions{})))
	for _, n := range []string{"c1", "c2"} {
		leakMust(t, leakErr(e.remote.Client.CoreV1().ConfigMaps("fan").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})))
	}

	fan := func(token string) string {
		cfg := e.kcp.Config(token, "root:ws-a")
		cfg.Host += "/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy"
		data, err := framework.KubeconfigBytes(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return writeFile(t, token+"-fanout.kubeconfig", string(data))
	}
	out, err := runKubectl(fan("alice-token"), "get", "configmaps", "-n", "fan")
	if err != nil {
		t.Fatalf("alice's fan-out in root:ws-a: %v\n%s", err, out)
	}
	if _, rows := tableRows(t, out); !slices.Equal(rows, []string{"r1/c1", "r1/c2", "r2/c1", "r2/c2"}) {
		t.Errorf("alice's fan-out in root:ws-a: %v (bob's b1 in root:ws-b must take no part)\n%s", rows, out)
	}
	// Carol may read Mounts in root:ws-a but not proxy: kcp refuses the name "*".
	if out, err := runKubectl(fan("carol-token"), "get", "configmaps", "-n", "fan"); err == nil || !strings.Contains(out, "Forbidden") {
		t.Errorf("carol, who may not proxy: %v\n%s", err, out)
	}
	// Given the fan-out and r1 only, she sees r1's objects: each mount is checked in the
	// workspace.
	grant(t, e.a, "carol", "fan-r1", rbacv1.PolicyRule{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"get"}, ResourceNames: []string{fanout.Name, "r1"}})
	var rows []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		// Reviews are cached for 10 s.
		out, err = runKubectl(fan("carol-token"), "get", "configmaps", "-n", "fan")
		if err == nil {
			if _, rows = tableRows(t, out); slices.Equal(rows, []string{"r1/c1", "r1/c2"}) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("carol with r1 only: %v %v\n%s", err, rows, out)
		}
	}
}
