package events

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// tableConvertor prints what kubectl get events prints against a cluster: last seen, type,
// reason, object and message; -o wide adds source, first seen, count and name.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Last Seen", Type: "string", Description: "Time since the Event last happened."},
	{Name: "Type", Type: "string", Description: "Normal or Warning."},
	{Name: "Reason", Type: "string", Description: "Why the Event happened, in one word."},
	{Name: "Object", Type: "string", Description: "The object the Event is about."},
	{Name: "Message", Type: "string", Description: "What happened."},
	{Name: "Source", Type: "string", Priority: 1, Description: "The component that reported the Event."},
	{Name: "First Seen", Type: "string", Priority: 1, Description: "Time since the Event first happened."},
	{Name: "Count", Type: "string", Priority: 1, Description: "How often the Event happened."},
	{Name: "Name", Type: "string", Format: "name", Priority: 1, Description: "Name of the Event."},
}

func (tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: columns}
	now := metav1.Now()
	add := func(e *corev1.Event, object runtime.Object) {
		first := e.FirstTimestamp.Time
		if first.IsZero() {
			first = e.EventTime.Time
		}
		count := e.Count
		if e.Series != nil {
			count = e.Series.Count
		} else if count == 0 {
			count = 1
		}
		source := e.ReportingController
		if source == "" {
			source = e.Source.Component
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells: []any{
				duration.HumanDuration(now.Sub(lastSeen(e))), e.Type, e.Reason,
				strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name, e.Message,
				source, duration.HumanDuration(now.Sub(first)), strconv.Itoa(int(count)), e.Name,
			},
			Object: runtime.RawExtension{Object: object},
		})
	}
	switch t := obj.(type) {
	case *corev1.Event:
		add(t, t)
	case *corev1.EventList:
		for i := range t.Items {
			add(&t.Items[i], &t.Items[i])
		}
		table.ResourceVersion, table.Continue, table.RemainingItemCount = t.ResourceVersion, t.Continue, t.RemainingItemCount
	case *eventsv1.Event:
		add(ToCore(t), t)
	case *eventsv1.EventList:
		for i := range t.Items {
			add(ToCore(&t.Items[i]), &t.Items[i])
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
