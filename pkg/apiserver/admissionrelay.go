package apiserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
	mountsregistry "github.com/kcp-dev/mount-apiserver/pkg/registry/mounts"
)

// AdmissionRelayConfig serves the admission relay of renaming mounts on a listener of its own.
type AdmissionRelayConfig struct {
	Listener net.Listener
	// Cert is the serving certificate (the secure port's).
	Cert dynamiccertificates.CertKeyContentProvider
}

func (c *AdmissionRelayConfig) close() {
	if c != nil && c.Listener != nil {
		_ = c.Listener.Close()
	}
}

// startAdmissionRelay serves the relay until the server stops.
func startAdmissionRelay(cfg *AdmissionRelayConfig, storage *mountsregistry.Storage, proxier *proxy.Proxier) genericapiserver.PostStartHookFunc {
	return func(hookCtx genericapiserver.PostStartHookContext) error {
		relay := &admissionrelay.Relay{
			Targets: proxier,
			Mount: func(ctx context.Context, cluster, name string) (*mounts.Mount, error) {
				obj, err := storage.Mount.Get(clusters.WithCluster(ctx, clusters.Name(cluster)), name, &metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				m, ok := obj.(*mounts.Mount)
				if !ok {
					return nil, fmt.Errorf("unexpected object %T", obj)
				}
				return m, nil
			},
		}
		certs := &relayCertificate{provider: cfg.Cert}
		srv := &http.Server{
			Handler:           relay,
			TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get},
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return hookCtx },
		}
		logger := klog.FromContext(hookCtx)
		go func() {
			logger.Info("Serving the admission relay", "address", cfg.Listener.Addr().String())
			if err := srv.ServeTLS(cfg.Listener, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "The admission relay stopped")
			}
		}()
		go func() {
			<-hookCtx.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		}()
		return nil
	}
}

// relayCertificate serves the current serving certificate, parsed once per content.
type relayCertificate struct {
	provider dynamiccertificates.CertKeyContentProvider

	mu        sync.Mutex
	cert, key []byte
	parsed    *tls.Certificate
}

func (r *relayCertificate) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, key := r.provider.CurrentCertKeyContent()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parsed != nil && bytes.Equal(cert, r.cert) && bytes.Equal(key, r.key) {
		return r.parsed, nil
	}
	parsed, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("the serving certificate does not load: %w", err)
	}
	r.cert, r.key, r.parsed = cert, key, &parsed
	return r.parsed, nil
}
