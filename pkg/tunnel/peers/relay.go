package peers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/deadpeer"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// maxKeyLength bounds a session key in a hop: a logical cluster name and a UID.
const maxKeyLength = 512

// maxConcurrentReviews bounds the TokenReviews of hops in flight: a caller flooding the relay
// with made-up tokens gets 429 instead of turning the relay into a load on the host.
const maxConcurrentReviews = 8

// Relay is the owner's end of a hop: it serves RelayPath in front of the server's handler
// chain, authenticates the hop itself by the bearer token of the replicas' host credentials
// (a TokenReview of the host, never through kcp or a front proxy), lets only the replicas'
// own identity in, dials its local session and copies bytes. It never hops on: a replica that
// does not hold the session says 503.
//
// Why not the chain's authentication: the chain also believes requestheader identities (kcp's
// front-proxy and shard certificates, the host's aggregator) and kcp's RBAC in logical
// clusters, and a tenant who names a user like the replicas' ServiceAccount there must not
// pass for a replica: a hop skips the checks of mounts/proxy and the mount's identity rules.
type Relay struct {
	// Local dials sessions held by this replica only.
	Local tunnel.Dialer
	// Authenticator authenticates a hop by its bearer token alone (a cached TokenReview of
	// the host); nil refuses every hop.
	Authenticator authenticator.Request
	Metrics       *Metrics

	// peer is the user name of the replicas' host credentials, learned at start; until then
	// every hop is refused with 503.
	peer      atomic.Pointer[string]
	reviewing atomic.Int32
}

// SetPeerIdentity sets the user name whose hops are accepted: this replica's own, as the host
// authenticates it (a SelfSubjectReview).
func (r *Relay) SetPeerIdentity(name string) {
	r.peer.Store(&name)
}

// Serve returns a handler that serves RelayPath with r and everything else with next. It goes
// in front of the handler chain, so that only the exact path reaches the relay: under a path
// prefix or /clusters/<name>/ it does not exist. ctx ends the relayed connections (the server
// drains).
func (r *Relay) Serve(ctx context.Context, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != RelayPath {
			next.ServeHTTP(w, req)
			return
		}
		relayCtx, cancel := context.WithCancel(req.Context())
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		r.ServeHTTP(w, req.WithContext(relayCtx))
	})
}

func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	result, code, msg := r.serve(w, req)
	if result != "" {
		r.Metrics.relay(result)
	}
	if code != 0 {
		writeStatus(w, code, msg)
	}
}

// serve relays the hop, or returns the result, code and message of its refusal. A relay
// counts itself (result "").
func (r *Relay) serve(w http.ResponseWriter, req *http.Request) (string, int, string) {
	ctx := req.Context()
	peer := r.peer.Load()
	if peer == nil || r.Local == nil || r.Authenticator == nil {
		return ResultNoSession, http.StatusServiceUnavailable, "this replica does not relay tunnel sessions yet"
	}
	if code, msg := r.authenticate(req, *peer); code != 0 {
		return ResultRefused, code, msg
	}
	if req.Method != http.MethodGet || !strings.EqualFold(req.Header.Get("Upgrade"), RelayProtocol) {
		return ResultRefused, http.StatusBadRequest, fmt.Sprintf("%s is a GET with Upgrade: %s", RelayPath, RelayProtocol)
	}
	q := req.URL.Query()
	key, address := q.Get("key"), q.Get("address")
	if key == "" || len(key) > maxKeyLength {
		return ResultRefused, http.StatusBadRequest, "the hop names no session key, or a key too long"
	}
	// Only the two addresses an agent maps: any other would end the agent's whole session.
	if address != tunnel.AddressTarget && address != tunnel.AddressAgent {
		return ResultRefused, http.StatusBadRequest, fmt.Sprintf("the hop may dial %s or %s only", tunnel.AddressTarget, tunnel.AddressAgent)
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return ResultError, http.StatusInternalServerError, "the connection cannot be taken over"
	}
	local, err := r.Local.DialContext(ctx, key, address)
	if err != nil {
		if errors.Is(err, tunnel.ErrNoSession) {
			return ResultNoSession, http.StatusServiceUnavailable, "this replica holds no session of the mount"
		}
		klog.FromContext(ctx).V(2).Info("Relay: dialing the local session failed", "err", err)
		return ResultError, http.StatusBadGateway, "dialing the session failed"
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		_ = local.Close()
		return ResultError, http.StatusInternalServerError, "the connection cannot be taken over"
	}
	// A requesting replica whose node vanished lets go of the session's connection too.
	deadpeer.TuneOrLog(ctx, conn)
	const head = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + RelayProtocol + "\r\n\r\n"
	if _, err := conn.Write([]byte(head)); err != nil {
		_ = conn.Close()
		_ = local.Close()
		return ResultError, 0, ""
	}
	var in io.Reader = conn
	if brw != nil && brw.Reader.Buffered() > 0 {
		in = io.MultiReader(io.LimitReader(brw.Reader, int64(brw.Reader.Buffered())), conn)
	}
	// Counted when relaying starts: a relayed connection may live for hours.
	r.Metrics.relay(ResultOK)
	splice(ctx, conn, in, local)
	return "", 0, ""
}

// authenticate checks that the hop's bearer token is the replicas' own: the code and message
// of a refusal, or 0.
func (r *Relay) authenticate(req *http.Request, peer string) (int, string) {
	if !strings.HasPrefix(req.Header.Get("Authorization"), "Bearer ") {
		return http.StatusUnauthorized, "a hop authenticates with the bearer token of the replicas' host credentials"
	}
	if r.reviewing.Add(1) > maxConcurrentReviews {
		r.reviewing.Add(-1)
		return http.StatusTooManyRequests, "too many hops are being authenticated"
	}
	resp, ok, err := r.Authenticator.AuthenticateRequest(req)
	r.reviewing.Add(-1)
	if err != nil || !ok || resp == nil || resp.User == nil {
		return http.StatusUnauthorized, "the hop's token does not authenticate with the host"
	}
	if resp.User.GetName() != peer {
		// Only the replicas' own identity may hop: a hop skips the checks of mounts/proxy.
		return http.StatusForbidden, "only mount-apiserver replicas may use " + RelayPath
	}
	return 0, ""
}

// splice copies both ways until either side ends or ctx does (the server stops), then
// closes both.
func splice(ctx context.Context, peer net.Conn, fromPeer io.Reader, local net.Conn) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = peer.Close()
			_ = local.Close()
		})
	}
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(local, fromPeer); closeBoth(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(peer, local); closeBoth(); done <- struct{}{} }()
	<-done
	<-done
}

func writeStatus(w http.ResponseWriter, code int, msg string) {
	s := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(code), Message: msg}
	switch code {
	case http.StatusServiceUnavailable:
		s.Reason = metav1.StatusReasonServiceUnavailable
		w.Header().Set("Retry-After", "1")
	case http.StatusForbidden:
		s.Reason = metav1.StatusReasonForbidden
	case http.StatusUnauthorized:
		s.Reason = metav1.StatusReasonUnauthorized
	case http.StatusTooManyRequests:
		s.Reason = metav1.StatusReasonTooManyRequests
		w.Header().Set("Retry-After", "1")
	case http.StatusBadRequest:
		s.Reason = metav1.StatusReasonBadRequest
	default:
		s.Reason = metav1.StatusReasonInternalError
	}
	body, _ := json.Marshal(s)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
