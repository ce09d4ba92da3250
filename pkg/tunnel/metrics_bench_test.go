package tunnel

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"k8s.io/component-base/metrics"
)

// BenchmarkSeriesPerMount: the live heap that an idle tunnel mount's metric series hold
// (a session, one dial, its bytes), labelled by mount and without (--metrics-per-mount), and
// the bytes of /metrics they add (text format, as Prometheus scrapes it).
func BenchmarkSeriesPerMount(b *testing.B) {
	const mounts = 10_000
	for _, perMount := range []bool{true, false} {
		b.Run(fmt.Sprintf("per-mount=%v", perMount), func(b *testing.B) {
			for range b.N {
				reg := metrics.NewKubeRegistry()
				m := NewMetrics()
				m.Register(reg)
				s := &Sessions{metrics: m, MetricsWithoutMounts: !perMount}
				before := liveHeap()
				for i := range mounts {
					mount := Mount{Name: fmt.Sprintf("mount-%05d", i)}
					label := s.label(mount)
					m.SessionStarted(label)
					m.Dialed(label, DialOK, time.Millisecond)
					m.CountBytes(label, nil)
				}
				b.ReportMetric(float64(liveHeap()-before)/mounts, "live-B/mount")
				families, err := reg.Gather()
				if err != nil {
					b.Fatal(err)
				}
				var scrape bytes.Buffer
				enc := expfmt.NewEncoder(&scrape, expfmt.NewFormat(expfmt.TypeTextPlain))
				for _, f := range families {
					if err := enc.Encode(f); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(scrape.Len())/mounts, "scrape-B/mount")
				runtime.KeepAlive(m)
			}
		})
	}
}

func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
