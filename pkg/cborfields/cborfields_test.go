package cborfields

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

func newScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(s, metav1.SchemeGroupVersion)
	return s
}

func mount(i int, labelKey string) v1alpha1.Mount {
	spec := `{"f:spec":{"f:identity":{"f:mode":{}},"f:ref":{"f:apiVersion":{},"f:kind":{},"f:name":{},"f:namespace":{}},"f:type":{}}}`
	if labelKey != "" {
		spec = `{"f:metadata":{"f:labels":{"f:` + labelKey + `":{}}},"f:spec":{"f:ref":{"f:name":{}}}}`
	}
	return v1alpha1.Mount{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Mount"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m-%d", i), ResourceVersion: fmt.Sprint(10 + i), ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "mounts.kcp.io/v1alpha1", FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(spec)}},
			{Manager: "mount-status", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "mounts.kcp.io/v1alpha1", FieldsType: "FieldsV1", Subresource: "status",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:status":{},"f:type":{}}},"f:phase":{}}}`)}},
			{Manager: "empty", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1"},
		}},
		Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: "c"}},
	}
}

// TestSameBytesAsUpstream: Mounts and MountLists encode to the upstream serializer's bytes,
// the objects given are left as they were, and other objects pass through.
func TestSameBytesAsUpstream(t *testing.T) {
	scheme := newScheme(t)
	upstream := cbor.NewSerializerInfo(scheme, scheme).Serializer.(cbor.Serializer)
	ours := NewSerializerInfo(scheme, scheme).Serializer.(*serializer)
	list := &v1alpha1.MountList{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MountList"}, ListMeta: metav1.ListMeta{ResourceVersion: "99"}}
	for i := range 20 {
		list.Items = append(list.Items, mount(i, ""))
	}
	list.Items = append(list.Items, mount(20, "team"), v1alpha1.Mount{TypeMeta: list.Items[0].TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: "bare"}})
	one := mount(0, "env")
	status := &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure, Message: "m"}
	for _, obj := range []runtime.Object{list, &one, &v1alpha1.MountList{TypeMeta: list.TypeMeta}, status} {
		before := obj.DeepCopyObject()
		for name, enc := range map[string][2]func(runtime.Object, *bytes.Buffer) error{
			"Encode":                 {func(o runtime.Object, b *bytes.Buffer) error { return upstream.Encode(o, b) }, func(o runtime.Object, b *bytes.Buffer) error { return ours.Encode(o, b) }},
			"EncodeNondeterministic": {func(o runtime.Object, b *bytes.Buffer) error { return upstream.EncodeNondeterministic(o, b) }, func(o runtime.Object, b *bytes.Buffer) error { return ours.EncodeNondeterministic(o, b) }},
		} {
			for round := range 2 { // the second from the memo
				var want, got bytes.Buffer
				if err := enc[0](obj, &want); err != nil {
					t.Fatal(err)
				}
				if err := enc[1](obj, &got); err != nil {
					t.Fatal(err)
				}
				if name == "Encode" && !bytes.Equal(want.Bytes(), got.Bytes()) {
					t.Errorf("%T %s round %d: %d bytes, upstream %d, not the same", obj, name, round, got.Len(), want.Len())
				}
				// Nondeterministic: map keys in any order, the same object decoded.
				w, _, err := upstream.Decode(want.Bytes(), nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				g, _, err := upstream.Decode(got.Bytes(), nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(w, g); diff != "" {
					t.Errorf("%T %s round %d decodes differently: %s", obj, name, round, diff)
				}
			}
		}
		if diff := cmp.Diff(before, obj); diff != "" {
			t.Errorf("%T changed by encoding: %s", obj, diff)
		}
	}
	// The list's items share three distinct JSON sets (spec, status, the labelled spec) and
	// the single Mount a fourth.
	if n := len(ours.memo.sets); n != 4 {
		t.Errorf("%d field sets remembered, want 4", n)
	}
}

// TestMemoIsBounded: field sets beyond the memo's bytes are converted without being kept, and
// still encode as upstream.
func TestMemoIsBounded(t *testing.T) {
	scheme := newScheme(t)
	upstream := cbor.NewSerializerInfo(scheme, scheme).Serializer
	ours := NewSerializerInfo(scheme, scheme).Serializer.(*serializer)
	ours.memo = newMemo(2000)
	list := &v1alpha1.MountList{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MountList"}}
	for i := range 100 {
		list.Items = append(list.Items, mount(i, fmt.Sprintf("label-%03d", i)))
	}
	var want, got bytes.Buffer
	if err := upstream.Encode(list, &want); err != nil {
		t.Fatal(err)
	}
	if err := ours.Encode(list, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want.Bytes(), got.Bytes()) {
		t.Error("bytes differ from upstream's")
	}
	if ours.memo.bytes > 2000 || len(ours.memo.sets) < 2 || len(ours.memo.sets) > 20 {
		t.Errorf("memo holds %d sets in %d bytes, bound 2000", len(ours.memo.sets), ours.memo.bytes)
	}
}

// TestInvalidFieldsFailAsUpstream: a field set that is not valid JSON fails the encoding, as
// upstream, and is not remembered.
func TestInvalidFieldsFailAsUpstream(t *testing.T) {
	scheme := newScheme(t)
	ours := NewSerializerInfo(scheme, scheme).Serializer.(*serializer)
	m := mount(0, "")
	m.ManagedFields[0].FieldsV1 = &metav1.FieldsV1{Raw: []byte(`{"f:spec":`)}
	var buf bytes.Buffer
	if err := ours.Encode(&m, &buf); err == nil {
		t.Error("encoded a Mount whose field set is not JSON")
	}
	if len(ours.memo.sets) != 1 { // the valid status set only
		t.Errorf("%d sets remembered", len(ours.memo.sets))
	}
}
