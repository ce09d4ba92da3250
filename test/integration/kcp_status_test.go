package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/controller/status"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	mountsv1alpha1 "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned/typed/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// mountsIn returns the Mounts client of a logical cluster, addressed as kcp's shards forward
// requests: below /clusters/<cluster> (DESIGN.md section 1).
func mountsIn(t *testing.T, cfg *rest.Config, cluster string) mountsv1alpha1.MountInterface {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Host += "/clusters/" + cluster
	client, err := clientset.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return client.MountsV1alpha1().Mounts()
}

// waitForMount polls the mount until ok holds, failing the test after a minute.
func waitForMount(ctx context.Context, t *testing.T, client mountsv1alpha1.MountInterface, name string, ok func(*v1alpha1.Mount) bool) *v1alpha1.Mount {
	t.Helper()
	var m *v1alpha1.Mount
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if m, err = client.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if ok(m) {
			return m
		}
	}
	t.Fatalf("mount %s: not as expected after a minute; status %+v", name, m.Status)
	return nil
}

// TestStatusOfMountsInLogicalClusters: in kcp mode the status controller keeps the status of
// the Mounts of every logical cluster, as it does for the default cluster. Two clusters (the
// kcp harness's consumer workspaces) hold a Mount of the same name; one's target is a real
// kube-apiserver and becomes Ready, the other's Secret is missing in its workspace and it
// stays Connecting, so neither's status, probe result or metric series is the other's.
// status.URL is the kcp form below --external-base-url. The Secrets live in the workspaces
// and are read through the APIExport's virtual workspace.
func TestStatusOfMountsInLogicalClusters(t *testing.T) {
	ctx := context.Background()
	const base = "https://front-proxy.example/services/mounts"
	e := startKcpEnv(t, kcpEnvOptions{modify: func(o *options.Options) { o.ExternalBaseURL = base }, remote: true})
	s := e.server
	kubeconfig, err := framework.KubeconfigBytes(e.remote.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	core, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "same-kubeconfig"}, Data: map[string][]byte{v1alpha1.SecretKeyKubeconfig: kubeconfig}}
	// This server keeps the default cluster's Secrets itself (no namespaces API); the
	// workspaces are kube-apiservers.
	for _, c := range []kubernetes.Interface{e.a.Client, e.b.Client} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []kubernetes.Interface{core, e.a.Client} {
		if _, err := c.CoreV1().Secrets("clusters").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// kcp v0.32.3 names nobody: URL mounts are created through the front-proxy's mapping, by
	// the workspaces' editors.
	viaMapping := func(token string) *rest.Config {
		c := e.kcp.Config(token, "")
		c.Host += framework.KcpMountsMapping
		return c
	}
	inA, inB := mountsIn(t, viaMapping("alice-token"), kcpClusterA), mountsIn(t, viaMapping("bob-token"), kcpClusterB)
	if _, err := inA.Create(ctx, urlMount("same"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	missing := urlMount("same")
	missing.Spec.Ref.Name = "absent"
	if _, err := inB.Create(ctx, missing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The default cluster still works as outside kcp mode.
	if _, err := s.Client.MountsV1alpha1().Mounts().Create(ctx, urlMount("same"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ready := func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady }
	a := waitForMount(ctx, t, inA, "same", ready)
	if want := base + "/clusters/" + kcpClusterA + "/apis/mounts.kcp.io/v1alpha1/mounts/same/proxy"; a.Status.URL != want {
		t.Errorf("ws-a's status.URL %q, want %q", a.Status.URL, want)
	}
	b := waitForMount(ctx, t, inB, "same", func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseConnecting })
	if c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionCredentialsResolved); c == nil || c.Reason != proxy.ReasonSecretNotFound {
		t.Errorf("ws-b's mount without Secret: CredentialsResolved %+v", c)
	}
	if want := base + "/clusters/" + kcpClusterB + "/apis/mounts.kcp.io/v1alpha1/mounts/same/proxy"; b.Status.URL != want {
		t.Errorf("ws-b's status.URL %q, want %q", b.Status.URL, want)
	}
	d := waitForMount(ctx, t, s.Client.MountsV1alpha1().Mounts(), "same", ready)
	if want := base + "/apis/mounts.kcp.io/v1alpha1/mounts/same/proxy"; d.Status.URL != want {
		t.Errorf("the default cluster's status.URL %q, want %q", d.Status.URL, want)
	}
	// ws-a's is still Ready: ws-b's failing probe did not land on it.
	if a, err = inA.Get(ctx, "same", metav1.GetOptions{}); err != nil || a.Status.Phase != v1alpha1.MountPhaseReady {
		t.Errorf("ws-a's mount after ws-b's failed: %v %+v", err, a.Status)
	}

	// Metric series name the mount with its cluster.
	for _, series := range []string{`mount="` + kcpClusterA + `/same"`, `mount="same"`} {
		if got, err := framework.MetricSeries(s.Config, "mount_proxy_upstream_connections_total{"+series); err != nil || len(got) == 0 {
			t.Errorf("series of %s: %v %v", series, got, err)
		}
	}

	// ws-b's mount gets its Secret: Ready too, at its own URL.
	if _, err := e.b.Client.CoreV1().Secrets("clusters").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.Spec.Ref.Name = "same-kubeconfig"
	if _, err := inB.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b = waitForMount(ctx, t, inB, "same", ready)
	if !strings.Contains(b.Status.URL, "/clusters/"+kcpClusterB+"/") || b.Status.ObservedGeneration != b.Generation {
		t.Errorf("ws-b's mount once fixed: %+v", b.Status)
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != status.ReasonProbeSucceeded {
		t.Errorf("ws-b's Ready condition %+v", c)
	}

	// Deleting ws-a's mount forgets its series only.
	if err := inA.Delete(ctx, "same", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := framework.MetricSeries(s.Config, `mount="`+kcpClusterA+`/same"`); len(got) != 0 {
		t.Errorf("series of ws-a's deleted mount: %v", got)
	}
	if got, _ := framework.MetricSeries(s.Config, `mount="`+kcpClusterB+`/same"`); len(got) == 0 {
		t.Error("ws-b's series went with ws-a's mount")
	}
}
