package storagevalue

import (
	"bytes"
	"context"
	"crypto/rand"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
)

// mountJSON is a Mount as stored after the status controller wrote it.
const mountJSON = `{"kind":"Mount","apiVersion":"mounts.kcp.io/v1alpha1","metadata":{"name":"m-00042","uid":"5c1e9a4e-2f0b-4a7c-9d1e-0c4b7e1f2a3d","resourceVersion":"20042","generation":1,"creationTimestamp":"2026-11-22T06:00:00Z","managedFields":[{"manager":"scale","operation":"Update","apiVersion":"mounts.kcp.io/v1alpha1","time":"2026-11-22T06:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{".":{},"f:identity":{".":{},"f:mode":{}},"f:ref":{".":{},"f:apiVersion":{},"f:kind":{},"f:name":{},"f:namespace":{}},"f:type":{}}}},{"manager":"mount-apiserver","operation":"Update","apiVersion":"mounts.kcp.io/v1alpha1","time":"2026-11-22T06:00:01Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:URL":{},"f:conditions":{"k:{\"type\":\"CredentialsResolved\"}":{"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}},"k:{\"type\":\"Ready\"}":{"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}},"k:{\"type\":\"TargetReachable\"}":{"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}}},"f:observedGeneration":{},"f:phase":{}}},"subresource":"status"}]},"spec":{"type":"URL","ref":{"apiVersion":"v1","kind":"Secret","namespace":"clusters","name":"scale"},"identity":{"mode":"Impersonate"}},"status":{"phase":"Ready","conditions":[{"type":"CredentialsResolved","status":"True","observedGeneration":1,"lastTransitionTime":"2026-11-22T06:00:01Z","reason":"Resolved","message":"The kubeconfig of the referenced Secret is usable."},{"type":"TargetReachable","status":"True","observedGeneration":1,"lastTransitionTime":"2026-11-22T06:00:01Z","reason":"ProbeSucceeded","message":"GET /readyz answered 200."},{"type":"Ready","status":"True","observedGeneration":1,"lastTransitionTime":"2026-11-22T06:00:01Z","reason":"ProbeSucceeded","message":"Requests through the mount reach its target."}],"URL":"https://127.0.0.1:6443/apis/mounts.kcp.io/v1alpha1/mounts/m-00042/proxy","observedGeneration":1}}` + "\n"

var dataCtx = value.DefaultContext("/mount-apiserver/mounts.kcp.io/mounts/_default/m-00042")

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	tr := mustCompressing(t)
	random := make([]byte, 1<<20)
	_, _ = rand.Read(random)
	for name, in := range map[string][]byte{
		"empty":             {},
		"mount":             []byte(mountJSON),
		"random 1 MiB":      random,
		"looks like prefix": []byte(Prefix),
		"repetitive 10 MiB": bytes.Repeat([]byte(mountJSON), 10<<20/len(mountJSON)),
	} {
		stored, err := tr.TransformToStorage(ctx, in, dataCtx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.HasPrefix(stored, []byte(Prefix)) {
			t.Errorf("%s: stored value lacks the prefix", name)
		}
		out, stale, err := tr.TransformFromStorage(ctx, stored, dataCtx)
		if err != nil || stale || !bytes.Equal(out, in) {
			t.Errorf("%s: read back %d bytes (stale %v, err %v), want the %d written", name, len(out), stale, err, len(in))
		}
	}

	stored, _ := tr.TransformToStorage(ctx, []byte(mountJSON), dataCtx)
	t.Logf("a stored Mount: %d bytes as JSON, %d compressed", len(mountJSON), len(stored))
	if len(stored) > len(mountJSON)/2 {
		t.Errorf("a stored Mount compresses from %d to only %d bytes", len(mountJSON), len(stored))
	}
}

// TestValuesWrittenBeforeCompression are read as they are and marked stale, so the next update
// rewrites them.
func TestValuesWrittenBeforeCompression(t *testing.T) {
	out, stale, err := mustCompressing(t).TransformFromStorage(context.Background(), []byte(mountJSON), dataCtx)
	if err != nil || !stale || string(out) != mountJSON {
		t.Errorf("plain JSON read as %q (stale %v, err %v)", out, stale, err)
	}
}

