package status_test

import (
	"context"
	"net/http"
	"strings"
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

// TestObservedProbesAgain: what requests through a mount find moves its status at once when
// it contradicts the phase, with a probe begun after the finding (a probe result of before,
// cached for a minute here, does not count), and within seconds where the probe interval and
// the backoff would have taken a minute. A finding that agrees with the phase costs no probe.
func TestObservedProbesAgain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	server := framework.StartInProcess(t, "", func(o *options.Options) { o.StatusController = false })
	mountsClient := server.Client.MountsV1alpha1().Mounts()

	secrets := secretMap{}
	target := secrets.startTarget(t, "target", nil)
	addr := target.Listener.Addr().String()
	if _, err := mountsClient.Create(ctx, mountOf("m", "target", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	proxier := &proxy.Proxier{Secrets: secrets, Transports: proxy.NewTransports(proxy.TransportOptions{}, nil),
		Probes: &proxy.ProbeCache{TTL: time.Minute}}
	ctrl := runController(ctx, t, server, proxier, status.Options{BaseURL: server.URL, Interval: time.Minute})
	waitFor(ctx, t, mountsClient, "m", 20*time.Second, func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady })
	internal := &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: mounts.MountSpec{Type: mounts.MountTypeURL}}

	probes := func() int {
		n := 0
		for _, r := range target.Requests() {
			if r.URL.Path == "/readyz" {
				n++
			}
		}
		return n
	}
	before := probes()
	ctrl.Observed(ctx, internal, true)
	time.Sleep(2 * time.Second)
	if n := probes() - before; n != 0 {
		t.Errorf("a finding that agrees with the phase cost %d probes", n)
	}

	// The target goes away; a request finds so.
	target.Close()
	start := time.Now()
	ctrl.Observed(ctx, internal, false)
	waitFor(ctx, t, mountsClient, "m", 10*time.Second, func(m *v1alpha1.Mount) bool { return m.Status.Phase != v1alpha1.MountPhaseReady })
	t.Logf("not Ready %v after a request found the target gone", time.Since(start).Round(time.Millisecond))

	// It comes back; a request finds so. Without the finding, the failing mount would wait
	// for its backoff and the cached failure.
	back, err := framework.StartRecordingServer(addr, target.CA)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	back.Handler = func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }
	time.Sleep(3 * time.Second) // past the first steps of the backoff
	start = time.Now()
	ctrl.Observed(ctx, internal, true)
	m := waitFor(ctx, t, mountsClient, "m", 10*time.Second, func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady })
	t.Logf("Ready %v after a request found the target back", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(m.Status.Conditions[0].Message+m.Status.Conditions[1].Message+m.Status.Conditions[2].Message, "answered 200") {
		t.Errorf("conditions: %+v", m.Status.Conditions)
	}
}
