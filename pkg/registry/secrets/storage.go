package secrets

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
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
