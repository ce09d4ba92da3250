package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
)

// serveHealth serves /healthz (the process runs), /readyz (a session is up) and /metrics
// until stop is called.
func (a *Agent) serveHealth(ctx context.Context) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.Connected() {
			http.Error(w, "no tunnel session", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", metrics.HandlerFor(a.registry, metrics.HandlerOpts{}))
	ln, err := net.Listen("tcp", a.cfg.HealthBindAddress)
	if err != nil {
		return nil, fmt.Errorf("--health-bind-address: %w", err)
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Health server failed")
		}
	}()
	klog.FromContext(ctx).Info("Serving health and metrics", "address", ln.Addr().String())
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}, nil
}
