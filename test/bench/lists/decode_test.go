package main

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	cbordirect "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/apiserver"
	"github.com/kcp-dev/mount-apiserver/pkg/cborfields"
	clientscheme "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned/scheme"
)

// The LIST of 10,000 Mounts that client-go decodes, deterministically: no server, no network,
// only the bytes the server sends and client-go's decoder of the typed clientset.
//
// testdata/mount.json is one Ready Mount as a real server answered a GET for it (written by
// `go run ./test/bench/scale -save-mount test/bench/lists/testdata/mount.json`): created by
// the bench's client, its status written by the status controller, so managedFields of two
// managers and three conditions. The list repeats it under 10,000 names and uids, and the
// server's codecs (JSON, and CBOR as served with --feature-gates=CBORServingAndStorage=true)
// encode it.
//
//	go test ./test/bench/lists -run '^$' -bench . -benchmem [-cpuprofile cpu.out]

const listSize = 10000

var (
	fixtureOnce sync.Once
	fixture     struct {
		list               *v1alpha1.MountList
		json, cbor         []byte
		jsonBare, cborBare []byte // without managedFields: the floor of the same LIST
		err                error
	}
)

// serverCodecs are the group's codecs as pkg/apiserver builds them with CBOR served: those
// of genericapiserver.NewDefaultAPIGroupInfo, with pkg/cborfields' CBOR serializer.
func serverCodecs() serializer.CodecFactory {
	return serializer.NewCodecFactory(apiserver.Scheme,
		serializer.WithStreamingCollectionEncodingToJSON(),
		serializer.WithStreamingCollectionEncodingToProtobuf(),
		serializer.WithSerializer(cborfields.NewSerializerInfo))
}

// encode writes obj as the server does for mediaType.
func encode(codecs serializer.CodecFactory, mediaType string, obj runtime.Object) ([]byte, error) {
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		return nil, fmt.Errorf("no serializer for %s", mediaType)
	}
	var buf bytes.Buffer
	if err := codecs.EncoderForVersion(info.Serializer, v1alpha1.SchemeGroupVersion).Encode(obj, &buf); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", mediaType, err)
	}
	return buf.Bytes(), nil
}

func loadFixture(tb testing.TB) {
	tb.Helper()
	fixtureOnce.Do(func() {
		fixture.err = buildFixture()
	})
	if fixture.err != nil {
		tb.Fatal(fixture.err)
	}
}

func buildFixture() error {
	data, err := os.ReadFile("testdata/mount.json")
	if err != nil {
		return err
	}
	codecs := serverCodecs()
	var one v1alpha1.Mount
	if _, _, err := codecs.UniversalDeserializer().Decode(data, nil, &one); err != nil {
		return fmt.Errorf("decoding testdata/mount.json: %w", err)
	}
	if len(one.ManagedFields) < 2 || len(one.Status.Conditions) == 0 {
		return fmt.Errorf("testdata/mount.json has %d managers and %d conditions, want a Mount whose status the controller wrote", len(one.ManagedFields), len(one.Status.Conditions))
	}
	list := &v1alpha1.MountList{ListMeta: metav1.ListMeta{ResourceVersion: "123456"}, Items: make([]v1alpha1.Mount, listSize)}
	for i := range list.Items {
		m := one.DeepCopy()
		m.Name = fmt.Sprintf("m-%05d", i)
		m.UID = types.UID(fmt.Sprintf("6f1c2a4e-8b3d-4c5e-9a7f-%012d", i))
		m.ResourceVersion = fmt.Sprint(100000 + i)
		m.Spec.Ref.Name = "scale"
		list.Items[i] = *m
	}
	fixture.list = list
	if fixture.json, err = encode(codecs, runtime.ContentTypeJSON, list); err != nil {
		return err
	}
	if fixture.cbor, err = encode(codecs, runtime.ContentTypeCBOR, list); err != nil {
		return err
	}
	bare := list.DeepCopy()
	for i := range bare.Items {
		bare.Items[i].ManagedFields = nil
	}
	if fixture.jsonBare, err = encode(codecs, runtime.ContentTypeJSON, bare); err != nil {
		return err
	}
	fixture.cborBare, err = encode(codecs, runtime.ContentTypeCBOR, bare)
	return err
}

