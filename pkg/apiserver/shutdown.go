package apiserver

import (
	"context"
	"net/http"

	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
)

// endLongRunningOnDrain wraps a handler chain builder so that long-running requests end once
// the server, shutting down, has drained its other requests and its watches. The generic
// server ends its own watches, but not long-running requests it does not know, above all the
// proxied ones (watches, logs -f): each of them held http.Server.Shutdown for its whole
// timeout (--request-timeout, 60 s) and the process with it. The cause tells the proxy that
// the stream ends because the server stops, so it ends the response as finished.
func endLongRunningOnDrain(build func(http.Handler, *genericapiserver.Config) http.Handler) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		drained, longRunning := c.DrainedNotify(), c.LongRunningFunc
		// One context of the server's that ends when it has drained; each long-running request
		// hangs a callback on it instead of a goroutine of its own (an idle agent session is a
		// long-running request: 10,000 of them held 10,000 goroutines here).
		drainCtx, drain := context.WithCancel(context.Background())
		go func() {
			<-drained
			drain()
		}()
		// Innermost, so that the request info is known.
		return build(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			info, ok := genericapirequest.RequestInfoFrom(r.Context())
			if !ok || longRunning == nil || !longRunning(r, info) {
				apiHandler.ServeHTTP(w, r)
				return
			}
			ctx, cancel := context.WithCancelCause(r.Context())
			defer cancel(nil)
			stop := context.AfterFunc(drainCtx, func() { cancel(proxy.ErrShuttingDown) })
			defer stop()
			apiHandler.ServeHTTP(w, r.WithContext(ctx))
		}), c)
	}
}
