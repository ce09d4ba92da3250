package tunnel

import (
	"net"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics of tunnels, labelled by mount name only (its logical cluster and name, as the proxy's
// metrics; never a key, address or anything from a credential). The hub and the agent use the
// same set, each in its own registry.
type Metrics struct {
	sessions    *metrics.GaugeVec
	attaches    *metrics.CounterVec
	dials       *metrics.CounterVec
	dialLatency *metrics.HistogramVec
	bytes       *metrics.CounterVec
	violations  *metrics.CounterVec
	dropped     *metrics.CounterVec
	throttled   *metrics.Counter
}

var (
	defaultMetricsOnce sync.Once
	defaultMetrics     *Metrics
)

// DefaultMetrics returns the tunnel metrics in the process-wide legacy registry that the
// generic apiserver serves on /metrics, registered on first use.
func DefaultMetrics() *Metrics {
	defaultMetricsOnce.Do(func() {
		defaultMetrics = NewMetrics()
		legacyregistry.MustRegister(defaultMetrics.collectors()...)
	})
	return defaultMetrics
}

// NewMetrics returns the tunnel metrics, registered nowhere yet; see Register.
func NewMetrics() *Metrics {
	const ns, sub = "mount", "tunnel"
	return &Metrics{
		sessions: metrics.NewGaugeVec(&metrics.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "sessions",
			Help: "Agent sessions held by this process, by mount.", StabilityLevel: metrics.ALPHA}, []string{"mount"}),
		attaches: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "attaches_total",
			Help: "Sessions established (agent connects and reconnects), by mount.", StabilityLevel: metrics.ALPHA}, []string{"mount"}),
		dials: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dials_total",
			Help: "Connections dialed through tunnels, by mount and result (ok, no_session, error, refused).", StabilityLevel: metrics.ALPHA}, []string{"mount", "result"}),
		dialLatency: metrics.NewHistogramVec(&metrics.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "dial_duration_seconds",
			Help: "Latency of dials through tunnels, by mount.", StabilityLevel: metrics.ALPHA,
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5}}, []string{"mount"}),
		bytes: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "bytes_total",
			Help: "Bytes carried through tunnels, by mount and direction (sent, received) as seen by this process.", StabilityLevel: metrics.ALPHA}, []string{"mount", "direction"}),
		violations: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "session_violations_total",
			Help: "Agent sessions the hub closed because the agent broke a bound of the tunnel, by mount and reason (message_type, message_size, connection_buffer, framing).", StabilityLevel: metrics.ALPHA}, []string{"mount", "reason"}),
		dropped: metrics.NewCounterVec(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "connections_dropped_total",
			Help: "Connections through tunnels the hub dropped because their session held as many unread bytes as it may (--tunnel-session-buffer-bytes), by mount.", StabilityLevel: metrics.ALPHA}, []string{"mount"}),
		throttled: metrics.NewCounter(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "attaches_throttled_total",
			Help: "Attach requests the hub turned away (429) because it was attaching as many agents as it may at once (--tunnel-max-attaching).", StabilityLevel: metrics.ALPHA}),
	}
}

// Register registers the metrics in r.
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.MustRegister(m.collectors()...)
}

func (m *Metrics) collectors() []metrics.Registerable {
	return []metrics.Registerable{m.sessions, m.attaches, m.dials, m.dialLatency, m.bytes, m.violations, m.dropped, m.throttled}
}

// SessionStarted records an established session of mount.
func (m *Metrics) SessionStarted(mount string) {
	if m == nil {
		return
	}
	m.attaches.WithLabelValues(mount).Inc()
	m.sessions.WithLabelValues(mount).Inc()
}

// SessionEnded records the end of a session of mount.
func (m *Metrics) SessionEnded(mount string) {
	if m == nil {
		return
	}
	m.sessions.WithLabelValues(mount).Dec()
}

// Dialed records a dial through a tunnel of mount.
func (m *Metrics) Dialed(mount, result string, took time.Duration) {
	if m == nil {
		return
	}
	m.dials.WithLabelValues(mount, result).Inc()
	if result == DialOK {
		m.dialLatency.WithLabelValues(mount).Observe(took.Seconds())
	}
}

// Violated records a session of mount closed for breaking a bound (reason: Violation*).
func (m *Metrics) Violated(mount, reason string) {
	if m == nil {
		return
	}
	m.violations.WithLabelValues(mount, reason).Inc()
}

// Throttled records an attach request turned away by LimitAttaching.
func (m *Metrics) Throttled() {
	if m == nil {
		return
	}
	m.throttled.Inc()
}

// Dropped records a connection of mount dropped for its session's bound.
func (m *Metrics) Dropped(mount string) {
	if m == nil {
		return
	}
	m.dropped.WithLabelValues(mount).Inc()
}

// Forget deletes the series of a deleted mount.
func (m *Metrics) Forget(mount string) {
	if m == nil {
		return
	}
	labels := map[string]string{"mount": mount}
	// An unregistered vector has nothing to delete (and no series).
	if m.attaches.IsCreated() {
		m.attaches.DeletePartialMatch(labels)
		m.dials.DeletePartialMatch(labels)
		m.dialLatency.DeletePartialMatch(labels)
		m.bytes.DeletePartialMatch(labels)
		m.violations.DeletePartialMatch(labels)
		m.dropped.DeletePartialMatch(labels)
	}
	// The gauge stays while a session is up; a session of a deleted mount is closed, which
	// takes it to zero.
}

// Results of a dial, the values of the result label.
const (
	DialOK        = "ok"
	DialNoSession = "no_session"
	DialError     = "error"
	DialRefused   = "refused"
)

// CountBytes wraps conn so that its bytes count for mount. Counting is batched per Read and
// Write call into the counters, which are atomic already.
func (m *Metrics) CountBytes(mount string, conn net.Conn) net.Conn {
	if m == nil {
		return conn
	}
	return &countingConn{Conn: conn, sent: m.bytes.WithLabelValues(mount, "sent"), received: m.bytes.WithLabelValues(mount, "received")}
}

type adder interface{ Add(float64) }

type countingConn struct {
	net.Conn
	sent, received adder
}

// NetConn returns the counted connection (for options set on the TCP connection under it).
func (c *countingConn) NetConn() net.Conn { return c.Conn }

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.received.Add(float64(n))
	}
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.sent.Add(float64(n))
	}
	return n, err
}
