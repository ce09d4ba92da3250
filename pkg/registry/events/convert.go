package events

import (
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
)

// The store keeps core v1 Events; events.k8s.io/v1 is another view of the same fields, mapped
// as Kubernetes maps them (note is message, regarding is involvedObject, the deprecated
// fields are core's older ones).

// ToEvents returns e as an events.k8s.io/v1 Event.
func ToEvents(e *corev1.Event) *eventsv1.Event {
	out := &eventsv1.Event{
		ObjectMeta:               *e.ObjectMeta.DeepCopy(),
		EventTime:                e.EventTime,
		ReportingController:      e.ReportingController,
		ReportingInstance:        e.ReportingInstance,
		Action:                   e.Action,
		Reason:                   e.Reason,
		Regarding:                e.InvolvedObject,
		Note:                     e.Message,
		Type:                     e.Type,
		DeprecatedSource:         e.Source,
		DeprecatedFirstTimestamp: e.FirstTimestamp,
		DeprecatedLastTimestamp:  e.LastTimestamp,
		DeprecatedCount:          e.Count,
	}
	out.TypeMeta.SetGroupVersionKind(eventsv1.SchemeGroupVersion.WithKind("Event"))
	if e.Series != nil {
		out.Series = &eventsv1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	if e.Related != nil {
		related := *e.Related
		out.Related = &related
	}
	return out
}

// ToCore returns e as a core v1 Event.
func ToCore(e *eventsv1.Event) *corev1.Event {
	out := &corev1.Event{
		ObjectMeta:          *e.ObjectMeta.DeepCopy(),
		InvolvedObject:      e.Regarding,
		Reason:              e.Reason,
		Message:             e.Note,
		Source:              e.DeprecatedSource,
		FirstTimestamp:      e.DeprecatedFirstTimestamp,
		LastTimestamp:       e.DeprecatedLastTimestamp,
		Count:               e.DeprecatedCount,
		Type:                e.Type,
		EventTime:           e.EventTime,
		Action:              e.Action,
		ReportingController: e.ReportingController,
		ReportingInstance:   e.ReportingInstance,
	}
	out.TypeMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Event"))
	if e.Series != nil {
		out.Series = &corev1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	if e.Related != nil {
		related := *e.Related
		out.Related = &related
	}
	return out
}

// ToEventsList returns l as an events.k8s.io/v1 EventList.
func ToEventsList(l *corev1.EventList) *eventsv1.EventList {
	out := &eventsv1.EventList{ListMeta: l.ListMeta, Items: make([]eventsv1.Event, len(l.Items))}
	for i := range l.Items {
		out.Items[i] = *ToEvents(&l.Items[i])
	}
	return out
}
