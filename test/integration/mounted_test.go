package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// mountedTarget is a real kube-apiserver mounted as "prod" on a standalone mount-apiserver,
// and one user, alice in group mount-apiserver:editors, with a kubeconfig for the target
// directly and one for the same target through the mount. The mount impersonates without
// prefixes, so the target sees alice as the same user both ways; the target lets alice do
// everything (cluster-admin).
type mountedTarget struct {
	kube *framework.KubeAPIServer
	hub  *framework.Server
	// direct and viaMount are kubeconfig files of alice.
	direct, viaMount string
	// mountURL is the mount's status.URL.
	mountURL string
	kubectl  string
	// cache is kubectl's discovery cache (KUBECACHEDIR), one per test.
	cache string
}

const mountedUser = "alice"

func startMountedTarget(t *testing.T) *mountedTarget {
	t.Helper()
	return startMountedTargetOn(t, nil)
}

// startMountedTargetOn is startMountedTarget on hub (nil: a new in-process server).
func startMountedTargetOn(t *testing.T, hub *framework.Server) *mountedTarget {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kube, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	if hub == nil {
		hub = framework.StartInProcess(t, "", nil)
	}
	m := &mountedTarget{kube: kube, hub: hub, kubectl: kubectlBinary(t), cache: t.TempDir()}

	groups := []string{authorization.EditorsGroup}
	aliceDirect, err := kube.UserConfig(mountedUser, groups...)
	if err != nil {
		t.Fatal(err)
	}
	if m.direct, err = kube.WriteKubeconfig(aliceDirect, "alice-direct"); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: mountedUser}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The mount lends the target's admin credentials, impersonating its callers as they are.
	core, err := kubernetes.NewForConfig(hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := framework.KubeconfigBytes(kube.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-kubeconfig"}, Data: map[string][]byte{"kubeconfig": kc}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mount := urlMount("prod")
	if _, err := hub.Client.MountsV1alpha1().Mounts().Create(ctx, mount, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := waitForMount(ctx, t, hub.Client.MountsV1alpha1().Mounts(), "prod", func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady })
	m.mountURL = ready.Status.URL
	m.viaMount = m.hubKubeconfig(t, mountedUser, m.mountURL, groups...)
	return m
}

// hubKubeconfig writes a kubeconfig of a new user of the hub's CA for server (the hub or a
// mount's URL).
func (m *mountedTarget) hubKubeconfig(t *testing.T, user, server string, groups ...string) string {
	t.Helper()
	return userKubeconfigFile(t, m.hub, server, user, groups...)
}

// withServer writes a copy of kubeconfig whose cluster is at server.
func withServer(t *testing.T, kubeconfig, server string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	path := filepath.Join(t.TempDir(), "server.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubectlBinary is the real kubectl the framework builds (the version of the kube-apiserver).
func kubectlBinary(t testing.TB) string {
	t.Helper()
	dir, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "kubectl")
}

// kubectlResult is what one kubectl run did.
type kubectlResult struct {
	out      string
	exitCode int
	took     time.Duration
}

// run runs kubectl with kubeconfig and args, bounded by timeout.
func (m *mountedTarget) run(kubeconfig string, timeout time.Duration, args ...string) kubectlResult {
	return runKubectlWith(context.Background(), m.kubectl, m.cache, kubeconfig, "", timeout, args...)
}

// runKubectlWith runs kubectl with kubeconfig and args, stdin from stdin, bounded by timeout;
// cache is its discovery cache directory.
func runKubectlWith(ctx context.Context, bin, cache, kubeconfig, stdin string, timeout time.Duration, args ...string) kubectlResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+cache)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r := kubectlResult{out: string(out), took: time.Since(start)}
	if err != nil {
		r.exitCode = -1
		if exit, ok := err.(*exec.ExitError); ok {
			r.exitCode = exit.ExitCode()
		}
	}
	return r
}

// loadAverage is the machine's load (the first three fields of /proc/loadavg), to go with
// timings.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}
