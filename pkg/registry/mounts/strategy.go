package mounts

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	apistorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/validation"
)

// mountStrategy is the create/update/delete strategy of the main resource: users own the spec,
// the status subresource owns the status.
type mountStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// mountStatusStrategy is the update strategy of mounts/status: only the status changes.
type mountStatusStrategy struct {
	mountStrategy
}

var (
	_ rest.RESTCreateStrategy  = mountStrategy{}
	_ rest.RESTUpdateStrategy  = mountStrategy{}
	_ rest.RESTDeleteStrategy  = mountStrategy{}
	_ rest.ResetFieldsStrategy = mountStrategy{}
	_ rest.RESTUpdateStrategy  = mountStatusStrategy{}
	_ rest.ResetFieldsStrategy = mountStatusStrategy{}
)

// NewStrategy returns the strategy of the main resource.
func NewStrategy(typer runtime.ObjectTyper) mountStrategy {
	return mountStrategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
}

// NewStatusStrategy returns the strategy of the status subresource.
func NewStatusStrategy(s mountStrategy) mountStatusStrategy {
	return mountStatusStrategy{mountStrategy: s}
}

func (mountStrategy) NamespaceScoped() bool { return false }

// GetResetFields says which fields the main resource ignores: the status.
func (mountStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(v1alpha1.SchemeGroupVersion.String()): fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// PrepareForCreate drops a status sent with the Mount and starts it Initializing: the
// registry is the first to see a mount, and setting the phase here saves the status
// controller one write per mount.
func (mountStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	m := obj.(*mounts.Mount)
	setCluster(ctx, m)
	m.Status = initialStatus(metav1.Now())
	m.Generation = 1
}

// ReasonNotChecked is the reason of every condition of a mount nobody has probed yet.
const ReasonNotChecked = "NotChecked"

// initialStatus is the status of a new mount: Initializing, every condition Unknown. It
// leaves observedGeneration at 0: no controller has observed the mount yet.
func initialStatus(now metav1.Time) mounts.MountStatus {
	s := mounts.MountStatus{Phase: mounts.MountPhaseInitializing}
	for _, t := range []string{v1alpha1.ConditionCredentialsResolved, v1alpha1.ConditionTargetReachable, v1alpha1.ConditionReady} {
		s.Conditions = append(s.Conditions, metav1.Condition{
			Type: t, Status: metav1.ConditionUnknown, Reason: ReasonNotChecked,
			Message: "The mount has not been checked yet.", LastTransitionTime: now,
		})
	}
	return s
}

func (mountStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newM, oldM := obj.(*mounts.Mount), old.(*mounts.Mount)
	newM.Status = oldM.Status
	keepCluster(newM, oldM)
	if !apiequality.Semantic.DeepEqual(newM.Spec, oldM.Spec) {
		newM.Generation = oldM.Generation + 1
	}
}

func (mountStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	m := obj.(*mounts.Mount)
	return append(validateCluster(ctx, m), validation.ValidateMount(m)...)
}

func (mountStrategy) WarningsOnCreate(_ context.Context, obj runtime.Object) []string {
	return warnings(obj.(*mounts.Mount))
}

func (mountStrategy) Canonicalize(runtime.Object) {}

func (mountStrategy) AllowCreateOnUpdate(context.Context) bool { return false }

func (mountStrategy) AllowUnconditionalUpdate(context.Context) bool { return true }

func (mountStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	m := obj.(*mounts.Mount)
	return append(validateCluster(ctx, m), validation.ValidateMountUpdate(m, old.(*mounts.Mount))...)
}

func (mountStrategy) WarningsOnUpdate(_ context.Context, obj, _ runtime.Object) []string {
	return warnings(obj.(*mounts.Mount))
}

func warnings(m *mounts.Mount) []string {
	if m.Spec.Identity.Mode == mounts.IdentityModeMountCredentials {
		return []string{fmt.Sprintf("spec.identity.mode: %s lets every caller allowed to proxy through this mount act with the mount's own credentials", m.Spec.Identity.Mode)}
	}
	return nil
}

// GetResetFields says which fields the status subresource ignores: everything but the status.
func (mountStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(v1alpha1.SchemeGroupVersion.String()): fieldpath.NewSet(
			fieldpath.MakePathOrDie("spec"),
			fieldpath.MakePathOrDie("metadata", "labels"),
			fieldpath.MakePathOrDie("metadata", "annotations"),
		),
	}
}

func (mountStatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	newM, oldM := obj.(*mounts.Mount), old.(*mounts.Mount)
	newM.Spec = oldM.Spec
	metav1.ResetObjectMetaForStatus(&newM.ObjectMeta, &oldM.ObjectMeta)
}

func (mountStatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateMountStatusUpdate(obj.(*mounts.Mount), old.(*mounts.Mount))
}

func (mountStatusStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// GetAttrs returns the labels and the selectable fields of a Mount.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	m, ok := obj.(*mounts.Mount)
	if !ok {
		return nil, nil, fmt.Errorf("not a Mount: %T", obj)
	}
	return m.Labels, SelectableFields(m), nil
}

// SelectableFields returns the fields a field selector may name.
func SelectableFields(m *mounts.Mount) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		v1alpha1.FieldSpecType:    string(m.Spec.Type),
		v1alpha1.FieldStatusPhase: string(m.Status.Phase),
	}, &m.ObjectMeta, false)
}

// Match returns the matcher for list and watch with label and field selectors.
func Match(label labels.Selector, field fields.Selector) apistorage.SelectionPredicate {
	return apistorage.SelectionPredicate{
		Label:    label,
		Field:    field,
		GetAttrs: GetAttrs,
	}
}
