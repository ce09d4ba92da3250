package apiserver

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cborfields"
)

// cborNested is a CBOR map {"apiVersion":..., "kind":"Mount", field: <n nested arrays>}.
func cborNested(field string, n int, open byte) []byte {
	text := func(s string) []byte { return append([]byte{0x60 + byte(len(s))}, s...) }
	b := []byte{0xa3}
	b = append(b, text("apiVersion")...)
	b = append(b, text("mounts.kcp.io/v1alpha1")...)
	b = append(b, text("kind")...)
	b = append(b, text("Mount")...)
	b = append(b, text(field)...)
	b = append(b, bytes.Repeat([]byte{open}, n)...)
	return append(b, 0x00)
}

// TestMountBodiesNestedDeep sends Mount bodies of 3 MiB of nesting (what kube-apiserver's and
// this server's request bound allows) in JSON and in CBOR (served with the
// CBORServingAndStorage gate) to the decoders the server uses for Mounts, with small stacks:
// they stop at 10000 levels (sigs.k8s.io/json, and apimachinery's CBOR MaxNestedLevels) with
// an error, in little memory and time, without recursing per level of input beyond that.
func TestMountBodiesNestedDeep(t *testing.T) {
	old := debug.SetMaxStack(64 << 20)
	t.Cleanup(func() { debug.SetMaxStack(old) })
	const size = 3 << 20
	gvk := v1alpha1.SchemeGroupVersion.WithKind("Mount")
	cbor := cborfields.NewSerializerInfo(Scheme, Scheme).Serializer
	info, ok := kruntime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), "application/json")
	if !ok {
		t.Fatal("no JSON serializer")
	}
	bodies := []struct {
		name string
		body []byte
	}{
		{"json unknown field", []byte(`{"apiVersion":"mounts.kcp.io/v1alpha1","kind":"Mount","spec":{"x":` + strings.Repeat("[", size))},
		{"json spec", []byte(`{"apiVersion":"mounts.kcp.io/v1alpha1","kind":"Mount","spec":` + strings.Repeat(`{"a":`, size/5))},
		{"json managedFields", []byte(`{"apiVersion":"mounts.kcp.io/v1alpha1","kind":"Mount","metadata":{"name":"m","managedFields":[{"manager":"x","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":` + strings.Repeat(`{"f:a":`, size/7))},
		{"cbor arrays", cborNested("spec", size, 0x81)},
		{"cbor indefinite arrays", cborNested("spec", size, 0x9f)},
		{"cbor tags", cborNested("spec", size, 0xd8)},
		{"cbor maps", cborNested("spec", size/3, 0xa1)},
	}
	// Within the bound, the typed decoders recurse per level: 9990 levels, closed, in a field
	// the Mount has not (dropped) and in metadata's annotations (refused), decode in
	// small stacks.
	within := []struct {
		name string
		body []byte
	}{
		{"json within the bound", []byte(`{"apiVersion":"mounts.kcp.io/v1alpha1","kind":"Mount","metadata":{"name":"m"},"spec":{"x":` + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) + `}}`)},
		{"json annotations within the bound", []byte(`{"apiVersion":"mounts.kcp.io/v1alpha1","kind":"Mount","metadata":{"name":"m","annotations":{"a":` + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) + `}}}`)},
		{"cbor within the bound", cborNested("x", 9990, 0x81)},
		{"cbor status within the bound", cborNested("status", 9990, 0x81)},
	}
	for _, b := range within {
		t.Run(b.name, func(t *testing.T) {
			dec := info.Serializer
			if strings.HasPrefix(b.name, "cbor") {
				dec = cbor
			}
			_, _, err := dec.Decode(b.body, &gvk, &v1alpha1.Mount{})
			t.Logf("%v", err)
		})
	}

	for _, b := range bodies {
		t.Run(b.name, func(t *testing.T) {
			dec := info.Serializer
			if strings.HasPrefix(b.name, "cbor") {
				dec = cbor
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, _, err := dec.Decode(b.body, &gvk, &v1alpha1.Mount{})
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%v in %v, %d KiB allocated", err, took, alloc>>10)
			if err == nil {
				t.Fatal("decoded")
			}
			if alloc > 64<<20 || took > 10*time.Second {
				t.Fatalf("%d MiB allocated in %v", alloc>>20, took)
			}
		})
	}
}

// FuzzDecodeMount feeds arbitrary bytes to the JSON and CBOR decoders of Mounts: an error or
// a Mount, never a panic.
func FuzzDecodeMount(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"mounts.kcp.io/v1alpha1","kind":"Mount","metadata":{"name":"m"},"spec":{"ref":{"name":"s"}}}`))
	f.Add(cborNested("spec", 40, 0x81))
	f.Add(cborNested("spec", 40, 0x9f))
	f.Add(cborNested("metadata", 3, 0xa1))
	gvk := v1alpha1.SchemeGroupVersion.WithKind("Mount")
	cbor := cborfields.NewSerializerInfo(Scheme, Scheme).Serializer
	info, _ := kruntime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), "application/json")
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, dec := range []kruntime.Serializer{cbor, info.Serializer, info.StrictSerializer} {
			_, _, _ = dec.Decode(data, &gvk, &v1alpha1.Mount{})
		}
	})
}
