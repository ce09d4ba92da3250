package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// fanoutEnv is a standalone mount-apiserver with mounts of real target kube-apiservers.
type fanoutEnv struct {
	server  *framework.Server
	core    kubernetes.Interface
	targets []*framework.KubeAPIServer
	kubectl string
	// kubeconfig reaches mounts/*/proxy as the standalone admin.
	kubeconfig string
}

// prepareTarget lets the mount's credentials (user mount-lender) impersonate on target, and
// the hub's admin (impersonated as itself) do everything there; it returns the kubeconfig
// of mount-lender.
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
	leakMust(t, leakErr(target.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "hub-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: pki.AdminUser}},
	}, metav1.CreateOptions{})))
	kubeconfig, err := framework.KubeconfigBytes(lender)
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// addMount creates a Secret with kubeconfig and a Mount of it.
func (e *fanoutEnv) addMount(ctx context.Context, t *testing.T, name string, labels map[string]string, kubeconfig []byte, modify func(*v1alpha1.Mount)) {
	t.Helper()
	if _, err := e.core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: v1alpha1.MountSpec{
		Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: name},
	}}
	if modify != nil {
		modify(m)
	}
	if _, err := e.server.Client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// fanoutKubeconfig writes a kubeconfig of cfg whose server is the hub's mounts/*/proxy with
// suffix (e.g. "/labels/env=prod").
func fanoutKubeconfig(t *testing.T, cfg *rest.Config, suffix string) string {
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

func (e *fanoutEnv) run(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(e.kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *fanoutEnv) must(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := e.run(t, kubeconfig, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func TestFanOutSmoke(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	e := &fanoutEnv{kubectl: realKubectl(t)}
	e.server = framework.StartInProcess(t, "", func(o *options.Options) { o.StatusController = false })
	var err error
	if e.core, err = kubernetes.NewForConfig(e.server.Config); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		target, err := framework.StartKubeAPIServer(ctx, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(target.Stop)
		e.targets = append(e.targets, target)
		kc := prepareTarget(ctx, t, target)
		e.addMount(ctx, t, fmt.Sprintf("m-%d", i), map[string]string{"env": []string{"prod", "dev"}[i]}, kc, nil)
		for j := range 3 {
			if _, err := target.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", j), Labels: map[string]string{"app": "x"}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	kc := fanoutKubeconfig(t, e.server.Config, "")
	for _, args := range [][]string{
		{"get", "configmaps", "-A"},
		{"get", "configmaps", "-A", "-L", "mounts.kcp.io/mount"},
		{"get", "configmaps", "-n", "default", "-l", "mounts.kcp.io/mount=m-1"},
		{"get", "configmaps", "-A", "--chunk-size=2"},
		{"get", "configmaps", "-n", "default", "-o", "name"},
		{"get", "configmaps", "cm-1"},
		{"api-resources"},
	} {
		out, err := e.run(t, kc, args...)
		t.Logf("kubectl %s: err=%v\n%s", strings.Join(args, " "), err, out)
	}
	watchCtx, cancelWatch := context.WithTimeout(ctx, 20*time.Second)
	defer cancelWatch()
	cmd := exec.CommandContext(watchCtx, e.kubectl, "--kubeconfig", kc, "get", "configmaps", "-A", "-w")
	var buf syncBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if _, err := e.targets[1].Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new-one"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	cancelWatch()
	_ = cmd.Wait()
	t.Logf("watch:\n%s", buf.String())

	// An informer through the fan-out.
	cfg := rest.CopyConfig(e.server.Config)
	cfg.Host += "/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy"
	client := kubernetes.NewForConfigOrDie(cfg)
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().ConfigMaps().Informer()
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	synced := cache.WaitForCacheSync(stop, inf.HasSynced)
	t.Logf("informer synced=%v keys=%v", synced, inf.GetStore().ListKeys())

	kcProd := fanoutKubeconfig(t, e.server.Config, "/labels/env=prod")
	out, err := e.run(t, kcProd, "get", "configmaps", "-A")
	t.Logf("labels form: err=%v\n%s", err, out)
}
