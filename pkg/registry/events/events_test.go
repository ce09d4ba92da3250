package events

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func fullEvent() *corev1.Event {
	now := metav1.NewTime(time.Unix(1700000000, 0))
	micro := metav1.NewMicroTime(time.Unix(1700000001, 5000))
	return &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: "e", Namespace: "default", Labels: map[string]string{"a": "b"}},
		InvolvedObject:      corev1.ObjectReference{Kind: "Mount", Name: "prod", UID: "u", APIVersion: "mounts.kcp.io/v1alpha1"},
		Reason:              "Ready",
		Message:             "Phase Connecting -> Ready",
		Source:              corev1.EventSource{Component: "c", Host: "h"},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               3,
		Type:                corev1.EventTypeNormal,
		EventTime:           micro,
		Series:              &corev1.EventSeries{Count: 2, LastObservedTime: micro},
		Action:              "Probe",
		Related:             &corev1.ObjectReference{Kind: "Secret", Name: "s"},
		ReportingController: "mount-status",
		ReportingInstance:   "mount-status-1",
	}
}

// Every field survives core -> events.k8s.io -> core, so both APIs show the same Event.
func TestConversionRoundTrip(t *testing.T) {
	e := fullEvent()
	back := ToCore(ToEvents(e))
	e.TypeMeta = back.TypeMeta
	if diff := cmp.Diff(e, back); diff != "" {
		t.Errorf("round trip changed the Event (-want +got):\n%s", diff)
	}
	v := ToEvents(e)
	if v.Note != e.Message || v.Regarding.Name != "prod" || v.DeprecatedCount != 3 || v.Kind != "Event" || v.APIVersion != "events.k8s.io/v1" {
		t.Errorf("events.k8s.io view: %+v", v)
	}
}

func TestFieldLabels(t *testing.T) {
	for _, c := range []struct {
		convert     func(string, string) (string, string, error)
		label, want string
	}{
		{ConvertCoreFieldLabel, "involvedObject.name", "involvedObject.name"},
		{ConvertCoreFieldLabel, "metadata.namespace", "metadata.namespace"},
		{ConvertEventsFieldLabel, "regarding.uid", "involvedObject.uid"},
		{ConvertEventsFieldLabel, "reportingController", "reportingComponent"},
		{ConvertEventsFieldLabel, "involvedObject.kind", "involvedObject.kind"},
		{ConvertCoreFieldLabel, "message", ""},
		{ConvertEventsFieldLabel, "regarding.nothing", ""},
	} {
		got, _, err := c.convert(c.label, "x")
		if got != c.want || (err != nil) != (c.want == "") {
			t.Errorf("%s: %q, %v; want %q", c.label, got, err, c.want)
		}
	}
	_, fields, err := GetAttrs(fullEvent())
	if err != nil {
		t.Fatal(err)
	}
	// Every label the conversions accept is a field the store can select by.
	for label := range fields {
		if _, _, err := ConvertCoreFieldLabel(label, ""); err != nil {
			t.Errorf("selectable field %s is refused: %v", label, err)
		}
	}
	if fields["involvedObject.name"] != "prod" || fields["reportingComponent"] != "mount-status" || fields["source"] != "c" {
		t.Errorf("fields: %v", fields)
	}
}

func TestValidation(t *testing.T) {
	s := strategy{}
	if errs := s.Validate(context.Background(), fullEvent()); len(errs) != 0 {
		t.Errorf("a complete Event: %v", errs)
	}
	bad := fullEvent()
	bad.Message = strings.Repeat("x", MaxMessageLength+1)
	bad.Type = "Alarming"
	bad.InvolvedObject.Namespace = "other"
	bad.Reason = strings.Repeat("r", 129)
	errs := s.Validate(context.Background(), bad)
	for _, path := range []string{"message", "type", "involvedObject.namespace", "reason"} {
		found := false
		for _, err := range errs {
			found = found || err.Field == path
		}
		if !found {
			t.Errorf("no error at %s in %v", path, errs)
		}
	}
	v := ToEvents(fullEvent())
	v.Action, v.EventTime = "", metav1.MicroTime{}
	if errs := validateNew(v); len(errs) != 2 || errs[0].Type != field.ErrorTypeRequired {
		t.Errorf("events.k8s.io Event without action and eventTime: %v", errs)
	}
}

func TestTable(t *testing.T) {
	e := fullEvent()
	table, err := tableConvertor{}.ConvertToTable(context.Background(), ToEvents(e), nil)
	if err != nil {
		t.Fatal(err)
	}
	cells := table.Rows[0].Cells
	if cells[1] != "Normal" || cells[2] != "Ready" || cells[3] != "mount/prod" || cells[4] != e.Message || cells[5] != "mount-status" || cells[7] != "2" {
		t.Errorf("row: %v", cells)
	}
}
