package mounts

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// A request through a Mount must see every write of that Mount acknowledged before the request
// started (issue #11: a deleted Mount still proxied, a Mount switched to Impersonate still lending
// its bare credentials). With an etcd that other replicas share, only a quorum read promises
// that. With the embedded etcd, this process is the only writer: every acknowledged write of a
// Mount went through this process's store, which remembers the newest resourceVersion it
// acknowledged (writeFence). A read from the watch cache at least that new has seen all of them,
// and costs a map lookup instead of an etcd round trip, which was about a third of the CPU of a
// proxied request (issue #17).

// writeFence is the newest resourceVersion of a Mount write this process acknowledged.
type writeFence struct {
	rv atomic.Uint64
	// stale is set for good when a write's resourceVersion could not be learned: reads are
	// quorum reads from then on.
	stale atomic.Bool
}

// advance raises the fence to rv, never lowers it.
func (f *writeFence) advance(rv uint64) {
	for {
		cur := f.rv.Load()
		if rv <= cur || f.rv.CompareAndSwap(cur, rv) {
			return
		}
	}
}

// fencedStorage is the Mount storage that raises the fence after every write it acknowledges,
// before the store answers the client.
type fencedStorage struct {
	storage.Interface
	fence *writeFence
}

var _ storage.Interface = fencedStorage{}

// record raises the fence to the written object's resourceVersion, or, where the write gave back
// none (a corrupt object's delete decodes nothing), to etcd's current revision, which is newer.
func (s fencedStorage) record(ctx context.Context, obj runtime.Object) {
	if obj != nil {
		if rv, err := s.Versioner().ObjectResourceVersion(obj); err == nil && rv > 0 {
			s.fence.advance(rv)
			return
		}
	}
	rv, err := s.GetCurrentResourceVersion(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading etcd's revision after a Mount write")
		s.fence.stale.Store(true)
		return
	}
	s.fence.advance(rv)
}

// Create implements storage.Interface.
func (s fencedStorage) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	err := s.Interface.Create(ctx, key, obj, out, ttl)
	if err == nil {
		s.record(ctx, out)
	}
	return err
}

// Delete implements storage.Interface.
func (s fencedStorage) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions, validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	err := s.Interface.Delete(ctx, key, out, preconditions, validateDeletion, cachedExistingObject, opts)
	if err == nil {
		s.record(ctx, out)
	}
	return err
}

// GuaranteedUpdate implements storage.Interface.
func (s fencedStorage) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool, preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	err := s.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, tryUpdate, cachedExistingObject)
	if err == nil {
		s.record(ctx, destination)
	}
	return err
}

// mountReader reads the Mount of a proxied or attached request so that the request sees every
// acknowledged write of it.
type mountReader struct {
	store *genericregistry.Store
	// fence is nil unless this process is the only writer of its etcd; reads are then quorum
	// reads.
	fence *writeFence
}

// get returns the Mount name. The Mount may be shared with the watch cache: read it, never
// change it.
func (r mountReader) get(ctx context.Context, name string) (*mounts.Mount, error) {
	m, err := r.read(ctx, name)
	return m, apiError(ctx, err)
}

// apiError keeps an API error and makes any other one an API error: etcd's client answers a
// read whose caller went away (an agent that gave up on its attach) with the bare context
// error, which the server would log as a programmer's error ("Unhandled Error ... not an
// metav1.Status"), thousands of times in a reconnect storm. A read cut short by its request's
// end is a timeout, anything else an internal error.
func apiError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	if ctx.Err() != nil {
		return apierrors.NewTimeoutError(fmt.Sprintf("the request ended before its Mount was read: %v", err), 0)
	}
	return apierrors.NewInternalError(fmt.Errorf("reading the Mount: %w", err))
}

func (r mountReader) read(ctx context.Context, name string) (*mounts.Mount, error) {
	if r.fence == nil || r.fence.stale.Load() {
		return r.quorum(ctx, name)
	}
	rv := r.fence.rv.Load()
	// resourceVersion "0" (no write yet) is any state of the cache, which was first filled
	// after this process, and with it the embedded etcd, started.
	obj, err := r.store.Get(ctx, name, &metav1.GetOptions{ResourceVersion: strconv.FormatUint(rv, 10)})
	switch {
	case err == nil:
		return obj.(*mounts.Mount), nil
	case apierrors.IsNotFound(err):
		// The cache is at rv or newer: the Mount is gone or never was.
		return nil, err
	default:
		// The cache did not catch up in time, or is being filled again.
		return r.quorum(ctx, name)
	}
}

func (r mountReader) quorum(ctx context.Context, name string) (*mounts.Mount, error) {
	obj, err := r.store.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*mounts.Mount), nil
}

// list returns the Mounts of the request's cluster that selector selects, as get reads one:
// every acknowledged write is seen (a deleted Mount is not fanned out to).
func (r mountReader) list(ctx context.Context, selector labels.Selector) ([]*mounts.Mount, error) {
	opts := &metainternalversion.ListOptions{LabelSelector: selector}
	if r.fence != nil && !r.fence.stale.Load() {
		if rv := r.fence.rv.Load(); rv > 0 {
			opts.ResourceVersion = strconv.FormatUint(rv, 10)
			opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		}
	}
	obj, err := r.store.List(ctx, opts)
	if err != nil {
		return nil, apiError(ctx, err)
	}
	list, ok := obj.(*mounts.MountList)
	if !ok {
		return nil, fmt.Errorf("listing mounts gave a %T", obj)
	}
	out := make([]*mounts.Mount, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}
