package mounts

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/registry/applyerrors"
	"github.com/kcp-dev/mount-apiserver/pkg/storagevalue"
)

// REST is the storage of the mounts resource.
type REST struct {
	*genericregistry.Store
}

// StatusREST is the storage of the mounts/status subresource.
type StatusREST struct {
	store *genericregistry.Store
}

var (
	_ rest.StandardStorage     = &REST{}
	_ rest.ShortNamesProvider  = &REST{}
	_ rest.ResetFieldsStrategy = &REST{}
	_ rest.Patcher             = &StatusREST{}
	_ rest.Storage             = &StatusREST{}
	_ rest.ResetFieldsStrategy = &StatusREST{}
	_ rest.TableConvertor      = &StatusREST{}
)

// Storage holds the storage of mounts and its subresources.
type Storage struct {
	Mount  *REST
	Status *StatusREST
	Proxy  *ProxyREST
	// Attach is nil when NewStorage got no attach handler.
	Attach *AttachREST
}

// StorageOptions says what the storage of mounts serves besides the Mounts themselves.
type StorageOptions struct {
	// Proxy serves mounts/proxy.
	Proxy ProxyHandlerFunc
	// FanOut, if set, serves mounts/*/proxy.
	FanOut FanOutHandlerFunc
	// Attach, if set, serves mounts/attach.
	Attach AttachHandlerFunc
	// AfterDelete, if set, learns of every deleted Mount.
	AfterDelete func(*mounts.Mount)
	// SoleWriter says that no other process writes this storage's etcd (the embedded etcd):
	// proxied requests then read their Mount from the watch cache, no older than this
	// process's newest acknowledged write, instead of from etcd (fence.go).
	SoleWriter bool
}

// NewStorage returns the storage of mounts over the RESTOptionsGetter's etcd.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, o StorageOptions) (*Storage, error) {
	resource := mounts.Resource("mounts")
	optsGetter = storedRESTOptions{optsGetter}
	opts, err := optsGetter.GetRESTOptions(resource, &mounts.Mount{})
	if err != nil {
		return nil, fmt.Errorf("getting storage options for %s: %w", resource, err)
	}
	prefix := "/" + strings.TrimPrefix(opts.ResourcePrefix, "/")

	strategy := NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &mounts.Mount{} },
		NewListFunc:               func() runtime.Object { return &mounts.MountList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  resource,
		SingularQualifiedResource: mounts.Resource("mount"),
		KeyRootFunc:               keyRootFunc(prefix),
		KeyFunc:                   keyFunc(prefix),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: tableConvertor{},
	}
	if afterDelete := o.AfterDelete; afterDelete != nil {
		store.AfterDelete = func(obj runtime.Object, _ *metav1.DeleteOptions) {
			afterDelete(obj.(*mounts.Mount))
		}
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, fmt.Errorf("completing storage of %s: %w", resource, err)
	}
	reader := mountReader{store: store}
	if o.SoleWriter {
		// Before the status store copies it: status writes raise the fence too.
		reader.fence = &writeFence{}
		store.Storage.Storage = fencedStorage{Interface: store.Storage.Storage, fence: reader.fence}
	}

	statusStrategy := NewStatusStrategy(strategy)
	statusStore := *store
	statusStore.UpdateStrategy = statusStrategy
	statusStore.ResetFieldsStrategy = statusStrategy

	storage := &Storage{Mount: &REST{store}, Status: &StatusREST{store: &statusStore}, Proxy: &ProxyREST{mounts: reader, handler: o.Proxy, fanOut: o.FanOut}}
	if o.Attach != nil {
		storage.Attach = &AttachREST{mounts: reader, handler: o.Attach}
	}
	return storage, nil
}

// storedRESTOptions adapts how Mounts are stored: the codec makes the Mounts it decodes share
// their repeated values (intern.go) and answers bytes read again from the Mounts decoded from
// them (recent.go), and values are compressed in etcd (pkg/storagevalue).
type storedRESTOptions struct {
	generic.RESTOptionsGetter
}

// GetRESTOptions wraps the storage codec and transformer of the getter's options.
func (g storedRESTOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil || opts.StorageConfig == nil {
		return opts, err
	}
	cfg := *opts.StorageConfig
	cfg.Codec = newRecentCodec(internCodec{Codec: cfg.Codec})
	cfg.Transformer = storagevalue.Compressing(cfg.Transformer)
	opts.StorageConfig = &cfg
	// The watch cache keys objects by their own cluster, not the default one.
	if decorate := opts.Decorator; decorate != nil {
		objectKey := objectKeyFunc("/" + strings.TrimPrefix(opts.ResourcePrefix, "/"))
		opts.Decorator = func(config *storagebackend.ConfigForResource, resourcePrefix string, _ func(runtime.Object) (string, error),
			newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, trigger storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
			return decorate(config, resourcePrefix, objectKey, newFunc, newListFunc, getAttrs, trigger, indexers)
		}
	}
	return opts, nil
}

// ShortNames lets users type `kubectl get mnt`.
func (r *REST) ShortNames() []string { return []string{"mnt"} }

// Update is the store's; a server-side apply patch that does not fit the schema (a typo) is
// the caller's fault, BadRequest (pkg/registry/applyerrors).
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.Store.Update(ctx, name, applyerrors.Wrap(objInfo), createValidation, updateValidation, forceAllowCreate, options)
}

// New returns an empty Mount.
func (r *StatusREST) New() runtime.Object { return &mounts.Mount{} }

// Destroy does nothing: the main resource's store owns the storage and destroys it.
func (r *StatusREST) Destroy() {}

// Get returns the Mount whose status is addressed.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update changes the status of a Mount and nothing else.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Status updates never create: a status without its Mount means nothing.
	return r.store.Update(ctx, name, applyerrors.Wrap(objInfo), createValidation, updateValidation, false, options)
}

// GetResetFields returns the fields that status updates ignore.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints a Mount's status as the main resource does.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
