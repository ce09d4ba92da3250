package status

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
)

// Metrics of the status controller, registered once in the process-wide legacy registry.
type Metrics struct {
	phases   *metrics.GaugeVec
	latency  *metrics.Histogram
	failures *metrics.CounterVec
	writes   *metrics.Counter
}

var (
	metricsOnce    sync.Once
	defaultMetrics *Metrics
)

// DefaultMetrics returns the controller's metrics, registered on first use.
func DefaultMetrics() *Metrics {
	metricsOnce.Do(func() {
		const ns, sub = "mount", "status"
		m := &Metrics{
			phases: metrics.NewGaugeVec(&metrics.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "mounts",
				Help: "Mounts by phase, as this replica last wrote or saw them.", StabilityLevel: metrics.ALPHA}, []string{"phase"}),
			latency: metrics.NewHistogram(&metrics.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "probe_duration_seconds",
				Help: "Latency of successful target probes.", StabilityLevel: metrics.ALPHA,
				Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}),
			failures: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "probe_failures_total",
				Help: "Failed target probes, by reason.", StabilityLevel: metrics.ALPHA}, []string{"reason"}),
			writes: metrics.NewCounter(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "writes_total",
				Help: "Status writes of this replica.", StabilityLevel: metrics.ALPHA}),
		}
		legacyregistry.MustRegister(m.phases, m.latency, m.failures, m.writes)
		defaultMetrics = m
	})
	return defaultMetrics
}

func (m *Metrics) probed(r proxy.ProbeResult, elapsed time.Duration) {
	switch {
	case r.CredentialsErr != nil:
		m.failures.WithLabelValues(credentialsReason(r.CredentialsErr)).Inc()
	case r.ReachErr != nil:
		m.failures.WithLabelValues(ReasonProbeFailed).Inc()
	default:
		m.latency.Observe(elapsed.Seconds())
	}
}

// resolved counts a Workspace or Redirect mount that is not ready, by reason.
func (m *Metrics) resolved(s v1alpha1.MountStatus) {
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
		m.failures.WithLabelValues(c.Reason).Inc()
	}
}
