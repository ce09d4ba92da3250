package apiserver

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

func TestStripManagedFields(t *testing.T) {
	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := stripManagedFields(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*v1alpha1.Mount); got.ManagedFields != nil || got.Name != "m" {
		t.Errorf("after the transform: %+v", got.ObjectMeta)
	}
	// Tombstones of deletes pass through untouched.
	tombstone := cache.DeletedFinalStateUnknown{Key: "m", Obj: m}
	if out, err := stripManagedFields(tombstone); err != nil || out != any(tombstone) {
		t.Errorf("tombstone: %v, %v", out, err)
	}
}
