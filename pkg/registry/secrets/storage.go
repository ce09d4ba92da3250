package secrets

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/registry/applyerrors"
)

// REST is the storage of secrets.
type REST struct {
	*genericregistry.Store
}

var (
	_ rest.StandardStorage = &REST{}
	_ rest.TableConvertor  = tableConvertor{}
)

// NewREST returns the storage of secrets over the getter's etcd (and its encryption at rest).
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, error) {
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &corev1.Secret{} },
		NewListFunc:               func() runtime.Object { return &corev1.SecretList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  corev1.Resource("secrets"),
		SingularQualifiedResource: corev1.Resource("secret"),

		CreateStrategy: s,
		UpdateStrategy: s,
		DeleteStrategy: s,

		TableConvertor: tableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, fmt.Errorf("completing storage of secrets: %w", err)
	}
	return &REST{store}, nil
}

// The Secrets are the operator's (the kubeconfigs of the default cluster's mounts): a logical
// cluster of kcp mode never reaches them, whatever a path mapping or an authorizer let through.
func defaultClusterOnly(ctx context.Context) error {
	if c := clusters.From(ctx); c != clusters.DefaultCluster {
		return apierrors.NewForbidden(corev1.Resource("secrets"), "", fmt.Errorf("Secrets are not served in logical cluster %s", c))
	}
	return nil
}

// Get implements rest.Getter in the default cluster only.
func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	if err := defaultClusterOnly(ctx); err != nil {
		return nil, err
	}
	return r.Store.Get(ctx, name, options)
}

// List implements rest.Lister in the default cluster only.
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	if err := defaultClusterOnly(ctx); err != nil {
		return nil, err
	}
	return r.Store.List(ctx, options)
}

// Watch implements rest.Watcher in the default cluster only.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	if err := defaultClusterOnly(ctx); err != nil {
		return nil, err
	}
	return r.Store.Watch(ctx, options)
}

// Create implements rest.Creater in the default cluster only.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if err := defaultClusterOnly(ctx); err != nil {
		return nil, err
	}
	return r.Store.Create(ctx, obj, createValidation, options)
}

// Update implements rest.Updater (and patches) in the default cluster only.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	if err := defaultClusterOnly(ctx); err != nil {
		return nil, false, err
	}
	// A server-side apply patch that does not fit the schema is the caller's fault.
	return r.Store.Update(ctx, name, applyerrors.Wrap(objInfo), createValidation, updateValidation, forceAllowCreate, options)
}

// Delete implements rest.GracefulDeleter in the default cluster only.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	if err := defaultClusterOnly(ctx); err != nil {
		return nil, false, err
	}
	return r.Store.Delete(ctx, name, deleteValidation, options)
}

// DeleteCollection implements rest.CollectionDeleter in the default cluster only.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	if err := defaultClusterOnly(ctx); err != nil {
		return nil, err
	}
	return r.Store.DeleteCollection(ctx, deleteValidation, options, listOptions)
}

// tableConvertor prints what kubectl get secrets prints: name, type, number of keys, age.
type tableConvertor struct{}

func (tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "Name of the Secret."},
		{Name: "Type", Type: "string", Description: "Type of the Secret."},
		{Name: "Data", Type: "string", Description: "Number of keys in the Secret."},
		{Name: "Age", Type: "string", Description: "Time since the Secret was created."},
	}}
	add := func(s *corev1.Secret) {
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells:  []any{s.Name, string(s.Type), strconv.Itoa(len(s.Data)), duration.HumanDuration(metav1.Now().Sub(s.CreationTimestamp.Time))},
			Object: runtime.RawExtension{Object: s},
		})
	}
	switch t := obj.(type) {
	case *corev1.Secret:
		add(t)
	case *corev1.SecretList:
		for i := range t.Items {
			add(&t.Items[i])
		}
		table.ResourceVersion, table.Continue, table.RemainingItemCount = t.ResourceVersion, t.Continue, t.RemainingItemCount
	default:
		return nil, fmt.Errorf("cannot print %T", obj)
	}
	if m, err := meta.ListAccessor(obj); err == nil {
		table.SelfLink = m.GetSelfLink()
	}
	return table, nil
}
