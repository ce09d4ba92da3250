package mounts

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// Keys lay out Mounts in etcd as <prefix>/<cluster>/<name>, the layout kcp uses for
// cluster-scoped resources, so that kcp mode finds standalone and delegated data where it is.

// keyRootFunc returns the list/watch root of the request's cluster; the wildcard cluster
// lists all of them.
func keyRootFunc(prefix string) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		cluster := clusters.From(ctx)
		if cluster == clusters.Wildcard {
			return prefix
		}
		return prefix + "/" + string(cluster)
	}
}

// keyFunc returns the key of one Mount in the request's cluster.
func keyFunc(prefix string) func(ctx context.Context, name string) (string, error) {
	return func(ctx context.Context, name string) (string, error) {
		cluster := clusters.From(ctx)
		if cluster == clusters.Wildcard {
			return "", apierrors.NewBadRequest("a single mount cannot be addressed across all clusters")
		}
		if msgs := path.ValidatePathSegmentName(name, false); len(msgs) != 0 {
			return "", apierrors.NewBadRequest(fmt.Sprintf("name %q is not a valid %s name: %s", name, mounts.Resource("mounts"), strings.Join(msgs, ";")))
		}
		return prefix + "/" + string(cluster) + "/" + name, nil
	}
}
