package cborfields

import (
	"io"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// maxMemoBytes bounds the remembered field sets (JSON and CBOR bytes together). Mounts share a
// handful of field sets; sets unique to a Mount (its own label keys, say) stop being remembered
// once the memo is full and are converted per response, as upstream does.
const maxMemoBytes = 4 << 20

// NewSerializerInfo is cbor.NewSerializerInfo whose Serializer remembers field sets; use it in
// serializer.WithSerializer.
func NewSerializerInfo(creater runtime.ObjectCreater, typer runtime.ObjectTyper) runtime.SerializerInfo {
	info := cbor.NewSerializerInfo(creater, typer)
	info.Serializer = &serializer{Serializer: info.Serializer.(cbor.Serializer), memo: newMemo(maxMemoBytes)}
	return info
}

// serializer encodes Mounts and MountLists with their field sets already in CBOR, which
// FieldsV1.MarshalCBOR then writes as they are.
type serializer struct {
	cbor.Serializer
	memo *memo
}

// Encode implements runtime.Encoder.
func (s *serializer) Encode(obj runtime.Object, w io.Writer) error {
	return s.Serializer.Encode(s.withCBORFields(obj), w)
}

// EncodeNondeterministic implements runtime.NondeterministicEncoder.
func (s *serializer) EncodeNondeterministic(obj runtime.Object, w io.Writer) error {
	return s.Serializer.EncodeNondeterministic(s.withCBORFields(obj), w)
}

// withCBORFields returns obj, or a shallow copy of it whose managedFields entries carry CBOR
// field sets. obj itself is never changed: its slices are the watch cache's.
func (s *serializer) withCBORFields(obj runtime.Object) runtime.Object {
	switch o := obj.(type) {
	case *v1alpha1.Mount:
		fields, ok := s.managedFields(o.ManagedFields)
		if !ok {
			return obj
		}
		m := *o
		m.ManagedFields = fields
		return &m
	case *v1alpha1.MountList:
		var items []v1alpha1.Mount
		for i := range o.Items {
			fields, ok := s.managedFields(o.Items[i].ManagedFields)
			if !ok {
				continue
			}
			if items == nil {
				items = make([]v1alpha1.Mount, len(o.Items))
				copy(items, o.Items)
			}
			items[i].ManagedFields = fields
		}
		if items == nil {
			return obj
		}
		l := *o
		l.Items = items
		return &l
	}
	return obj
}

// managedFields returns a copy of entries with CBOR field sets, or false if none changed.
func (s *serializer) managedFields(entries []metav1.ManagedFieldsEntry) ([]metav1.ManagedFieldsEntry, bool) {
	var out []metav1.ManagedFieldsEntry
	for i := range entries {
		f := entries[i].FieldsV1
		if f == nil || len(f.Raw) == 0 || f.Raw[0] != '{' {
			continue // empty, or not JSON: the encoder handles it as upstream
		}
		c, ok := s.memo.cbor(f.Raw)
		if !ok {
			continue
		}
		if out == nil {
			out = make([]metav1.ManagedFieldsEntry, len(entries))
			copy(out, entries)
		}
		out[i].FieldsV1 = &metav1.FieldsV1{Raw: c}
	}
	return out, out != nil
}

// memo maps field sets in JSON to the same sets in CBOR, as FieldsV1.MarshalCBOR writes them.
type memo struct {
	max   int
	mu    sync.RWMutex
	sets  map[string][]byte
	bytes int
}

func newMemo(max int) *memo { return &memo{max: max, sets: map[string][]byte{}} }

// cbor returns the CBOR of the JSON field set raw; false if raw does not convert (the
// encoder then reports the error as upstream does).
func (m *memo) cbor(raw []byte) ([]byte, bool) {
	m.mu.RLock()
	c, ok := m.sets[string(raw)]
	m.mu.RUnlock()
	if ok {
		return c, true
	}
	c, err := metav1.FieldsV1{Raw: raw}.MarshalCBOR()
	if err != nil {
		return nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sets[string(raw)]; !ok && m.bytes+len(raw)+len(c) <= m.max {
		m.sets[string(raw)] = c
		m.bytes += len(raw) + len(c)
	}
	return c, true
}
