package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// RoundTripper returns a round tripper to m's target that does what mounts/<name>/proxy does
// for each request: the caller of the request's context is impersonated as the mount says, a
// renaming mount's rewrites apply, a tunnel mount dials through its agent, hops are counted,
// metrics recorded. The request's URL path is the path after mounts/<name>/proxy; its query
// and headers (scrubbed as a caller's) are passed on. Failures to reach the target are answers
// with their Status, as a caller of the proxy gets them. The fan-out (pkg/fanout) reaches its
// members through it; m is read, never changed.
func (p *Proxier) RoundTripper(m *mounts.Mount) http.RoundTripper {
	return mountRoundTripper{proxier: p, mount: m}
}

type mountRoundTripper struct {
	proxier *Proxier
	mount   *mounts.Mount
}

var errAborted = errors.New("the mount's answer broke off")

// RoundTrip serves the request with the mount's proxy handler and returns its answer as it
// streams: the handler writes into a pipe, read as the response's body.
func (rt mountRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	h, err := rt.proxier.Handler(ctx, rt.mount, req.URL.Path)
	if err != nil {
		cancel()
		return statusResponse(req, err), nil
	}
	if ctx.Value(http.ServerContextKey) == nil {
		// The reverse proxy aborts (instead of ending as if complete) a response whose
		// target broke off only for requests of a server.
		ctx = context.WithValue(ctx, http.ServerContextKey, &http.Server{})
	}
	in := req.Clone(ctx)
	if in.Body == nil {
		in.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if r := recover(); r != nil {
				if r != http.ErrAbortHandler {
					utilruntime.HandleError(fmt.Errorf("proxying to mount %q for a fan-out panicked: %v", rt.mount.Name, r))
				}
				w.finish(errAborted)
				return
			}
			w.finish(nil)
		}()
		h.ServeHTTP(w, in)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		_ = pr.CloseWithError(ctx.Err())
		cancel()
		return nil, ctx.Err()
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.code, http.StatusText(w.code)),
		StatusCode:    w.code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          pipeBody{PipeReader: pr, cancel: cancel},
		ContentLength: -1,
		Request:       req,
	}, nil
}

// statusResponse answers a request with an API error's Status.
func statusResponse(req *http.Request, err error) *http.Response {
	var s *apierrors.StatusError
	status := apierrors.NewInternalError(err).Status()
	if errors.As(err, &s) {
		status = s.Status()
	} else if a, ok := err.(apierrors.APIStatus); ok {
		status = a.Status()
	}
	status.Kind, status.APIVersion = "Status", "v1"
	data, _ := json.Marshal(status)
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status.Code, http.StatusText(int(status.Code))),
		StatusCode:    int(status.Code),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(data)),
		ContentLength: int64(len(data)),
		Request:       req,
	}
}

// pipeWriter is the response writer of a request served for a round tripper.
type pipeWriter struct {
	header http.Header
	pw     *io.PipeWriter
	ready  chan struct{}

	mu   sync.Mutex
	code int
	sent http.Header
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent != nil || code < 200 {
		return
	}
	w.code, w.sent = code, w.header.Clone()
	close(w.ready)
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush does nothing: every Write reaches the reader at once.
func (w *pipeWriter) Flush() {}

// finish ends the answer: complete, or broken off with err.
func (w *pipeWriter) finish(err error) {
	w.WriteHeader(http.StatusOK)
	if err != nil {
		_ = w.pw.CloseWithError(err)
		return
	}
	_ = w.pw.Close()
}

// pipeBody ends the request when the reader is done with its answer.
type pipeBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b pipeBody) Close() error {
	err := b.PipeReader.Close()
	b.cancel()
	return err
}
