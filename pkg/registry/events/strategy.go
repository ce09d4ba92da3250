package events

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	apistorage "k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
)

// Bounds of an Event's fields, Kubernetes' own: a note (message) of at most 1 KiB, reasons and
// actions of at most 128 characters.
const (
	MaxMessageLength = 1024
	maxShortLength   = 128
)

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

var (
	_ rest.RESTCreateStrategy = strategy{}
	_ rest.RESTUpdateStrategy = strategy{}
	_ rest.RESTDeleteStrategy = strategy{}
)

func (strategy) NamespaceScoped() bool                                            { return true }
func (strategy) PrepareForCreate(context.Context, runtime.Object)                 {}
func (strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validateEvent(obj.(*corev1.Event))
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	newE, oldE := obj.(*corev1.Event), old.(*corev1.Event)
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newE.ObjectMeta, &oldE.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateEvent(newE)...)
}

// validateEvent checks what Kubernetes checks of every Event, whichever API wrote it.
func validateEvent(e *corev1.Event) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&e.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if ns := e.InvolvedObject.Namespace; ns != "" && ns != e.Namespace {
		allErrs = append(allErrs, field.Invalid(field.NewPath("involvedObject", "namespace"), ns, "does not match event.namespace"))
	}
	if len(e.Message) > MaxMessageLength {
		allErrs = append(allErrs, field.TooLong(field.NewPath("message"), "", MaxMessageLength))
	}
	for path, value := range map[string]string{"reason": e.Reason, "action": e.Action, "type": e.Type, "reportingComponent": e.ReportingController, "reportingInstance": e.ReportingInstance} {
		if len(value) > maxShortLength {
			allErrs = append(allErrs, field.TooLong(field.NewPath(path), "", maxShortLength))
		}
	}
	if e.Type != "" && e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		allErrs = append(allErrs, field.NotSupported(field.NewPath("type"), e.Type, []string{corev1.EventTypeNormal, corev1.EventTypeWarning}))
	}
	if e.Series != nil && e.Series.Count < 2 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("series", "count"), e.Series.Count, "should be at least 2"))
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

// GetAttrs returns the labels and the selectable fields of an Event, Kubernetes' own, which
// kubectl describe selects by (involvedObject.name, .namespace, .kind, .uid).
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return nil, nil, fmt.Errorf("not an Event: %T", obj)
	}
	return e.Labels, generic.AddObjectMetaFieldsSet(fields.Set{
		"involvedObject.kind":            e.InvolvedObject.Kind,
		"involvedObject.namespace":       e.InvolvedObject.Namespace,
		"involvedObject.name":            e.InvolvedObject.Name,
		"involvedObject.uid":             string(e.InvolvedObject.UID),
		"involvedObject.apiVersion":      e.InvolvedObject.APIVersion,
		"involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
		"involvedObject.fieldPath":       e.InvolvedObject.FieldPath,
		"reason":                         e.Reason,
		"reportingComponent":             e.ReportingController,
		"source":                         e.Source.Component,
		"type":                           e.Type,
	}, &e.ObjectMeta, true), nil
}

// Match returns the matcher for list and watch with label and field selectors.
func Match(label labels.Selector, field fields.Selector) apistorage.SelectionPredicate {
	return apistorage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}

// ConvertCoreFieldLabel accepts the field selectors of core v1 Events.
func ConvertCoreFieldLabel(label, value string) (string, string, error) {
	switch label {
	case "metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
		"involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
		"reason", "reportingComponent", "source", "type":
		return label, value, nil
	}
	return "", "", fmt.Errorf("field label not supported: %s", label)
}

// ConvertEventsFieldLabel accepts the field selectors of events.k8s.io/v1 Events: core's, and
// the same fields by their events.k8s.io names (regarding.name is involvedObject.name).
func ConvertEventsFieldLabel(label, value string) (string, string, error) {
	switch {
	case strings.HasPrefix(label, "regarding."):
		label = "involvedObject." + strings.TrimPrefix(label, "regarding.")
	case label == "reportingController":
		label = "reportingComponent"
	case label == "deprecatedSource":
		label = "source"
	}
	return ConvertCoreFieldLabel(label, value)
}
