package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestClusterAwarePaths serves mounts at /clusters/<logical-cluster>/... as kcp's APIExport
// virtual storage forwards them (paths as DESIGN.md section 1 observed on kcp v0.32.3; kcp
// itself cannot be built here, so kubectl and clients address the paths directly). Two logical
// clusters hold a Mount of the same name each, see only their own, and a wildcard list and
// watch sees both, each carrying its cluster in kcp.io/cluster.
func TestClusterAwarePaths(t *testing.T) {
	s := framework.StartInProcess(t, "", kcpAPIOnly)
	ctx := context.Background()
	at := func(cluster string) string { return "--server=" + s.URL + "/clusters/" + cluster }
	clientAt := func(cfg *rest.Config, cluster string) clientset.Interface {
		c := rest.CopyConfig(cfg)
		c.Host = s.URL + "/clusters/" + cluster
		client, err := clientset.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		return client
	}

	// Watches are open before the writes.
	watchA, err := clientAt(s.Config, "ws-a").MountsV1alpha1().Mounts().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer watchA.Stop()
	watchAll, err := clientAt(s.Config, "*").MountsV1alpha1().Mounts().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer watchAll.Stop()

	file := filepath.Join(t.TempDir(), "same.yaml")
	if err := os.WriteFile(file, []byte("apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata: {name: same}\nspec: {type: Workspace, ref: {name: \"root:team\"}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, s, at("ws-a"), "apply", "-f", file)
	mustKubectl(t, s, at("ws-b"), "apply", "--server-side", "-f", file)
	mustKubectl(t, s, at("ws-b"), "label", "mount", "same", "team=b")

	for _, cluster := range []string{"ws-a", "ws-b"} {
		out := mustKubectl(t, s, at(cluster), "get", "mounts", "-o", `jsonpath={range .items[*]}{.metadata.name}@{.metadata.annotations.kcp\.io/cluster}{"\n"}{end}`)
		if strings.TrimSpace(out) != "same@"+cluster {
			t.Errorf("mounts of %s: %q, want only its own", cluster, out)
		}
	}
	if out := mustKubectl(t, s, "get", "mounts", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("the default cluster sees mounts of logical clusters: %q", out)
	}
	out := mustKubectl(t, s, at("*"), "get", "mounts", "-o", `jsonpath={range .items[*]}{.metadata.annotations.kcp\.io/cluster}{" "}{end}`)
	if strings.TrimSpace(out) != "ws-a ws-b" {
		t.Errorf("wildcard list: %q, want both clusters", out)
	}
	if out := mustKubectl(t, s, at("ws-a"), "api-resources", "--api-group", "mounts.kcp.io"); !strings.Contains(out, "Mount") {
		t.Errorf("api-resources in a logical cluster:\n%s", out)
	}
	if out := mustKubectl(t, s, at("ws-a"), "explain", "mount.spec.type"); !strings.Contains(out, "FIELD: type <string>") {
		t.Errorf("explain in a logical cluster:\n%s", out)
	}

	// Only list and watch span clusters.
	if out, err := kubectl(t, s, at("*"), "delete", "mount", "same"); err == nil || !strings.Contains(out, "across all clusters") {
		t.Errorf("delete across all clusters: %v %s", err, out)
	}
	// The annotation says where a Mount lives; changing it is refused with a field error.
	if out, err := kubectl(t, s, at("ws-a"), "annotate", "--overwrite", "mount", "same", kcp.ClusterAnnotation+"=ws-b"); err == nil || !strings.Contains(out, "metadata.annotations[kcp.io/cluster]") {
		t.Errorf("annotate: %v %s", err, out)
	}
	mustKubectl(t, s, at("ws-a"), "delete", "mount", "same")
	if out := mustKubectl(t, s, at("ws-b"), "get", "mount", "same", "-o", `jsonpath={.metadata.labels.team}@{.metadata.annotations.kcp\.io/cluster}`); out != "b@ws-b" {
		t.Errorf("ws-b's mount after ws-a's was deleted: %q", out)
	}

	events := func(w watch.Interface, n int) []string {
		var got []string
		for len(got) < n {
			select {
			case ev := <-w.ResultChan():
				m, ok := ev.Object.(*v1alpha1.Mount)
				if !ok {
					t.Fatalf("watch event %s: %#v", ev.Type, ev.Object)
				}
				got = append(got, string(ev.Type)+" "+m.Annotations[kcp.ClusterAnnotation])
			case <-time.After(30 * time.Second):
				t.Fatalf("watch: %v after 30s, want %d events", got, n)
			}
		}
		return got
	}
	// The refused annotate wrote nothing.
	if got := strings.Join(events(watchA, 2), ", "); got != "ADDED ws-a, DELETED ws-a" {
		t.Errorf("watch in ws-a: %s", got)
	}
	if got := strings.Join(events(watchAll, 4), ", "); got != "ADDED ws-a, ADDED ws-b, MODIFIED ws-b, DELETED ws-a" {
		t.Errorf("wildcard watch: %s", got)
	}

	// Until requests forwarded by kcp are authenticated, logical clusters are for admins.
	data, err := pkiUserKubeconfig(t, s, "edith", authorization.EditorsGroup)
	if err != nil {
		t.Fatal(err)
	}
	edith, err := clientset.NewForConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := edith.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("an editor lists mounts of the default cluster: %v", err)
	}
	if _, err := clientAt(data, "ws-b").MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot ask kcp who may do what in logical clusters") {
		t.Errorf("an editor lists mounts of a logical cluster: %v", err)
	}
}

// pkiUserKubeconfig returns a client configuration for a new user of s's CA.
func pkiUserKubeconfig(t *testing.T, s *framework.Server, userName string, groups ...string) (*rest.Config, error) {
	t.Helper()
	ca, err := pki.Load(filepath.Join(s.RootDir, "pki"))
	if err != nil {
		return nil, err
	}
	data, err := ca.UserKubeconfig(s.URL, userName, groups, true)
	if err != nil {
		return nil, err
	}
	return clientcmdConfig(data)
}
