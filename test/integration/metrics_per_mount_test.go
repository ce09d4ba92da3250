package integration

import (
	"testing"
	"time"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestMetricsWithoutMountLabels: with --metrics-per-mount=false the proxy counts requests
// through a mount, to a real kube-apiserver with real kubectl, in series whose mount label is
// empty. (Other in-process servers of this test binary keep the label, so only this one
// writes such series.)
func TestMetricsWithoutMountLabels(t *testing.T) {
	hub := framework.StartInProcess(t, "", func(o *options.Options) { o.MetricsPerMount = false })
	m := startMountedTargetOn(t, hub)
	const series = `mount_proxy_requests_total{code="200",mount="",verb="GET"}`
	before, err := framework.Metric(hub.Config, series)
	if err != nil {
		t.Fatal(err)
	}
	const gets = 3
	for range gets {
		if r := m.run(m.viaMount, time.Minute, "get", "--raw", "/api/v1/namespaces/default"); r.exitCode != 0 {
			t.Fatalf("kubectl get --raw through the mount: %d %s", r.exitCode, r.out)
		}
	}
	after, err := framework.Metric(hub.Config, series)
	if err != nil {
		t.Fatal(err)
	}
	if after-before < gets {
		t.Errorf("%s went from %d to %d after %d GETs through the mount", series, before, after, gets)
	}
	if got, err := framework.MetricSeries(hub.Config, `mount_proxy_upstream_connections_total{mount=""}`); err != nil || len(got) != 1 {
		t.Errorf("the connections to targets without a mount label: %v %v", got, err)
	}
}
