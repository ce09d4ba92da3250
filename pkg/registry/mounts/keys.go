package mounts

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

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
// default cluster carry none. A value the caller sent that names another cluster is left for
// validateCluster to refuse.
func setCluster(ctx context.Context, m *mounts.Mount) {
	want := requestCluster(ctx)
	if got, ok := m.Annotations[kcp.ClusterAnnotation]; ok && got != want {
		return
	}
	if want == "" {
		delete(m.Annotations, kcp.ClusterAnnotation)
		return
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[kcp.ClusterAnnotation] = want
}

// keepCluster keeps a Mount's cluster annotation through updates that leave it out (a
// manifest applied again, kubectl replace); a new value is left for validateCluster to refuse.
func keepCluster(newM, oldM *mounts.Mount) {
	if _, ok := newM.Annotations[kcp.ClusterAnnotation]; ok {
		return
	}
	if c, ok := oldM.Annotations[kcp.ClusterAnnotation]; ok {
		if newM.Annotations == nil {
			newM.Annotations = map[string]string{}
		}
		newM.Annotations[kcp.ClusterAnnotation] = c
	}
}

// requestCluster is the value of the cluster annotation of Mounts written by a request: the
// logical cluster, "" in the default cluster.
func requestCluster(ctx context.Context) string {
	if cluster := clusters.From(ctx); cluster != clusters.DefaultCluster && cluster != clusters.Wildcard {
		return string(cluster)
	}
	return ""
}

// validateCluster refuses a cluster annotation other than the request's logical cluster: a
// Mount cannot move between clusters, nor claim another one.
func validateCluster(ctx context.Context, m *mounts.Mount) field.ErrorList {
	want := requestCluster(ctx)
	got, ok := m.Annotations[kcp.ClusterAnnotation]
	if (!ok && want == "") || got == want {
		return nil
	}
	fld := field.NewPath("metadata", "annotations").Key(kcp.ClusterAnnotation)
	if want == "" {
		return field.ErrorList{field.Forbidden(fld, "Mounts of the default cluster carry no logical cluster")}
	}
	return field.ErrorList{field.Invalid(fld, got, fmt.Sprintf("a Mount belongs to the logical cluster it was created in, %s; the annotation cannot be changed", want))}
}
