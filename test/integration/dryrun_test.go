package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/dryrun"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

const dryRunConfigMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: %s
  namespace: default
data:
  key: %s
`

// TestDryRunThroughMount runs server-side dry runs with the real kubectl through a mount of a
// real kube-apiserver: create, apply (client- and server-side), diff and delete with
// --dry-run=server answer as the target answers them, and nothing is written on the target.
// The connect handler of k8s.io/apiserver refused every one with "dryRun is not supported".
// The target gets the caller's query exactly, and a caller cannot send the server's private
// parameter.
func TestDryRunThroughMount(t *testing.T) {
	m := startMountedTarget(t)
	ctx := context.Background()
	target := m.kube.Client.CoreV1().ConfigMaps("default")
	kubectl := func(stdin string, args ...string) kubectlResult {
		t.Helper()
		return runKubectlWith(ctx, m.kubectl, m.cache, m.viaMount, stdin, time.Minute, args...)
	}
	absent := func(name string) {
		t.Helper()
		if _, err := target.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("configmap %s on the target after a dry run: %v", name, err)
		}
	}
	cm := func(name, value string) string {
		return strings.Replace(strings.Replace(dryRunConfigMap, "%s", name, 1), "%s", value, 1)
	}

	for _, c := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"create", "", []string{"create", "configmap", "dry-create", "--from-literal=key=v", "--dry-run=server", "-o", "name"}, "configmap/dry-create"},
		{"apply", cm("dry-apply", "v"), []string{"apply", "--dry-run=server", "-f", "-"}, "configmap/dry-apply created (server dry run)"},
		{"apply server-side", cm("dry-ssa", "v"), []string{"apply", "--server-side", "--dry-run=server", "-f", "-"}, "configmap/dry-ssa serverside-applied (server dry run)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := kubectl(c.stdin, c.args...)
			if r.exitCode != 0 || !strings.Contains(r.out, c.want) {
				t.Errorf("kubectl %s: exit %d\n%s", strings.Join(c.args, " "), r.exitCode, r.out)
			}
			absent(strings.TrimPrefix(strings.Fields(c.want)[0], "configmap/"))
		})
	}

	// A real write still writes.
	if r := kubectl(cm("real", "v1"), "apply", "-f", "-"); r.exitCode != 0 {
		t.Fatalf("kubectl apply: exit %d\n%s", r.exitCode, r.out)
	}
	before, err := target.Get(ctx, "real", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the applied configmap is not on the target: %v", err)
	}

	t.Run("diff", func(t *testing.T) {
		r := kubectl(cm("real", "v2"), "diff", "-f", "-")
		// kubectl diff exits 1 when it found differences.
		if r.exitCode != 1 || !regexpMatch(`(?m)^-\s+key: v1$`, r.out) || !regexpMatch(`(?m)^\+\s+key: v2$`, r.out) {
			t.Errorf("kubectl diff: exit %d\n%s", r.exitCode, r.out)
		}
		if r := kubectl(cm("new", "v"), "diff", "-f", "-"); r.exitCode != 1 || !regexpMatch(`(?m)^\+\s+name: new$`, r.out) {
			t.Errorf("kubectl diff of a new object: exit %d\n%s", r.exitCode, r.out)
		}
		absent("new")
	})
	t.Run("delete", func(t *testing.T) {
		r := kubectl("", "delete", "configmap", "real", "--dry-run=server")
		if r.exitCode != 0 || !regexpMatch(`configmap "real" deleted .*\(server dry run\)`, r.out) {
			t.Errorf("kubectl delete --dry-run=server: exit %d\n%s", r.exitCode, r.out)
		}
	})
	after, err := target.Get(ctx, "real", metav1.GetOptions{})
	if err != nil || after.ResourceVersion != before.ResourceVersion || after.Data["key"] != "v1" {
		t.Errorf("the configmap changed on the target through dry runs: %v, %v", after, err)
	}

	t.Run("private parameter refused", func(t *testing.T) {
		httpClient, err := rest.HTTPClientFor(m.hub.Config)
		if err != nil {
			t.Fatal(err)
		}
		body := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"sneaky"}}`
		for _, param := range []string{dryrun.Parameter, "mount-proxy.kcp.io%2EdryRun"} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.mountURL+"/api/v1/namespaces/default/configmaps?"+param+"=All", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), "reserved") {
				t.Errorf("%s: %d %s, want 400", param, resp.StatusCode, got)
			}
			absent("sneaky")
		}
	})

	t.Run("query exactly", func(t *testing.T) {
		rec, err := framework.StartRecordingServer("127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rec.Close)
		kc, err := rec.Kubeconfig("token")
		if err != nil {
			t.Fatal(err)
		}
		core, err := kubernetes.NewForConfig(m.hub.Config)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "recorder-kubeconfig"}, Data: map[string][]byte{"kubeconfig": kc}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rm := urlMount("recorder")
		rm.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
		if _, err := m.hub.Client.MountsV1alpha1().Mounts().Create(ctx, rm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		httpClient, err := rest.HTTPClientFor(m.hub.Config)
		if err != nil {
			t.Fatal(err)
		}
		const query = "fieldManager=kubectl&dryRun=All&dry%52un=All&fieldValidation=Strict&x=%2F+%20"
		req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, m.hub.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/recorder/proxy/api/v1/namespaces/default/configmaps/x?"+query, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/merge-patch+json")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
		// The status controller probes the same target; look at the PATCH only.
		var patches []string
		for _, r := range rec.Requests() {
			if r.Method == http.MethodPatch {
				patches = append(patches, r.URL.RawQuery)
			}
		}
		if len(patches) != 1 {
			t.Fatalf("the target got %d PATCH requests, want 1", len(patches))
		}
		if q := patches[0]; q != "fieldManager=kubectl&dryRun=All&dryRun=All&fieldValidation=Strict&x=%2F+%20" {
			t.Errorf("the target got the query %q", q)
		}
	})
}
