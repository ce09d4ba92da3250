package proxy

import (
	"context"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics of the proxy, labelled by mount. A deleted mount's series are deleted with it
// (Forget), and nothing recreates them: requests in flight at the delete, and dials or
// requests that resolved the mount just before it, record nothing more.
//
// One race remains: a mount deleted and created again under the same name, whose new
// incarnation is used on this replica before the delete of the old one reaches it (through
// its informer), loses the counts of those first requests, and its in-flight gauge may be off
// by their number until they end.
type Metrics struct {
	requests    *metrics.CounterVec
	duration    *metrics.HistogramVec
	bytes       *metrics.CounterVec
	inflight    *metrics.GaugeVec
	connections *metrics.CounterVec

	mu sync.Mutex
	// active are the mounts with requests in flight.
	active map[types.UID]*mountRequests
	// gone are deleted mounts, kept for goneTTL so that late starts and dials of theirs record
	// nothing.
	gone map[types.UID]time.Time
}

// mountRequests counts a mount's requests in flight; gone is set when the mount is deleted
// meanwhile. Guarded by Metrics.mu.
type mountRequests struct {
	name     string
	uid      types.UID
	inflight int
	gone     bool
}

const (
	// goneTTL outlasts a dial begun before the delete: connect timeouts are at most 300 s.
	goneTTL = 10 * time.Minute
	// maxGone bounds the tombstones; beyond it the oldest go first. Only a late dial or
	// request of such a mount could recreate a series.
	maxGone = 100_000
)

var (
	defaultMetricsOnce sync.Once
	defaultMetrics     *Metrics
)

// DefaultMetrics returns the proxy's metrics in the process-wide legacy registry that the
// generic apiserver serves on /metrics, registered on first use.
func DefaultMetrics() *Metrics {
	defaultMetricsOnce.Do(func() {
		defaultMetrics = NewMetrics()
		legacyregistry.MustRegister(defaultMetrics.collectors()...)
	})
	return defaultMetrics
}

// NewMetrics returns the proxy's metrics, registered nowhere yet; see Register.
func NewMetrics() *Metrics {
	const ns, sub = "mount", "proxy"
	return &Metrics{
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
			Help: "TCP connections opened to targets, by the mount whose request or probe opened them.", StabilityLevel: metrics.ALPHA}, []string{"mount"}),
		active: map[types.UID]*mountRequests{},
		gone:   map[types.UID]time.Time{},
	}
}

// Register registers the metrics in r.
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.MustRegister(m.collectors()...)
}

func (m *Metrics) collectors() []metrics.Registerable {
	return []metrics.Registerable{m.requests, m.duration, m.bytes, m.inflight, m.connections}
}

// Forget deletes the series of a deleted mount. Its requests still in flight record nothing
// when they end. Calling it again for the same mount does no harm.
func (m *Metrics) Forget(name string, uid types.UID) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if len(m.gone) >= maxGone {
		m.pruneGone(now)
	}
	m.gone[uid] = now
	if a, ok := m.active[uid]; ok {
		a.gone = true
		delete(m.active, uid)
	}
	mount := map[string]string{"mount": name}
	if m.requests.IsCreated() {
		m.requests.DeletePartialMatch(mount)
	}
	if m.duration.IsCreated() {
		m.duration.DeletePartialMatch(mount)
	}
	m.bytes.Delete(mount)
	m.inflight.Delete(mount)
	m.connections.Delete(mount)
}

// pruneGone drops tombstones older than goneTTL, or else the oldest. m.mu is held.
func (m *Metrics) pruneGone(now time.Time) {
	var oldest types.UID
	var oldestAt time.Time
	for uid, at := range m.gone {
		if now.Sub(at) > goneTTL {
			delete(m.gone, uid)
			continue
		}
		if oldest == "" || at.Before(oldestAt) {
			oldest, oldestAt = uid, at
		}
	}
	if len(m.gone) >= maxGone {
		delete(m.gone, oldest)
	}
}

// isGone says whether uid was deleted recently. m.mu is held.
func (m *Metrics) isGone(uid types.UID) bool {
	at, ok := m.gone[uid]
	if ok && time.Since(at) > goneTTL {
		delete(m.gone, uid)
		return false
	}
	return ok
}

// start records the start of a proxied request of a mount; the result goes to finish. nil
// (a deleted mount) records nothing.
func (m *Metrics) start(name string, uid types.UID) *mountRequests {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.isGone(uid) {
		return nil
	}
	a := m.active[uid]
	if a == nil {
		a = &mountRequests{name: name, uid: uid}
		m.active[uid] = a
	}
	a.inflight++
	m.inflight.WithLabelValues(name).Inc()
	return a
}

// finish records the end of a request begun with start, unless its mount was deleted since.
func (m *Metrics) finish(a *mountRequests, verb string, code int, written int64, elapsed time.Duration) {
	if m == nil || a == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a.gone {
		return
	}
	m.requests.WithLabelValues(a.name, verb, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(a.name, verb).Observe(elapsed.Seconds())
	m.bytes.WithLabelValues(a.name).Add(float64(written))
	m.inflight.WithLabelValues(a.name).Dec()
	if a.inflight--; a.inflight == 0 {
		delete(m.active, a.uid)
	}
}

// connectionOpened counts a connection dialed for the mount in ctx (see withMount).
func (m *Metrics) connectionOpened(ctx context.Context) {
	ref, ok := ctx.Value(mountKey{}).(mountRef)
	if m == nil || !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.isGone(ref.uid) {
		return
	}
	m.connections.WithLabelValues(ref.name).Inc()
}

type mountKey struct{}

// mountRef names the mount a request or probe is for, in its context: Targets are shared by
// the mounts of one key, so their dials learn the mount from the context.
type mountRef struct {
	name string
	uid  types.UID
}

func withMount(ctx context.Context, name string, uid types.UID) context.Context {
	return context.WithValue(ctx, mountKey{}, mountRef{name: name, uid: uid})
}
