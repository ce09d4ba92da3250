package events

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
)

// EventsREST serves events.k8s.io/v1 Events from the core store, converting each object on
// its way in and out, so that both APIs see the same Events as in Kubernetes.
type EventsREST struct {
	core *REST
}

var (
	_ rest.StandardStorage      = &EventsREST{}
	_ rest.Scoper               = &EventsREST{}
	_ rest.SingularNameProvider = &EventsREST{}
	_ rest.TableConvertor       = &EventsREST{}
	_ rest.UpdatedObjectInfo    = convertedUpdate{}
)

// NewEventsREST serves core's Events as events.k8s.io/v1.
func NewEventsREST(core *REST) *EventsREST { return &EventsREST{core: core} }

func (r *EventsREST) New() runtime.Object     { return &eventsv1.Event{} }
func (r *EventsREST) NewList() runtime.Object { return &eventsv1.EventList{} }
func (r *EventsREST) Destroy()                {}
func (r *EventsREST) NamespaceScoped() bool   { return true }
func (r *EventsREST) GetSingularName() string { return "event" }

func (r *EventsREST) ConvertToTable(ctx context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	return tableConvertor{}.ConvertToTable(ctx, obj, opts)
}

// toEventsObject converts what the core store returns (an Event, a list, or a Status).
func toEventsObject(obj runtime.Object) runtime.Object {
	switch o := obj.(type) {
	case *corev1.Event:
		return ToEvents(o)
	case *corev1.EventList:
		return ToEventsList(o)
	}
	return obj
}

// toCoreObject converts what callers send.
func toCoreObject(obj runtime.Object) (*corev1.Event, error) {
	e, ok := obj.(*eventsv1.Event)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not an events.k8s.io Event: %T", obj))
	}
	return ToCore(e), nil
}

func (r *EventsREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.core.Get(ctx, name, options)
	if err != nil {
		return nil, err
	}
	return toEventsObject(obj), nil
}

func (r *EventsREST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	obj, err := r.core.List(ctx, options)
	if err != nil {
		return nil, err
	}
	return toEventsObject(obj), nil
}

func (r *EventsREST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	w, err := r.core.Watch(ctx, options)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(in watch.Event) (watch.Event, bool) {
		in.Object = toEventsObject(in.Object)
		return in, true
	}), nil
}

// validateNew checks what Kubernetes checks of Events created through events.k8s.io, which
// its recorders always fill.
func validateNew(e *eventsv1.Event) field.ErrorList {
	var allErrs field.ErrorList
	if e.EventTime.IsZero() {
		allErrs = append(allErrs, field.Required(field.NewPath("eventTime"), ""))
	}
	for path, value := range map[string]string{"reportingController": e.ReportingController, "reportingInstance": e.ReportingInstance, "action": e.Action, "reason": e.Reason} {
		if value == "" {
			allErrs = append(allErrs, field.Required(field.NewPath(path), ""))
		}
	}
	if e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		allErrs = append(allErrs, field.NotSupported(field.NewPath("type"), e.Type, []string{corev1.EventTypeNormal, corev1.EventTypeWarning}))
	}
	if len(e.Note) > MaxMessageLength {
		allErrs = append(allErrs, field.TooLong(field.NewPath("note"), "", MaxMessageLength))
	}
	return allErrs
}

// eventsValidation hands the validation of the caller's API (admission) an events.k8s.io Event.
func eventsValidation(validate rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	if validate == nil {
		return nil
	}
	return func(ctx context.Context, obj runtime.Object) error { return validate(ctx, toEventsObject(obj)) }
}

func (r *EventsREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	e, ok := obj.(*eventsv1.Event)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not an events.k8s.io Event: %T", obj))
	}
	if errs := validateNew(e); len(errs) > 0 {
		return nil, apierrors.NewInvalid(eventsv1.SchemeGroupVersion.WithKind("Event").GroupKind(), e.Name, errs)
	}
	out, err := r.core.Create(ctx, ToCore(e), eventsValidation(createValidation), options)
	if err != nil {
		return nil, err
	}
	return toEventsObject(out), nil
}

// convertedUpdate applies an events.k8s.io update or patch to a stored core Event.
type convertedUpdate struct {
	inner rest.UpdatedObjectInfo
}

func (u convertedUpdate) Preconditions() *metav1.Preconditions { return u.inner.Preconditions() }

func (u convertedUpdate) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	updated, err := u.inner.UpdatedObject(ctx, toEventsObject(old))
	if err != nil {
		return nil, err
	}
	return toCoreObject(updated)
}

func (r *EventsREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	var validateUpdate rest.ValidateObjectUpdateFunc
	if updateValidation != nil {
		validateUpdate = func(ctx context.Context, obj, old runtime.Object) error {
			return updateValidation(ctx, toEventsObject(obj), toEventsObject(old))
		}
	}
	out, created, err := r.core.Update(ctx, name, convertedUpdate{inner: objInfo}, eventsValidation(createValidation), validateUpdate, forceAllowCreate, options)
	if err != nil {
		return nil, false, err
	}
	return toEventsObject(out), created, nil
}

func (r *EventsREST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	out, immediate, err := r.core.Delete(ctx, name, eventsValidation(deleteValidation), options)
	if err != nil {
		return nil, false, err
	}
	return toEventsObject(out), immediate, nil
}

func (r *EventsREST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	out, err := r.core.DeleteCollection(ctx, eventsValidation(deleteValidation), options, listOptions)
	if err != nil {
		return nil, err
	}
	return toEventsObject(out), nil
}
