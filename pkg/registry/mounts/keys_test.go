package mounts

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
)

// TestClusterAnnotation: a Mount carries the logical cluster it was created in; a write that
// leaves the annotation out keeps it, one that names another cluster is refused with a field
// error (it was undone silently and answered 200).
func TestClusterAnnotation(t *testing.T) {
	inA := clusters.WithCluster(context.Background(), "ws-a")
	mount := func(annotations map[string]string) *mounts.Mount {
		return &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: annotations}}
	}
	created := mount(nil)
	setCluster(inA, created)
	if created.Annotations[kcp.ClusterAnnotation] != "ws-a" || validateCluster(inA, created) != nil {
		t.Errorf("create in ws-a: %v", created.Annotations)
	}
	claimed := mount(map[string]string{kcp.ClusterAnnotation: "ws-b"})
	setCluster(inA, claimed)
	if errs := validateCluster(inA, claimed); len(errs) != 1 || !strings.Contains(errs.ToAggregate().Error(), "metadata.annotations[kcp.io/cluster]") {
		t.Errorf("create in ws-a claiming ws-b: %v", errs)
	}
	left := mount(nil)
	keepCluster(left, created)
	if left.Annotations[kcp.ClusterAnnotation] != "ws-a" || validateCluster(inA, left) != nil {
		t.Errorf("update leaving the annotation out: %v", left.Annotations)
	}
	moved := mount(map[string]string{kcp.ClusterAnnotation: "ws-b"})
	keepCluster(moved, created)
	if errs := validateCluster(inA, moved); len(errs) != 1 {
		t.Errorf("update moving the mount to ws-b: %v", errs)
	}
	inDefault := context.Background()
	tagged := mount(map[string]string{kcp.ClusterAnnotation: "ws-a"})
	setCluster(inDefault, tagged)
	if errs := validateCluster(inDefault, tagged); len(errs) != 1 || !strings.Contains(errs[0].Error(), "default cluster") {
		t.Errorf("a default-cluster mount naming a cluster: %v", errs)
	}
}

func TestKeys(t *testing.T) {
	const prefix = "/mount-apiserver/mounts.kcp.io/mounts"
	root, key := keyRootFunc(prefix), keyFunc(prefix)
	ctx := context.Background()
	kcp := clusters.WithCluster(ctx, "2x7kq3n1")
	all := clusters.WithCluster(ctx, clusters.Wildcard)

	if got, want := root(ctx), prefix+"/_default"; got != want {
		t.Errorf("default root = %q, want %q", got, want)
	}
	if got, want := root(kcp), prefix+"/2x7kq3n1"; got != want {
		t.Errorf("cluster root = %q, want %q", got, want)
	}
	if got := root(all); got != prefix {
		t.Errorf("wildcard root = %q, want %q", got, prefix)
	}
	if got, err := key(ctx, "prod"); err != nil || got != prefix+"/_default/prod" {
		t.Errorf("default key = %q, %v", got, err)
	}
	if got, err := key(kcp, "prod"); err != nil || got != prefix+"/2x7kq3n1/prod" {
		t.Errorf("cluster key = %q, %v", got, err)
	}
	for _, bad := range []string{"..", ".", "a/b", "a%b"} {
		if _, err := key(ctx, bad); err == nil {
			t.Errorf("key accepted name %q", bad)
		}
	}
	if _, err := key(all, "prod"); err == nil {
		t.Error("key accepted the wildcard cluster")
	}
}
