package apiserver

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

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
