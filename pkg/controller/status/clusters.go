package status

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	mountinformers "github.com/kcp-dev/mount-apiserver/pkg/generated/informers/externalversions/mounts/v1alpha1"
	mountlisters "github.com/kcp-dev/mount-apiserver/pkg/generated/listers/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
)

// Mounts are cluster-scoped, so an informer's store keys them by name alone, and two logical
// clusters' mounts of one name would overwrite each other. The informer of all clusters
// (NewAllClustersInformer) therefore puts each mount's logical cluster into the namespace of
// its cached copy as it comes off the wire, before the store keys it: the key becomes
// <cluster>/<name>. Mounts of the default cluster keep no namespace and the key stays their
// name, exactly as outside kcp mode. The namespace is cleared again on every copy that
// leaves the controller (status writes, events, the proxy).

// ClusterOf returns the logical cluster of a mount of the controller's cache.
func ClusterOf(m *v1alpha1.Mount) clusters.Name {
	if m.Namespace != "" {
		return clusters.Name(m.Namespace)
	}
	return clusters.DefaultCluster
}

// Key is the work queue and store key of a mount of the controller's cache: its name, and
// <cluster>/<name> for a mount of a logical cluster.
func Key(m *v1alpha1.Mount) string { return KeyOf(clusters.Name(m.Namespace), m.Name) }

// KeyOf is the Key of the mount name of cluster.
func KeyOf(cluster clusters.Name, name string) string {
	if cluster == clusters.DefaultCluster || cluster == "" {
		return name
	}
	return string(cluster) + "/" + name
}

// ClusterProxyURL is the URL of a mount's proxy below base: ProxyURL for the default
// cluster, <base>/clusters/<cluster>/apis/... for a mount of a logical cluster, the path kcp
// (or its front-proxy, with base ending in the mapping's path) forwards to this server.
func ClusterProxyURL(base string, cluster clusters.Name, name string) string {
	if cluster == clusters.DefaultCluster {
		return ProxyURL(base, name)
	}
	return ProxyURL(base+"/clusters/"+string(cluster), name)
}

// NewAllClustersInformer returns an informer of the Mounts of every logical cluster: wildcard
// lists and watches through client, whose host ends in /clusters/*. transform, if not nil,
// runs on each mount after its cluster was recorded.
func NewAllClustersInformer(wildcard clientset.Interface, transform cache.TransformFunc) (mountinformers.MountInformer, error) {
	mounts := wildcard.MountsV1alpha1().Mounts()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := mounts.List(ctx, opts)
			if err != nil {
				return nil, err
			}
			for i := range list.Items {
				recordCluster(&list.Items[i])
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := mounts.Watch(ctx, opts)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
				if m, ok := ev.Object.(*v1alpha1.Mount); ok {
					recordCluster(m)
				}
				return ev, true
			}), nil
		},
	}
	informer := cache.NewSharedIndexInformerWithOptions(lw, &v1alpha1.Mount{}, cache.SharedIndexInformerOptions{
		// Not nil: the controller adds its index, which a nil map cannot take.
		Indexers:          cache.Indexers{},
		ObjectDescription: "mounts of all logical clusters",
	})
	if transform != nil {
		if err := informer.SetTransform(transform); err != nil {
			return nil, fmt.Errorf("setting the transform of the mount informer: %w", err)
		}
	}
	return allClustersInformer{informer: informer}, nil
}

// recordCluster moves the mount's logical cluster into its namespace (see above).
func recordCluster(m *v1alpha1.Mount) {
	if cluster := kcp.ClusterOf(m); cluster != clusters.DefaultCluster {
		m.Namespace = string(cluster)
	}
}

type allClustersInformer struct {
	informer cache.SharedIndexInformer
}

func (i allClustersInformer) Informer() cache.SharedIndexInformer { return i.informer }

// Lister lists by the store's keys; Get takes a Key, not a name.
func (i allClustersInformer) Lister() mountlisters.MountLister {
	return mountlisters.NewMountLister(i.informer.GetIndexer())
}
