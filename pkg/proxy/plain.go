package proxy

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// copyBufferSize is the size of the buffers a proxied response is copied through: what
// httputil.ReverseProxy allocates per request without a pool.
const copyBufferSize = 32 * 1024

// plainFlushInterval is how often a plain proxied response is flushed to the caller, as
// UpgradeAwareHandler does (watches and logs -f flush as their events arrive anyway).
const plainFlushInterval = 200 * time.Millisecond

// bufferPool lends the copy buffers of plain proxied requests. A fresh 32 KB buffer per
// request was the largest part, by bytes, of what a proxied request allocated (issue #17).
type bufferPool struct {
	pool sync.Pool
}

func (b *bufferPool) Get() []byte {
	if buf, ok := b.pool.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, copyBufferSize)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) == copyBufferSize {
		buf = buf[:copyBufferSize]
		b.pool.Put(&buf)
	}
}

// servePlain proxies a request that is no upgrade: out is the caller's request, already
// cloned and scrubbed, rt carries the mount's credentials and the caller's impersonation.
// It does what UpgradeAwareHandler's plain path did (same Director semantics: the target's
// scheme and host, the joined path, the caller's query, Host of the target, an empty
// User-Agent if the caller sent none, X-Forwarded-For; flushes every 200 ms; failures as
// metav1.Status), without a new reverse proxy, logger and buffer per request. A streaming
// (long-running) response ends as a finished one when the server shuts down.
func (h *requestHandler) servePlain(w http.ResponseWriter, out *http.Request, rt http.RoundTripper, location url.URL, streaming bool) {
	if !strings.HasSuffix(location.Path, "/") && strings.HasSuffix(out.URL.Path, "/") {
		location.Path += "/"
	}
	out.URL = &location
	out.Host = location.Host
	if _, ok := out.Header["User-Agent"]; !ok {
		// Otherwise Go's transport sends its own.
		out.Header.Set("User-Agent", "")
	}
	proxy := httputil.ReverseProxy{
		// The request is ready: the reverse proxy only copies it.
		Director:      func(*http.Request) {},
		Transport:     rt,
		FlushInterval: plainFlushInterval,
		BufferPool:    &h.proxier.buffers,
		ErrorLog:      h.target.errorLog,
		ErrorHandler:  responder{mount: h.mount.Name, target: h.target.Base.Host, innerPath: h.innerPath, failed: &h.hopFailed}.Error,
	}
	// A target's 401 refuses the mount's credentials, never the caller's (credentialsRefused).
	proxy.ModifyResponse = func(res *http.Response) error {
		if res.StatusCode == http.StatusUnauthorized {
			h.refusedCredentials(res)
			return nil
		}
		h.reached.Store(true)
		return nil
	}
	if streaming {
		refused := proxy.ModifyResponse
		proxy.ModifyResponse = func(res *http.Response) error {
			_ = refused(res)
			res.Body = endOnShutdown{ReadCloser: res.Body, ctx: out.Context()}
			return nil
		}
	}
	if h.rewriting != nil {
		before := proxy.ModifyResponse
		proxy.ModifyResponse = func(res *http.Response) error {
			_ = before(res)
			if h.answered {
				return nil // this server's answer, in presented names already
			}
			return h.rewriting.response(res)
		}
	}
	proxy.ServeHTTP(w, out)
}

// ErrShuttingDown is the cause with which a stopping server cancels the long-running requests
// still open once it has drained the others.
var ErrShuttingDown = errors.New("the server is shutting down")

// endOnShutdown ends a streamed body as finished when its request ended: the server shuts down
// (ErrShuttingDown), as kube-apiserver ends its own watches and logs, so that the caller
// (kubectl logs -f, a reflector) sees the stream end, not a failure; or the caller left (a
// watch closed), where nobody reads what follows. Otherwise the reverse proxy aborts the
// response (http.ErrAbortHandler), which HTTP/2 callers get as INTERNAL_ERROR and the server
// logs as an error ("Timeout or abort while handling") for every watch a client closes.
type endOnShutdown struct {
	io.ReadCloser
	ctx context.Context
}

func (b endOnShutdown) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.ctx.Err() != nil {
		err = io.EOF
	}
	return n, err
}

// newErrorLog is the reverse proxy's log of failures it has no one to tell (a response body
// cut short): standard error, as UpgradeAwareHandler's, without the "suppressing panic" noise
// of aborted handlers.
func newErrorLog() *log.Logger {
	return log.New(stderrUnlessPanic{}, "", log.LstdFlags)
}

type stderrUnlessPanic struct{}

func (stderrUnlessPanic) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "suppressing panic") {
		return len(p), nil
	}
	return os.Stderr.Write(p)
}

// refusedCredentials turns a target's 401 into this server's answer: the caller's
// credentials never reach the target, the mount's did (credentialsRefused).
func (h *requestHandler) refusedCredentials(res *http.Response) {
	klog.FromContext(res.Request.Context()).V(2).Info("The target refused the mount's credentials", "mount", h.mount.Name, "target", h.target.Base.Host)
	_ = res.Body.Close()
	*res = *newHopFailure(h.mount.Name, credentialsRefused(h.mount, h.target.Base.Host), h.innerPath).response(res.Request)
	h.answered = true
	h.hopFailed.Store(true)
}