// clientDecoder is the decoder client-go's typed clientset uses for a response of mediaType
// (rest.Result.Into): the generated client's codecs, with CBOR when ClientsAllowCBOR is on.
func clientDecoder(tb testing.TB, mediaType string) runtime.Decoder {
	tb.Helper()
	gates := clientfeatures.FeatureGates()
	clientfeatures.ReplaceFeatureGates(allowCBOR{gates})
	tb.Cleanup(func() { clientfeatures.ReplaceFeatureGates(gates) })
	ns := rest.CodecFactoryForGeneratedClient(clientscheme.Scheme, clientscheme.Codecs).WithoutConversion()
	dec, err := runtime.NewClientNegotiator(ns, v1alpha1.SchemeGroupVersion).Decoder(mediaType, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return dec
}

// TestFixtureDecodesAlike: client-go gets the same Mounts from the JSON and the CBOR LIST,
// the ones the server encoded.
func TestFixtureDecodesAlike(t *testing.T) {
	loadFixture(t)
	var fromJSON, fromCBOR v1alpha1.MountList
	if _, _, err := clientDecoder(t, runtime.ContentTypeJSON).Decode(fixture.json, nil, &fromJSON); err != nil {
		t.Fatal(err)
	}
	if _, _, err := clientDecoder(t, runtime.ContentTypeCBOR).Decode(fixture.cbor, nil, &fromCBOR); err != nil {
		t.Fatal(err)
	}
	if len(fromJSON.Items) != listSize {
		t.Fatalf("%d items, want %d", len(fromJSON.Items), listSize)
	}
	// client-go's CBOR decoder turns managedFields back into JSON (k8s.io/apimachinery's
	// transcoding of raw types), so both lists compare as they are.
	if diff := cmp.Diff(fromJSON, fromCBOR); diff != "" {
		t.Errorf("JSON and CBOR LISTs differ: %s", diff)
	}
	want := fixture.list.DeepCopy()
	want.APIVersion, want.Kind = fromJSON.APIVersion, fromJSON.Kind
	if diff := cmp.Diff(want, &fromJSON); diff != "" {
		t.Errorf("decoded LIST differs from the encoded one: %s", diff)
	}
}

// BenchmarkDecodeList: client-go's typed decoding of the LIST of 10,000 Mounts; "bare" is the
// same LIST without managedFields, "raw-cbor" the CBOR bytes decoded into generic values by
// the CBOR library alone (no typed structs): floors of what the server could send.
func BenchmarkDecodeList(b *testing.B) {
	loadFixture(b)
	for _, c := range []struct {
		name, mediaType string
		body            *[]byte
	}{
		{"json", runtime.ContentTypeJSON, &fixture.json},
		{"cbor", runtime.ContentTypeCBOR, &fixture.cbor},
		{"json-bare", runtime.ContentTypeJSON, &fixture.jsonBare},
		{"cbor-bare", runtime.ContentTypeCBOR, &fixture.cborBare},
	} {
		b.Run(c.name, func(b *testing.B) {
			dec := clientDecoder(b, c.mediaType)
			b.ReportAllocs()
			for b.Loop() {
				var list v1alpha1.MountList
				if _, _, err := dec.Decode(*c.body, nil, &list); err != nil {
					b.Fatal(err)
				}
				if len(list.Items) != listSize {
					b.Fatalf("%d items", len(list.Items))
				}
			}
			b.ReportMetric(float64(len(*c.body))/1e6, "MB")
		})
	}
	b.Run("raw-cbor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v any
			if err := cbordirect.Unmarshal(fixture.cbor, &v); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(fixture.cbor))/1e6, "MB")
	})
}

// BenchmarkEncodeList: the server's encoding of the same LIST (the versioned objects; the
// server converts from the internal version first).
func BenchmarkEncodeList(b *testing.B) {
	loadFixture(b)
	upstream := serializer.NewCodecFactory(apiserver.Scheme,
		serializer.WithStreamingCollectionEncodingToJSON(),
		serializer.WithStreamingCollectionEncodingToProtobuf(),
		serializer.WithSerializer(cbor.NewSerializerInfo))
	for _, c := range []struct {
		name, mediaType string
		codecs          serializer.CodecFactory
	}{
		{"json", runtime.ContentTypeJSON, serverCodecs()},
		{"cbor-upstream", runtime.ContentTypeCBOR, upstream},
		{"cbor", runtime.ContentTypeCBOR, serverCodecs()},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encode(c.codecs, c.mediaType, fixture.list); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
