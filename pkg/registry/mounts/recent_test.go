package mounts

import (
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

func TestRecentCodecKeepsMountsReadTwice(t *testing.T) {
	codec, _ := storageCodecs()
	recent := newRecentCodec(internCodec{Codec: codec})
	data := encode(t, codec, storedMount("a"))
	want := decode(t, codec, data)

	first := decode(t, recent, data)
	second := decode(t, recent, data)
	if recent.hits != 0 {
		t.Fatalf("bytes seen once or twice were answered from what was kept: %d hits", recent.hits)
	}
	// The caller owns what it got (but the interned bytes, which writers deep-copy first):
	// changing it changes nothing kept.
	second.Spec.Ref.Name = "changed"
	second.Status.Conditions[0].Reason = "Changed"
	second.Labels = map[string]string{"x": "y"}

	third := decode(t, recent, data)
	into := &mounts.Mount{}
	into.Name = "left over"
	if _, _, err := recent.Decode(data, nil, into); err != nil {
		t.Fatal(err)
	}
	if recent.hits != 2 {
		t.Errorf("hits = %d, want 2", recent.hits)
	}
	for name, got := range map[string]*mounts.Mount{"first": first, "third": third, "into": into} {
		if !apiequality.Semantic.DeepEqual(got, want) {
			t.Errorf("%s decoding differs from plain decoding:\n%#v\n%#v", name, got, want)
		}
	}
	if third == into || &third.Status.Conditions[0] == &into.Status.Conditions[0] {
		t.Error("two answers share a Mount or its conditions")
	}
	if !sameString(third.Spec.Ref.Name, first.Spec.Ref.Name) || &third.Spec.CABundle[0] != &first.Spec.CABundle[0] ||
		&third.ManagedFields[1].FieldsV1.Raw[0] != &first.ManagedFields[1].FieldsV1.Raw[0] {
		t.Error("an answer from what was kept lost the interned values")
	}

	// Other bytes are decoded as they are.
	other := encode(t, codec, storedMount("b"))
	if got := decode(t, recent, other); got.Name != "b" || recent.hits != 2 {
		t.Errorf("other bytes: got %q with %d hits", got.Name, recent.hits)
	}
}

// TestRecentCodecStaysBounded decodes many distinct Mounts twice each.
func TestRecentCodecStaysBounded(t *testing.T) {
	codec, _ := storageCodecs()
	recent := newRecentCodec(internCodec{Codec: codec})
	for range 2 {
		for i := range maxRecent + 10 {
			data := encode(t, codec, storedMount("m-"+string(rune('a'+i%26))+string(rune('a'+i/26))))
			decode(t, recent, data)
		}
	}
	if len(recent.entries) > maxRecent || len(recent.seen) > maxSeen {
		t.Errorf("kept %d Mounts and %d hashes, at most %d and %d", len(recent.entries), len(recent.seen), maxRecent, maxSeen)
	}
}
