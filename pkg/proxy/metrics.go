package proxy

import (
	"strconv"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics of the proxy, labelled by mount. They live in the process-wide legacy registry that
// the generic apiserver serves on /metrics, so they are created and registered once.
type Metrics struct {
	requests    *metrics.CounterVec
	duration    *metrics.HistogramVec
	bytes       *metrics.CounterVec
	inflight    *metrics.GaugeVec
	connections *metrics.CounterVec
}

var (
	defaultMetricsOnce sync.Once
	defaultMetrics     *Metrics
)

// DefaultMetrics returns the proxy's metrics, registered on first use.
func DefaultMetrics() *Metrics {
	defaultMetricsOnce.Do(func() {
		const ns, sub = "mount", "proxy"
		m := &Metrics{
			requests: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
				Help: "Proxied requests by mount, verb (HTTP method) and response code.", StabilityLevel: metrics.ALPHA}, []string{"mount", "verb", "code"}),
			duration: metrics.NewHistogramVec(&metrics.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "request_duration_seconds",
				Help: "Latency of proxied requests until the response is complete, by mount and verb.", StabilityLevel: metrics.ALPHA,
				Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"mount", "verb"}),
			bytes: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "response_bytes_total",
				Help: "Bytes of proxied response bodies, by mount.", StabilityLevel: metrics.ALPHA}, []string{"mount"}),
			inflight: metrics.NewGaugeVec(&metrics.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "inflight_requests",
				Help: "Proxied requests in flight, by mount.", StabilityLevel: metrics.ALPHA}, []string{"mount"}),
			connections: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "upstream_connections_total",
				Help: "TCP connections opened to targets, by mount.", StabilityLevel: metrics.ALPHA}, []string{"mount"}),
		}
		legacyregistry.MustRegister(m.requests, m.duration, m.bytes, m.inflight, m.connections)
		defaultMetrics = m
	})
	return defaultMetrics
}

func (m *Metrics) connectionOpened(mount string) {
	if m != nil {
		m.connections.WithLabelValues(mount).Inc()
	}
}

// observe records a finished request.
func (m *Metrics) observe(mount, verb string, code int, written int64, elapsed time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(mount, verb, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(mount, verb).Observe(elapsed.Seconds())
	m.bytes.WithLabelValues(mount).Add(float64(written))
}

func (m *Metrics) inflightAdd(mount string, delta float64) {
	if m != nil {
		m.inflight.WithLabelValues(mount).Add(delta)
	}
}
