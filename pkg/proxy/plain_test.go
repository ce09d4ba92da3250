package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"testing"
	"testing/iotest"

	"k8s.io/client-go/transport"
)

type captureHeaders struct{ got http.Header }

func (c *captureHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	c.got = req.Header.Clone()
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// TestPlainImpersonationAsClientGo: the headers set directly are what client-go's
// impersonating round tripper sends.
func TestPlainImpersonationAsClientGo(t *testing.T) {
	for name, imp := range map[string]*transport.ImpersonationConfig{
		"none":   nil,
		"user":   {UserName: "hub:alice"},
		"uid":    {UserName: "hub:alice", UID: "1234"},
		"groups": {UserName: "hub:alice", Groups: []string{"hub:a", "hub:system:authenticated"}},
		"extra": {UserName: "hub:alice", Groups: []string{"hub:a"}, Extra: map[string][]string{
			"example.com/Key with space": {"v1", "v2"}, "authentication.kubernetes.io/credential-id": {"X509SHA256=ab"}, "plain": {"x"}}},
		"every byte": {UserName: "u", Extra: everyByte()},
	} {
		t.Run(name, func(t *testing.T) {
			want, got := &captureHeaders{}, &captureHeaders{}
			req := func() *http.Request {
				r, _ := http.NewRequest(http.MethodGet, "https://target/api", nil)
				r.Header.Set("Accept", "application/json")
				return r
			}
			rt := http.RoundTripper(want)
			if imp != nil {
				rt = transport.NewImpersonatingRoundTripper(*imp, want)
			}
			if _, err := rt.RoundTrip(req()); err != nil {
				t.Fatal(err)
			}
			r := req()
			if _, err := (&Target{transport: got}).PlainRoundTripper(r.Header, imp).RoundTrip(r); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.got, want.got) {
				t.Errorf("headers\n%v\nwant (client-go)\n%v", got.got, want.got)
			}
		})
	}
}

func TestBufferPool(t *testing.T) {
	var p bufferPool
	b := p.Get()
	if len(b) != copyBufferSize {
		t.Fatalf("len = %d, want %d", len(b), copyBufferSize)
	}
	p.Put(b[:10])
	if b := p.Get(); len(b) != copyBufferSize {
		t.Errorf("a returned buffer came back with len %d", len(b))
	}
	p.Put(make([]byte, 10)) // not ours: dropped
}

// everyByte is an extra field per byte value, in a name of its own.
func everyByte() map[string][]string {
	extra := map[string][]string{}
	for c := range 256 {
		extra["k"+string([]byte{byte(c)})+"x"] = []string{"v"}
	}
	return extra
}

// TestEndOnShutdown: a streamed body cut because its request ended (the server shuts down, the
// caller went away) ends as finished; cut for any other reason (the target failed), it stays
// an error.
func TestEndOnShutdown(t *testing.T) {
	cut := errors.New("read on closed body")
	for _, tc := range []struct {
		name  string
		cause error
		want  error
	}{
		{"shutting down", ErrShuttingDown, io.EOF},
		{"caller gone", context.Canceled, io.EOF},
		{"not cancelled", nil, cut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			if tc.cause != nil {
				cancel(tc.cause)
			}
			defer cancel(nil)
			body := endOnShutdown{ReadCloser: io.NopCloser(iotest.ErrReader(cut)), ctx: ctx}
			if _, err := body.Read(make([]byte, 8)); !errors.Is(err, tc.want) {
				t.Errorf("Read: %v, want %v", err, tc.want)
			}
		})
	}
}
