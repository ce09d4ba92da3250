package secrets

import (
	"bytes"
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	apistorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
)

// MaxSecretSize is Kubernetes' limit of a Secret's data.
const MaxSecretSize = 1 * 1024 * 1024

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

var (
	_ rest.RESTCreateStrategy = strategy{}
	_ rest.RESTUpdateStrategy = strategy{}
	_ rest.RESTDeleteStrategy = strategy{}
)

func (strategy) NamespaceScoped() bool { return true }

// PrepareForCreate merges stringData into data, as Kubernetes does, and defaults the type.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	s := obj.(*corev1.Secret)
	mergeStringData(s)
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
}

func (strategy) PrepareForUpdate(_ context.Context, obj, _ runtime.Object) {
	s := obj.(*corev1.Secret)
	mergeStringData(s)
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
}

func mergeStringData(s *corev1.Secret) {
	if len(s.StringData) == 0 {
		s.StringData = nil
		return
	}
	if s.Data == nil {
		s.Data = make(map[string][]byte, len(s.StringData))
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validateSecret(obj.(*corev1.Secret))
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newS, oldS := obj.(*corev1.Secret), old.(*corev1.Secret)
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newS.ObjectMeta, &oldS.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSecret(newS)...)
	if newS.Type != oldS.Type {
		allErrs = append(allErrs, field.Invalid(field.NewPath("type"), newS.Type, "field is immutable"))
	}
	if oldS.Immutable != nil && *oldS.Immutable {
		if newS.Immutable == nil || !*newS.Immutable {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !maps.EqualFunc(newS.Data, oldS.Data, bytes.Equal) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
	}
	return allErrs
}

func validateSecret(s *corev1.Secret) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&s.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	dataPath := field.NewPath("data")
	total := 0
	for key, value := range s.Data {
		for _, msg := range utilvalidation.IsConfigMapKey(key) {
			allErrs = append(allErrs, field.Invalid(dataPath.Key(key), key, msg))
		}
		total += len(value)
	}
	if total > MaxSecretSize {
		allErrs = append(allErrs, field.TooLong(dataPath, "", MaxSecretSize))
	}
	if len(s.Type) > utilvalidation.DNS1123SubdomainMaxLength {
		allErrs = append(allErrs, field.TooLong(field.NewPath("type"), "", utilvalidation.DNS1123SubdomainMaxLength))
	}
	return allErrs
}

func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

func (strategy) Canonicalize(runtime.Object) {}

func (strategy) AllowCreateOnUpdate(context.Context) bool { return false }

func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// GetAttrs returns the labels and the selectable fields of a Secret: metadata.name,
// metadata.namespace and type, as in Kubernetes.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return nil, nil, fmt.Errorf("not a Secret: %T", obj)
	}
	return s.Labels, generic.AddObjectMetaFieldsSet(fields.Set{"type": string(s.Type)}, &s.ObjectMeta, true), nil
}

// Match returns the matcher for list and watch with label and field selectors.
func Match(label labels.Selector, field fields.Selector) apistorage.SelectionPredicate {
	return apistorage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
