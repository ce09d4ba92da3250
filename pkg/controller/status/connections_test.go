package status_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/controller/status"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// closeCounter is the proxy, counting the idle connections it was told to close.
type closeCounter struct {
	*proxy.Proxier
	closed atomic.Int32
}

func (c *closeCounter) CloseIdleConnections(m *mounts.Mount) {
	c.closed.Add(1)
	c.Proxier.CloseIdleConnections(m)
}

// TestProbesFarApartCloseTheirConnections: when healthy mounts are probed further apart than a
// Kubernetes API server keeps an idle connection (90 s; thousands of mounts at the probes'
// rate), the controller closes a probe's connection right after it, since the target would
// close it before the next probe; when probes come more often, it stays for the next one.
func TestProbesFarApartCloseTheirConnections(t *testing.T) {
	server := framework.StartInProcess(t, "", func(o *options.Options) { o.StatusController = false })
	mountsClient := server.Client.MountsV1alpha1().Mounts()
	secrets := secretMap{}
	secrets.startTarget(t, "target", nil)

	for _, tc := range []struct {
		name      string
		perSecond float64
		wantClose bool
	}{
		{"probed every minute", 0, false},
		// One mount at 0.005 probes a second: every 200 s.
		{"probed every 200 s", 0.005, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if _, err := mountsClient.Create(ctx, mountOf("m", "target", 0), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = mountsClient.Delete(context.Background(), "m", metav1.DeleteOptions{}) }()
			prober := &closeCounter{Proxier: &proxy.Proxier{Secrets: secrets, Transports: proxy.NewTransports(proxy.TransportOptions{}, nil)}}
			runController(ctx, t, server, prober, status.Options{BaseURL: server.URL, Interval: time.Minute, ProbesPerSecond: tc.perSecond})
			waitFor(ctx, t, mountsClient, "m", 20*time.Second, func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady })
			if closed := prober.closed.Load() > 0; closed != tc.wantClose {
				t.Errorf("the probe's connections were closed after it: %v, want %v", closed, tc.wantClose)
			}
		})
	}
}
