package mounts

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
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

// objectKeyFunc returns the key of a stored Mount from the object itself, for the watch cache,
// which keys objects without a request: the cluster is the object's kcp.io/cluster annotation,
// the default cluster without one.
func objectKeyFunc(prefix string) func(obj runtime.Object) (string, error) {
	return func(obj runtime.Object) (string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return "", err
		}
		cluster := clusters.DefaultCluster
		if c := m.GetAnnotations()[kcp.ClusterAnnotation]; c != "" {
			cluster = clusters.Name(c)
		}
		return prefix + "/" + string(cluster) + "/" + m.GetName(), nil
	}
}

// setCluster records the request's logical cluster on a new Mount, as kcp does; Mounts of the
// default cluster carry none.
func setCluster(ctx context.Context, m *mounts.Mount) {
	if cluster := clusters.From(ctx); cluster != clusters.DefaultCluster && cluster != clusters.Wildcard {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[kcp.ClusterAnnotation] = string(cluster)
		return
	}
	delete(m.Annotations, kcp.ClusterAnnotation)
}

// keepCluster keeps a Mount's cluster annotation through updates: a Mount cannot move.
func keepCluster(newM, oldM *mounts.Mount) {
	if c, ok := oldM.Annotations[kcp.ClusterAnnotation]; ok {
		if newM.Annotations == nil {
			newM.Annotations = map[string]string{}
		}
		newM.Annotations[kcp.ClusterAnnotation] = c
		return
	}
	delete(newM.Annotations, kcp.ClusterAnnotation)
}
