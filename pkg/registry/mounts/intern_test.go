package mounts

import (
	"fmt"
	"math/rand"
	"runtime"
	"testing"
	"unsafe"

	apitestingfuzzer "k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/fuzzer"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/install"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// storageCodecs returns the storage codec the server uses (v1alpha1 JSON, decoded to the
// internal version) and the codec factory it comes from.
func storageCodecs() (kruntime.Codec, serializer.CodecFactory) {
	scheme := kruntime.NewScheme()
	install.Install(scheme)
	codecs := serializer.NewCodecFactory(scheme)
	return codecs.LegacyCodec(v1alpha1.SchemeGroupVersion), codecs
}

// storedMount is a Mount as the status controller leaves it: created by one manager, its status
// written by another, Ready.
func storedMount(name string) *mounts.Mount {
	now := metav1.Now()
	fields := func(s string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(s)} }
	cond := func(t string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "ProbeSucceeded", Message: "Requests through the mount reach its target.", ObservedGeneration: 1, LastTransitionTime: now}
	}
	return &mounts.Mount{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7", Generation: 1, CreationTimestamp: now,
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl-create", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "mounts.kcp.io/v1alpha1", Time: &now, FieldsType: "FieldsV1",
					FieldsV1: fields(`{"f:spec":{".":{},"f:identity":{".":{},"f:mode":{}},"f:ref":{".":{},"f:name":{},"f:namespace":{}},"f:type":{}}}`)},
				{Manager: "mount-apiserver", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "mounts.kcp.io/v1alpha1", Time: &now, FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: fields(`{"f:status":{"f:URL":{},"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}}},"f:observedGeneration":{},"f:phase":{}}}`)},
			},
		},
		Spec: mounts.MountSpec{
			Type:     mounts.MountTypeURL,
			Ref:      mounts.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: "clusters", Name: "prod"},
			Identity: mounts.MountIdentity{Mode: mounts.IdentityModeImpersonate},
			CABundle: []byte("-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n"),
		},
		Status: mounts.MountStatus{
			Phase:              mounts.MountPhaseReady,
			Conditions:         []metav1.Condition{cond("CredentialsResolved"), cond("TargetReachable"), cond("Ready")},
			URL:                "https://host/apis/mounts.kcp.io/v1alpha1/mounts/" + name + "/proxy",
			ObservedGeneration: 1,
		},
	}
}

func encode(t testing.TB, codec kruntime.Codec, obj kruntime.Object) []byte {
	t.Helper()
	data, err := kruntime.Encode(codec, obj)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func decode(t testing.TB, codec kruntime.Codec, data []byte) *mounts.Mount {
	t.Helper()
	obj, _, err := codec.Decode(data, nil, &mounts.Mount{})
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*mounts.Mount)
}

func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestInternCodecSharesRepeatedValues(t *testing.T) {
	codec, _ := storageCodecs()
	interned := internCodec{Codec: codec}
	a := decode(t, interned, encode(t, codec, storedMount("a")))
	b := decode(t, interned, encode(t, codec, storedMount("b")))

	for _, m := range []*mounts.Mount{a, b} {
		want := decode(t, codec, encode(t, codec, storedMount(m.Name)))
		if !apiequality.Semantic.DeepEqual(m, want) {
			t.Errorf("interned decoding of %s differs from plain decoding:\n%#v\n%#v", m.Name, m, want)
		}
	}
	shared := map[string][2]string{
		"spec.ref.name":                {a.Spec.Ref.Name, b.Spec.Ref.Name},
		"spec.type":                    {string(a.Spec.Type), string(b.Spec.Type)},
		"status.phase":                 {string(a.Status.Phase), string(b.Status.Phase)},
		"status.conditions[2].reason":  {a.Status.Conditions[2].Reason, b.Status.Conditions[2].Reason},
		"status.conditions[2].message": {a.Status.Conditions[2].Message, b.Status.Conditions[2].Message},
		"managedFields[1].manager":     {a.ManagedFields[1].Manager, b.ManagedFields[1].Manager},
	}
	for field, v := range shared {
		if !sameString(v[0], v[1]) {
			t.Errorf("%s: two decoded Mounts hold separate copies of %q", field, v[0])
		}
	}
	if &a.ManagedFields[1].FieldsV1.Raw[0] != &b.ManagedFields[1].FieldsV1.Raw[0] {
		t.Error("managedFields[1].fieldsV1: two decoded Mounts hold separate copies")
	}
	if &a.Spec.CABundle[0] != &b.Spec.CABundle[0] {
		t.Error("spec.caBundle: two decoded Mounts hold separate copies")
	}
	if c := a.Status.Conditions; cap(c) != len(c) {
		t.Errorf("status.conditions: %d conditions in room for %d", len(c), cap(c))
	}
	if sameString(a.Status.URL, b.Status.URL) || a.Status.URL == b.Status.URL {
		t.Errorf("status.URL of different mounts must stay distinct: %q", a.Status.URL)
	}

	// A writer deep-copies before it changes anything: the copy's bytes are its own.
	c := a.DeepCopy()
	c.ManagedFields[1].FieldsV1.Raw[0] = 'X'
	c.Spec.CABundle[0] = 'X'
	if b.ManagedFields[1].FieldsV1.Raw[0] == 'X' || b.Spec.CABundle[0] == 'X' {
		t.Error("changing a deep copy changed the shared bytes")
	}
	// An append never writes into the shared bytes either.
	grown := append(a.Spec.CABundle, '!')
	grown[0] = 'Y'
	if b.Spec.CABundle[0] == 'Y' {
		t.Error("appending to a shared slice wrote into the shared bytes")
	}
}

// TestInternCodecPreservesContent decodes fuzzed Mounts with and without interning.
func TestInternCodecPreservesContent(t *testing.T) {
	codec, codecs := storageCodecs()
	interned := internCodec{Codec: codec}
	f := apitestingfuzzer.FuzzerFor(apitestingfuzzer.MergeFuzzerFuncs(metafuzzer.Funcs, fuzzer.Funcs), rand.NewSource(1), codecs)
	for i := range 200 {
		m := &mounts.Mount{}
		f.Fill(m)
		data := encode(t, codec, m)
		if got, want := decode(t, interned, data), decode(t, codec, data); !apiequality.Semantic.DeepEqual(got, want) {
			t.Fatalf("fuzzed Mount %d: interned decoding differs from plain decoding:\n%#v\n%#v", i, got, want)
		}
	}
}

// BenchmarkDecodeRetained reports the heap that 10,000 decoded Mounts keep, as the watch cache
// keeps them, decoded plainly and with interning.
//
//	go test ./pkg/registry/mounts -run - -bench DecodeRetained
func BenchmarkDecodeRetained(b *testing.B) {
	codec, _ := storageCodecs()
	const n = 10000
	data := make([][]byte, n)
	for i := range data {
		data[i] = encode(b, codec, storedMount(fmt.Sprintf("m-%05d", i)))
	}
	for _, c := range []struct {
		name  string
		codec kruntime.Codec
	}{{"plain", codec}, {"interned", internCodec{Codec: codec}}} {
		b.Run(c.name, func(b *testing.B) {
			var retained uint64
			for b.Loop() {
				kept := make([]*mounts.Mount, n)
				before := heapAlloc()
				for i := range kept {
					kept[i] = decode(b, c.codec, data[i])
				}
				retained += heapAlloc() - before
				runtime.KeepAlive(kept)
			}
			b.ReportMetric(float64(retained)/float64(b.N)/n, "retained-B/mount")
		})
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	return s.HeapAlloc
}
