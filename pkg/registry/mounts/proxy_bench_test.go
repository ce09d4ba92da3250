package mounts_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	etcd3testing "k8s.io/apiserver/pkg/storage/etcd3/testing"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/apiserver"
	mountsregistry "github.com/kcp-dev/mount-apiserver/pkg/registry/mounts"
)

// cachedOptions serves the storage over a real etcd with the watch cache, as the server does.
type cachedOptions struct{ cfg *storagebackend.Config }

func (o cachedOptions) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{
		StorageConfig:           o.cfg.ForResource(resource),
		Decorator:               genericregistry.StorageWithCacher(),
		DeleteCollectionWorkers: 1,
		ResourcePrefix:          resource.Group + "/" + resource.Resource,
	}, nil
}

// BenchmarkProxyMountRead compares the ways mounts/proxy can read its Mount: from the watch
// cache as it is (fast, but it may lag behind acknowledged writes), by a quorum read from
// etcd (what Connect does), and from the cache once it has caught up with etcd's current
// revision (the consistent-read-from-cache way: a revision request plus the wait).
func BenchmarkProxyMountRead(b *testing.B) {
	server, cfg := etcd3testing.NewUnsecuredEtcd3TestClientServer(b)
	b.Cleanup(func() { server.Terminate(b) })
	cfg.Codec = apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)
	cfg.EventsHistoryWindow = storagebackend.DefaultEventsHistoryWindow
	storage, err := mountsregistry.NewStorage(apiserver.Scheme, cachedOptions{cfg}, mountsregistry.StorageOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(storage.Mount.Destroy)
	// Mounts are cluster-scoped: the request's namespace is empty.
	ctx := genericapirequest.WithNamespace(context.Background(), "")
	m := &mounts.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: mounts.MountSpec{
			Type:     mounts.MountTypeURL,
			Ref:      mounts.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: "clusters", Name: "bench"},
			Identity: mounts.MountIdentity{Mode: mounts.IdentityModeImpersonate},
		},
	}
	if _, err := storage.Mount.Create(ctx, m, nil, &metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	// Wait until the watch cache is ready (before, reads go to etcd) and serves the Mount.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := storage.Mount.ReadinessCheck(); err != nil {
			if time.Now().After(deadline) {
				b.Fatalf("the watch cache never became ready: %v", err)
			}
		} else if _, err := storage.Mount.Get(ctx, "bench", &metav1.GetOptions{ResourceVersion: "0"}); err == nil {
			break
		} else if time.Now().After(deadline) {
			b.Fatalf("the watch cache never served the mount: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	read := func(b *testing.B, opts func() *metav1.GetOptions) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := storage.Mount.Get(ctx, "bench", opts()); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("watch cache, stale", func(b *testing.B) {
		read(b, func() *metav1.GetOptions { return &metav1.GetOptions{ResourceVersion: "0"} })
	})
	b.Run("quorum read", func(b *testing.B) {
		read(b, func() *metav1.GetOptions { return &metav1.GetOptions{} })
	})
	atCurrentRevision := func() *metav1.GetOptions {
		rv, err := storage.Mount.Storage.Storage.GetCurrentResourceVersion(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return &metav1.GetOptions{ResourceVersion: strconv.FormatUint(rv, 10)}
	}
	b.Run("watch cache at current revision", func(b *testing.B) {
		read(b, atCurrentRevision)
	})

	// An etcd shared with other writers (another resource, another server): etcd's revision
	// moves without events for mounts, so the cache must ask for progress notifications to
	// know that it is current, while a quorum read does not care.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			_, _ = server.V3Client.Put(ctx, "/other/"+strconv.Itoa(i%100), "x")
		}
	}()
	b.Cleanup(func() { close(stop); <-done })
	b.Run("shared etcd, quorum read", func(b *testing.B) {
		read(b, func() *metav1.GetOptions { return &metav1.GetOptions{} })
	})
	b.Run("shared etcd, watch cache at current revision", func(b *testing.B) {
		read(b, atCurrentRevision)
	})
}
