package mounts

import (
	"context"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

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
