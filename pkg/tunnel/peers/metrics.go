package peers

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Results of a hop (the replica that got the request) and of a relay (the owner).
const (
	ResultOK = "ok"
	// ResultNoSession: the owner answered that it holds no session (any more).
	ResultNoSession = "no_session"
	// ResultUnreachable: the owner did not answer: dead, or not reachable.
	ResultUnreachable = "unreachable"
	// ResultRefused: the owner refused the hop (authentication, authorization, bad request).
	ResultRefused = "refused"
	// ResultError: anything else (the owner's dial failed, an unexpected answer).
	ResultError = "error"
)

// Metrics of the hops between replicas. No label names a mount: hops are few per replica,
// and a mount's own series are the tunnel's and the proxy's.
type Metrics struct {
	hops        *metrics.CounterVec
	hopDuration *metrics.HistogramVec
	relays      *metrics.CounterVec
	hungClosed  *metrics.Counter
}

var (
	defaultMetricsOnce sync.Once
	defaultMetrics     *Metrics
)

// DefaultMetrics returns the metrics in the process-wide legacy registry that the generic
// apiserver serves on /metrics, registered on first use.
func DefaultMetrics() *Metrics {
	defaultMetricsOnce.Do(func() {
		defaultMetrics = NewMetrics()
		legacyregistry.MustRegister(defaultMetrics.hops, defaultMetrics.hopDuration, defaultMetrics.relays, defaultMetrics.hungClosed)
	})
	return defaultMetrics
}

// NewMetrics returns metrics registered nowhere.
func NewMetrics() *Metrics {
	const ns, sub = "mount", "tunnel_peer"
	return &Metrics{
		hops: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "hops_total",
			Help: "Connections to a tunnel session held by another replica, by result (ok, no_session, unreachable, refused, error).", StabilityLevel: metrics.ALPHA},
			[]string{"result"}),
		hopDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "hop_duration_seconds",
			Help: "Time from dialing the owning replica until it relays (or refuses), by result.", StabilityLevel: metrics.ALPHA,
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}},
			[]string{"result"}),
		relays: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "relays_total",
			Help: "Hops of other replicas into a tunnel session held here, by result.", StabilityLevel: metrics.ALPHA},
			[]string{"result"}),
		hungClosed: metrics.NewCounter(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "hops_closed_owner_hung_total",
			Help: "Open hops closed because the replica holding their sessions did not answer its liveness check.", StabilityLevel: metrics.ALPHA}),
	}
}

func (m *Metrics) hop(result string, d time.Duration) {
	if m == nil {
		return
	}
	m.hops.WithLabelValues(result).Inc()
	m.hopDuration.WithLabelValues(result).Observe(d.Seconds())
}

func (m *Metrics) relay(result string) {
	if m == nil {
		return
	}
	m.relays.WithLabelValues(result).Inc()
}

func (m *Metrics) ownerHung(closed int) {
	if m == nil {
		return
	}
	m.hungClosed.Add(float64(closed))
}