func TestBadValuesAreErrors(t *testing.T) {
	ctx := context.Background()
	bomb, err := mustCompressing(t).TransformToStorage(ctx, make([]byte, MaxValueBytes+1), dataCtx)
	if err != nil {
		t.Fatal(err)
	}
	valid, _ := mustCompressing(t).TransformToStorage(ctx, []byte(mountJSON), dataCtx)

	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"not s2":            {[]byte(Prefix + "{not s2}"), "decompressing a value"},
		"truncated":         {valid[:len(valid)-10], "decompressing a value"},
		"too large":         {bomb, "more than the limit"},
		"encrypted, no key": {[]byte("k8s:enc:aescbc:v1:key1:xxxx"), "encrypted"},
	} {
		out, _, err := mustCompressing(t).TransformFromStorage(ctx, c.data, dataCtx)
		if err == nil || !strings.Contains(err.Error(), c.want) || out != nil {
			t.Errorf("%s: got %d bytes, err %v; want an error containing %q", name, len(out), err, c.want)
		}
	}
}

// reversing stands in for encryption at rest: it must see compressed bytes on the way in, and
// hand back what it was given on the way out.
type reversing struct{ seen [][]byte }

func (r *reversing) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	r.seen = append(r.seen, slices.Clone(data))
	out := slices.Clone(data)
	slices.Reverse(out)
	return out, nil
}

func (r *reversing) TransformFromStorage(_ context.Context, data []byte, _ value.Context) ([]byte, bool, error) {
	out := slices.Clone(data)
	slices.Reverse(out)
	return out, false, nil
}

func TestCompressesBeforeTheInnerTransformer(t *testing.T) {
	ctx := context.Background()
	inner := &reversing{}
	tr := mustCompressing(t, inner)
	stored, err := tr.TransformToStorage(ctx, []byte(mountJSON), dataCtx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inner.seen) != 1 || !bytes.HasPrefix(inner.seen[0], []byte(Prefix)) {
		t.Fatalf("the inner transformer did not get the compressed value")
	}
	out, _, err := tr.TransformFromStorage(ctx, stored, dataCtx)
	if err != nil || string(out) != mountJSON {
		t.Errorf("read back %q, %v", out, err)
	}
}

func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	tr := mustCompressing(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				in := []byte(strings.Repeat(mountJSON, 1+(g+i)%3))
				stored, err := tr.TransformToStorage(ctx, in, dataCtx)
				if err != nil {
					t.Error(err)
					return
				}
				if out, _, err := tr.TransformFromStorage(ctx, stored, dataCtx); err != nil || !bytes.Equal(out, in) {
					t.Errorf("goroutine %d, value %d: read back %d bytes, %v", g, i, len(out), err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func FuzzTransformFromStorage(f *testing.F) {
	valid, _ := mustCompressing(f).TransformToStorage(context.Background(), []byte(mountJSON), dataCtx)
	f.Add(valid)
	f.Add([]byte(mountJSON))
	f.Add([]byte(Prefix))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := mustCompressing(t)
		out, _, err := tr.TransformFromStorage(context.Background(), data, dataCtx)
		if err != nil {
			return
		}
		// Whatever reads successfully is written and read back unchanged.
		stored, err := tr.TransformToStorage(context.Background(), out, dataCtx)
		if err != nil {
			t.Fatal(err)
		}
		again, _, err := tr.TransformFromStorage(context.Background(), stored, dataCtx)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("round trip of %d bytes: %v", len(out), err)
		}
	})
}

// BenchmarkTransform reports the cost per stored Mount of writing and reading it compressed,
// next to the identity transformer as the direct baseline.
//
//	go test ./pkg/storagevalue -run - -bench Transform
func BenchmarkTransform(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		tr   value.Transformer
	}{{"identity", identity.NewEncryptCheckTransformer()}, {"compressing", mustCompressing(b)}} {
		b.Run(c.name+"/write", func(b *testing.B) {
			var n int
			for b.Loop() {
				out, err := c.tr.TransformToStorage(ctx, []byte(mountJSON), dataCtx)
				if err != nil {
					b.Fatal(err)
				}
				n = len(out)
			}
			b.ReportMetric(float64(n), "stored-bytes")
		})
		stored, _ := c.tr.TransformToStorage(ctx, []byte(mountJSON), dataCtx)
		b.Run(c.name+"/read", func(b *testing.B) {
			for b.Loop() {
				if _, _, err := c.tr.TransformFromStorage(ctx, stored, dataCtx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func mustCompressing(t testing.TB, inner ...value.Transformer) value.Transformer {
	t.Helper()
	if len(inner) > 0 {
		return Compressing(inner[0])
	}
	return Compressing(nil)
}
