package mounts

import (
	"slices"
	"unique"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// The watch cache keeps every Mount decoded, most of them twice: the current version and the
// creation version its event history still holds. Most of a Mount's bytes repeat from mount to
// mount: condition types, reasons and messages, the Secret reference, the CA bundle, and the
// managers and field sets of managedFields. Decoding them into one shared copy each takes what
// a cached Mount keeps from 2.1 KB to 1.2 KB (BenchmarkDecodeRetained).
//
// Shared values are safe because objects read from storage are never modified in place: the
// cache hands the same object to every reader, and writers deep-copy first (DeepCopy gives
// fresh slices). unique.Make keeps no value alive that no object refers to any more.

// internCodec is a storage codec whose decoded Mounts share their repeated values.
type internCodec struct {
	runtime.Codec
}

// Decode decodes with the wrapped codec and interns a decoded Mount.
func (c internCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := c.Codec.Decode(data, defaults, into)
	if m, ok := obj.(*mounts.Mount); ok && err == nil {
		internMount(m)
	}
	return obj, gvk, err
}

// internMount replaces the values of m that usually repeat across mounts by shared copies. Names,
// UIDs, resource versions and status.URL are unique per mount and left alone.
func internMount(m *mounts.Mount) {
	for i := range m.ManagedFields {
		internManagedFields(&m.ManagedFields[i])
	}
	s := &m.Spec
	s.Type = mounts.MountType(internString(string(s.Type)))
	s.Ref.APIVersion = internString(s.Ref.APIVersion)
	s.Ref.Kind = internString(s.Ref.Kind)
	s.Ref.Namespace = internString(s.Ref.Namespace)
	s.Ref.Name = internString(s.Ref.Name)
	s.Identity.Mode = mounts.IdentityMode(internString(string(s.Identity.Mode)))
	s.Identity.UserPrefix = internString(s.Identity.UserPrefix)
	s.Identity.GroupPrefix = internString(s.Identity.GroupPrefix)
	s.CABundle = internBytes(s.CABundle)

	m.Status.Phase = mounts.MountPhase(internString(string(m.Status.Phase)))
	// Decoding grows slices by doubling: three conditions sit in room for four.
	if cap(m.Status.Conditions) > len(m.Status.Conditions) {
		m.Status.Conditions = slices.Clone(m.Status.Conditions)
	}
	for i := range m.Status.Conditions {
		c := &m.Status.Conditions[i]
		c.Type = internString(c.Type)
		c.Status = metav1.ConditionStatus(internString(string(c.Status)))
		c.Reason = internString(c.Reason)
		c.Message = internString(c.Message)
	}
}

func internManagedFields(e *metav1.ManagedFieldsEntry) {
	e.Manager = internString(e.Manager)
	e.Operation = metav1.ManagedFieldsOperationType(internString(string(e.Operation)))
	e.APIVersion = internString(e.APIVersion)
	e.FieldsType = internString(e.FieldsType)
	e.Subresource = internString(e.Subresource)
	if e.FieldsV1 != nil {
		e.FieldsV1.Raw = internBytes(e.FieldsV1.Raw)
	}
}

func internString(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// internBytes returns b's shared copy: a slice over an interned string's bytes. Its capacity is
// its length, so an append copies rather than writes into the shared bytes.
func internBytes(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	s := unique.Make(string(b)).Value()
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
