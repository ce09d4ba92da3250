package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics"
)

// seriesOf counts the series in reg that carry the label mount=name.
func seriesOf(t *testing.T, reg metrics.KubeRegistry, name string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "mount_proxy_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "mount" && l.GetValue() == name {
					n++
				}
			}
		}
	}
	return n
}

// TestMetricsForget: a deleted mount's series go, and neither its requests in flight at the
// delete nor late dials or requests bring them back; another mount's series stay, and a new
// mount of the same name records afresh.
func TestMetricsForget(t *testing.T) {
	reg := metrics.NewKubeRegistry()
	m := NewMetrics()
	m.Register(reg)
	ctx := context.Background()

	done := m.start("a", "uid-a")
	m.connectionOpened(withMount(ctx, "a", "uid-a"))
	m.finish(done, "GET", 200, 100, 10*time.Millisecond)
	m.finish(m.start("a", "uid-a"), "POST", 201, 5, time.Millisecond)
	inFlight := m.start("a", "uid-a")
	m.finish(m.start("b", "uid-b"), "GET", 200, 1, time.Millisecond)
	before := seriesOf(t, reg, "a")
	if before == 0 || seriesOf(t, reg, "b") == 0 {
		t.Fatalf("series before the delete: a %d, b %d", before, seriesOf(t, reg, "b"))
	}

	m.Forget("a", "uid-a")
	if n := seriesOf(t, reg, "a"); n != 0 {
		t.Errorf("%d series of the deleted mount left (of %d)", n, before)
	}
	// The request in flight at the delete ends; a late request and a late dial come.
	m.finish(inFlight, "GET", 200, 100, time.Second)
	m.finish(m.start("a", "uid-a"), "GET", 200, 1, time.Millisecond)
	m.connectionOpened(withMount(ctx, "a", "uid-a"))
	m.Forget("a", "uid-a")
	if n := seriesOf(t, reg, "a"); n != 0 {
		t.Errorf("%d series of the deleted mount came back", n)
	}
	if seriesOf(t, reg, "b") == 0 {
		t.Error("another mount's series went too")
	}
	if len(m.active) != 0 {
		t.Errorf("%d mounts still counted active", len(m.active))
	}

	// A new mount of the same name (another UID) records from zero.
	again := m.start("a", "uid-a2")
	if got := gaugeValue(t, reg, "mount_proxy_inflight_requests", "a"); got != 1 {
		t.Errorf("in-flight gauge of the new mount: %v, want 1", got)
	}
	m.finish(again, "GET", 200, 1, time.Millisecond)
	if got := gaugeValue(t, reg, "mount_proxy_inflight_requests", "a"); got != 0 {
		t.Errorf("in-flight gauge of the new mount: %v, want 0", got)
	}
}

func gaugeValue(t *testing.T, reg metrics.KubeRegistry, family, mount string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "mount" && l.GetValue() == mount {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{mount=%q}", family, mount)
	return 0
}
