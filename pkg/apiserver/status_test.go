package apiserver

import (
	"context"
	"slices"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

func TestStripUnread(t *testing.T) {
	m := &v1alpha1.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "u", ResourceVersion: "7", Generation: 2,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			Labels:        map[string]string{"env": "prod"},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"spec":{}}`}},
		Spec:   v1alpha1.MountSpec{Type: v1alpha1.MountTypeURL},
		Status: v1alpha1.MountStatus{Phase: v1alpha1.MountPhaseReady},
	}
	out, err := stripUnread(m)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*v1alpha1.Mount)
	if got.ManagedFields != nil || got.Labels != nil || got.Annotations != nil {
		t.Errorf("after the transform: %+v", got.ObjectMeta)
	}
	if got.Name != "m" || got.UID != "u" || got.ResourceVersion != "7" || got.Generation != 2 || got.Spec.Type != v1alpha1.MountTypeURL || got.Status.Phase != v1alpha1.MountPhaseReady {
		t.Errorf("the transform dropped what the controller reads: %+v", got)
	}
	// Tombstones of deletes pass through untouched.
	tombstone := cache.DeletedFinalStateUnknown{Key: "m", Obj: m}
	if out, err := stripUnread(tombstone); err != nil || out != any(tombstone) {
		t.Errorf("tombstone: %v, %v", out, err)
	}
}

// blockingSink holds every event until release is closed.
type blockingSink struct {
	release chan struct{}
	sent    chan *eventsv1.Event
}

func (s blockingSink) Create(_ context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	<-s.release
	s.sent <- e
	return e, nil
}

func (s blockingSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.Create(ctx, e)
}

func (s blockingSink) Patch(ctx context.Context, e *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	return s.Create(ctx, e)
}

// TestBoundedSinkDropsBeyondItsBound: with two events on their way, a third is dropped at
// once (and counts as recorded); once the two went out, events are sent again.
func TestBoundedSinkDropsBeyondItsBound(t *testing.T) {
	inner := blockingSink{release: make(chan struct{}), sent: make(chan *eventsv1.Event, 10)}
	sink := newBoundedSink(inner, 2, klog.Background())
	ctx := context.Background()
	event := func(name string) *eventsv1.Event {
		return &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	done := make(chan struct{})
	for _, name := range []string{"a", "b"} {
		go func() {
			defer func() { done <- struct{}{} }()
			if _, err := sink.Create(ctx, event(name)); err != nil {
				t.Error(err)
			}
		}()
	}
	// Wait until both hold their slot.
	for len(sink.slots) < 2 {
		time.Sleep(time.Millisecond)
	}
	got, err := sink.Create(ctx, event("c"))
	if err != nil || got.Name != "c" {
		t.Fatalf("the third event: %v, %v; want it back, dropped", got, err)
	}
	if n := sink.dropped.Load(); n != 1 {
		t.Errorf("dropped %d, want 1", n)
	}
	close(inner.release)
	<-done
	<-done
	if _, err := sink.Patch(ctx, event("d"), nil); err != nil {
		t.Fatal(err)
	}
	close(inner.sent)
	var names []string
	for e := range inner.sent {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b", "d"}) {
		t.Errorf("sent %v, want a, b and d", names)
	}
}
