package storagevalue

import (
	"bytes"
	"context"
	"testing"
)

// FuzzTransformRoundTrip: for any value, decode(encode(x)) == x, the stored form carries the
// prefix and is not stale, with the identity inner transformer and with one that rewrites
// every byte (as encryption at rest does). The seed corpus is
// testdata/fuzz/FuzzTransformRoundTrip.
func FuzzTransformRoundTrip(f *testing.F) {
	f.Add([]byte(mountJSON))
	f.Add([]byte(Prefix))
	f.Add([]byte{})
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, inner := range []*reversing{nil, {}} {
			name, c := "identity", mustCompressing(t)
			if inner != nil {
				name, c = "reversing", mustCompressing(t, inner)
			}
			stored, err := c.TransformToStorage(ctx, in, dataCtx)
			if err != nil {
				t.Fatalf("%s: writing %d bytes: %v", name, len(in), err)
			}
			if inner == nil && !bytes.HasPrefix(stored, []byte(Prefix)) {
				t.Fatalf("%s: the stored value lacks the prefix", name)
			}
			out, stale, err := c.TransformFromStorage(ctx, stored, dataCtx)
			if err != nil || stale || !bytes.Equal(out, in) {
				t.Fatalf("%s: %d bytes read back as %d bytes, stale %v, %v", name, len(in), len(out), stale, err)
			}
		}
	})
}
