package tunnel

import (
	"context"
	"net/http"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
)

// DefaultMaxAttaching is how many attach requests a replica works on at once by default.
const DefaultMaxAttaching = 64

// attachRetryAfterSeconds is the Retry-After of an attach turned away.
const attachRetryAfterSeconds = 1

type admittedKey struct{}

// LimitAttaching works on at most max attach requests (WebSocket upgrades of a path ending in
// /attach) at once, from their arrival until their session is served (Attacher calls the
// release) or they are refused; past it, it answers 429 with Retry-After before any
// authentication. Attach requests are long-running, so the server's in-flight limits do not
// count them: without this, a reconnect storm has thousands authenticated and authorized at
// once, the host's answers queue behind the server's client rate limits past the agents'
// handshake timeout, the agents give up and try again, and few or none get through. It goes
// outside the whole handler chain; turned-away attempts count in throttled (may be nil).
func LimitAttaching(max int, throttled *Metrics, next http.Handler) http.Handler {
	slots := make(chan struct{}, max)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !httpstream.IsUpgradeRequest(req) || !isAgentAttach(req.URL.Path) {
			next.ServeHTTP(w, req)
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			throttled.Throttled()
			w.Header().Set("Retry-After", "1")
			WriteStatus(w, &metav1.Status{Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
				Message: "this replica is attaching as many agents as it may at once; try again later",
				Details: &metav1.StatusDetails{RetryAfterSeconds: attachRetryAfterSeconds}})
			return
		}
		release := sync.OnceFunc(func() { <-slots })
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
