package tunnel

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
)

// DefaultMaxAttaching is how many attach requests a replica works on at once by default.
const DefaultMaxAttaching = 64

// MaxAttachRetryAfter bounds the wait LimitAttaching asks of an agent it turns away, and the
// wait an agent accepts from a hub.
const MaxAttachRetryAfter = 5 * time.Minute

// defaultAttachHold is how long an attach is taken to hold its slot before any has finished:
// what attaches held in reconnect storms on two cores (64 slots, 80-126 attaches a second, so
// 0.5-0.8 s each). The agents turned away before the first attach finished get return times
// from it; at 2 s, the 936 turned away at the start of a storm of 1,000 were spread over 29 s
// while the cores were 40 % idle, where 1,000 attach in 10-13 s. Coming back too early costs
// an agent one more turn-away, too late the cores' idle time.
const defaultAttachHold = 500 * time.Millisecond

type admittedKey struct{}

// returnTimes hands the attaches LimitAttaching turns away the times to come back at: one per
// slot expected to free up, spaced by how long an attach holds its slot (a moving average)
// over the number of slots. Agents told only "1 s" retried on their own backoff: in a
// reconnect storm of 10,000 agents, 123,000 attempts, each a TLS handshake, half the replica's
// CPU. Told when, each comes back about once, when there is room.
type returnTimes struct {
	mu    sync.Mutex
	slots int
	hold  time.Duration
	next  time.Time
}

// held records how long an admitted attach held its slot.
func (r *returnTimes) held(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold = (9*r.hold + d) / 10
}

// take returns how long the attach turned away at now should wait: at least a second, at most
// MaxAttachRetryAfter; times are not handed out further ahead than that, the agents beyond
// are spread over its second half.
func (r *returnTimes) take(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next.Before(now) {
		r.next = now
	}
	wait := r.next.Sub(now)
	if wait >= MaxAttachRetryAfter {
		// Not all at the bound, or they would all come back in the same second.
		return MaxAttachRetryAfter/2 + rand.N(MaxAttachRetryAfter/2)
	}
	r.next = r.next.Add(r.hold / time.Duration(r.slots))
	return max(wait, time.Second)
}

// LimitAttaching works on at most max attach requests (WebSocket upgrades of a path ending in
// /attach) at once, from their arrival until their session is served (Attacher calls the
// release) or they are refused; past it, it answers 429 before any authentication, with a
// Retry-After that spreads the turned-away agents over the time the replica needs for them
// (returnTimes). Attach requests are long-running, so the server's in-flight limits do not
// count them: without this, a reconnect storm has thousands authenticated and authorized at
// once, the host's answers queue behind the server's client rate limits past the agents'
// handshake timeout, the agents give up and try again, and few or none get through. It goes
// outside the whole handler chain; turned-away attempts count in throttled (may be nil).
func LimitAttaching(max int, throttled *Metrics, next http.Handler) http.Handler {
	slots := make(chan struct{}, max)
	returns := &returnTimes{slots: max, hold: defaultAttachHold}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !httpstream.IsUpgradeRequest(req) || !isAgentAttach(req.URL.Path) {
			next.ServeHTTP(w, req)
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			throttled.Throttled()
			seconds := int32(math.Ceil(returns.take(time.Now()).Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(int(seconds)))
			WriteStatus(w, &metav1.Status{Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
				Message: fmt.Sprintf("this replica is attaching as many agents as it may at once; come back in %d s", seconds),
				Details: &metav1.StatusDetails{RetryAfterSeconds: seconds}})
			return
		}
		admitted := time.Now()
		release := sync.OnceFunc(func() {
			returns.held(time.Since(admitted))
			<-slots
		})
		defer release()
		next.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), admittedKey{}, release)))
	})
}

// isAgentAttach says whether path is an agent's mounts/<name>/attach, not a pod's attach
// through a mount's proxy (.../mounts/<name>/proxy/.../pods/<pod>/attach).
func isAgentAttach(path string) bool {
	parts := strings.Split(strings.TrimRight(path, "/"), "/")
	n := len(parts)
	return n >= 3 && parts[n-1] == "attach" && parts[n-3] == "mounts" && !strings.Contains(path, "/proxy/")
}

// releaseAttachSlot gives back the slot of LimitAttaching that an attach request held, if
// any: its session is up.
func releaseAttachSlot(ctx context.Context) {
	if release, ok := ctx.Value(admittedKey{}).(func()); ok {
		release()
	}
}
