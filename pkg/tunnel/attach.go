package tunnel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// DefaultAuthorizationInterval is how often an attached agent's credentials and permission
// are checked again.
const DefaultAuthorizationInterval = time.Minute

// DefaultAuthorizationQPS is how many sessions are checked again per second at most, over
// all sessions of a replica: each check costs the host up to three requests (a TokenReview,
// a ServiceAccount GET, a SubjectAccessReview), so at most 60 per second however many agents
// are attached. With DefaultAuthorizationInterval, 1,200 sessions are checked every minute;
// 10,000 every 8 minutes 20 seconds.
const DefaultAuthorizationQPS = 20

// DefaultUndecidedFor is how long the checks of a session may fail to decide (the host does
// not answer in time) before the session ends, unless the interval is longer. While the host
// cannot answer, no new caller's request goes through the session: each needs the host's
// review of its caller (cached for seconds). Ending sessions after one minute of
// an overloaded host closed 470 of 1,000 while 9,000 more agents attached at once, and their
// reconnects loaded the host more.
const DefaultUndecidedFor = 5 * time.Minute

// RecheckLimiter spaces the checks of all sessions (flowcontrol.RateLimiter is one).
type RecheckLimiter interface {
	// Wait blocks until a check may run, or ctx ends (an error).
	Wait(ctx context.Context) error
}

// Attacher serves mounts/<name>/attach: it admits an agent to serve a mount's tunnel.
type Attacher struct {
	Sessions *Sessions
	// Authorizer checks "create" on mounts/attach for the mount's name, on attach and every
	// Interval while the session lasts. nil allows everything (tests without authorization).
	Authorizer authorizer.Authorizer
	// Authenticator, if set, authenticates the agent's credentials (kept by
	// KeepAttachCredentials) again every Interval while the session lasts; the fresh identity
	// is the one authorized. It is the server's own authenticator: a token review's cache
	// delays what it sees by the cache's TTL.
	Authenticator authenticator.Request
	// ServiceAccounts, if set, is the host's: an agent that is a ServiceAccount of the host
	// keeps its session only while that ServiceAccount exists with the UID it authenticated
	// with. An agent that attached through the host's aggregator is known here only by the
	// aggregator's word (its token never reaches this server, so Authenticator sees the same
	// front proxy each time): this is what ends its session when its ServiceAccount is
	// deleted. A token's own expiry or deletion stays unseen on that path.
	ServiceAccounts corev1client.ServiceAccountsGetter
	// Interval is how often the agent's credentials and permission are checked again; 0
	// means DefaultAuthorizationInterval.
	Interval time.Duration
	// UndecidedFor is how long checks may fail to decide before the session ends; 0 means
	// DefaultUndecidedFor or the interval, whichever is longer.
	UndecidedFor time.Duration
	// Limiter, if set, is waited on before each check of any session: what the checks cost
	// the host is bounded by its rate, not by the number of sessions, which are checked less
	// often than Interval once there are more than the rate times Interval.
	Limiter RecheckLimiter

	rechecksOnce sync.Once
	rechecks     *rechecks
}

// Handler returns the handler of one attach request of m, read from storage by the caller
// (a quorum read: a mount deleted or replaced a moment ago must not be attached to). Errors
// are API errors the caller writes as they are.
func (a *Attacher) Handler(ctx context.Context, m *mounts.Mount) (http.Handler, error) {
	agent, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewUnauthorized("no user in the request")
	}
	if m.Spec.Tunnel == nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("mount %q has no spec.tunnel: its target is reached directly, not through an agent", m.Name))
	}
	if err := a.authorizeAttach(ctx, agent, m); err != nil {
		return nil, err
	}
	if err := a.checkServiceAccount(ctx, agent); err != nil {
		return nil, apierrors.NewForbidden(mounts.Resource("mounts/attach"), m.Name, err)
	}
	creds, ok := credentialsFrom(ctx)
	if a.Authenticator != nil && !ok {
		// Fail closed: a session that could not be authenticated again would outlive a
		// revoked credential.
		return nil, apierrors.NewInternalError(errors.New("the server kept no credentials of the attach request (KeepAttachCredentials is not in its handler chain)"))
	}
	mount := Mount{Cluster: clusters.From(ctx), Name: m.Name, UID: m.UID}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !httpstream.IsUpgradeRequest(req) {
			status := apierrors.NewBadRequest(fmt.Sprintf("mounts/%s/attach serves agents (cmd/mount-agent) and needs a WebSocket upgrade", m.Name)).Status()
			WriteStatus(w, &status)
			return
		}
		a.Sessions.ServeAgent(w, req, mount, agent.GetName(), func(ctx context.Context, end context.CancelFunc) {
			a.recheck(ctx, end, agent, creds, mount)
		})
	}), nil
}

// recheck schedules the checks that end the session (cancel) once the agent's credentials no
// longer authenticate it, or it may no longer attach to the mount. A check that could not
// decide (the host did not answer in time) is tried again a quarter interval later; once
// checks have failed for UndecidedFor, the session ends: an agent keeps a session only while
// it is known to be allowed, and reconnects (with a fresh check) when it is again. Ending
// sessions on the first timeout turned a loaded host into a reconnect storm that loaded it
// more (2,000 agents on the 2-core machine: 528 sessions closed on timeouts of TokenReviews
// and SubjectAccessReviews within two minutes).
func (a *Attacher) recheck(ctx context.Context, cancel context.CancelFunc, agent user.Info, creds *Credentials, mount Mount) {
	interval := a.Interval
	if interval <= 0 {
		interval = DefaultAuthorizationInterval
	}
	undecidedFor := a.UndecidedFor
	if undecidedFor <= 0 {
		undecidedFor = max(interval, DefaultUndecidedFor)
	}
	var failingSince time.Time
	check := func() (time.Duration, bool) {
		now := agent
		var err error
		if a.Authenticator != nil {
			now, err = a.reauthenticate(ctx, creds, agent)
		}
		if err == nil {
			err = a.checkServiceAccount(ctx, now)
		}
		if err == nil {
			err = a.authorizeOrUnsure(ctx, now, mount.Name)
		}
		if err == nil {
			// The next check is an interval after this one ended: a limiter that held it
			// back stretches the period instead of queueing checks.
			failingSince = time.Time{}
			return interval, true
		}
		if ctx.Err() != nil {
			return 0, false
		}
		var u *unsureError
		if errors.As(err, &u) {
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if time.Since(failingSince) < undecidedFor {
				klog.FromContext(ctx).V(2).Info("A check of an agent session could not decide; trying again", "mount", mount.Label(), "err", err.Error())
				return interval / 4, true
			}
		}
		klog.FromContext(ctx).Info("Closing an agent session: the agent may no longer attach", "mount", mount.Label(), "agent", agent.GetName(), "reason", err.Error())
		cancel()
		return 0, false
	}
	a.rechecksOnce.Do(func() { a.rechecks = newRechecks(a.Limiter) })
	// The first check comes after a random part of the interval: the sessions of a reconnect
	// storm, attached within seconds, are not checked all in the same seconds ever after.
	a.rechecks.add(ctx, interval/2+rand.N(interval/2+1), check)
}

// checkServiceAccount checks that agent, if a ServiceAccount of the host, still exists as the
// one it authenticated as.
func (a *Attacher) checkServiceAccount(ctx context.Context, agent user.Info) error {
	if a.ServiceAccounts == nil {
		return nil
	}
	namespace, name, err := serviceaccount.SplitUsername(agent.GetName())
	if err != nil {
		return nil // not a ServiceAccount
	}
	sa, err := a.ServiceAccounts.ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("the agent's ServiceAccount %s/%s no longer exists", namespace, name)
	case err != nil:
		return &unsureError{fmt.Errorf("checking the agent's ServiceAccount %s/%s: %w", namespace, name, err)}
	case agent.GetUID() != "" && string(sa.UID) != agent.GetUID():
		return fmt.Errorf("the agent's ServiceAccount %s/%s was deleted and created again", namespace, name)
	}
	return nil
}

// unsureError is a check that could not decide: the host did not answer, or answered an
// error. recheck tries it again before it ends a session.
type unsureError struct{ err error }

func (e *unsureError) Error() string { return e.err.Error() }
func (e *unsureError) Unwrap() error { return e.err }

// authorizeOrUnsure is authorize with an authorizer's error (no decision) as an unsureError.
func (a *Attacher) authorizeOrUnsure(ctx context.Context, agent user.Info, name string) error {
	unsure, err := a.authorizeDecision(ctx, agent, name)
	if unsure {
		return &unsureError{err}
	}
	return err
}

// authorizeAttach decides an attach to m, as read from storage a moment ago. A mount that
// names its agent decides alone, by that read (the server's authorizer reads a cache, which
// may lag a change of the name). Otherwise, whatever verb the request chain checked (an
// upgrade is a GET), attaching lends the mount's traffic to the agent: it needs "create" on
// mounts/attach for this very name.
func (a *Attacher) authorizeAttach(ctx context.Context, agent user.Info, m *mounts.Mount) error {
	if named := m.Spec.Tunnel.AgentUser; named != "" {
		if agent.GetName() != named {
			return apierrors.NewForbidden(mounts.Resource("mounts/attach"), m.Name,
				errors.New("the mount names another user as its agent (spec.tunnel.agentUser); no other may attach"))
		}
		return nil
	}
	_, err := a.authorizeDecision(ctx, agent, m.Name)
	return err
}

// authorizeDecision answers nil if agent may attach to the mount name, else a Forbidden
// error, unsure if the authorizer answered an error instead of a decision.
func (a *Attacher) authorizeDecision(ctx context.Context, agent user.Info, name string) (unsure bool, err error) {
	if a.Authorizer == nil {
		return false, nil
	}
	attrs := authorizer.AttributesRecord{
		User:            agent,
		Verb:            "create",
		APIGroup:        mounts.GroupName,
		APIVersion:      "v1alpha1",
		Resource:        "mounts",
		Subresource:     "attach",
		Name:            name,
		ResourceRequest: true,
	}
	decision, reason, err := a.Authorizer.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return false, nil
	}
	if err != nil {
		reason = err.Error()
	}
	return err != nil, apierrors.NewForbidden(mounts.Resource("mounts/attach"), name,
		fmt.Errorf("an agent needs verb \"create\" on mounts/attach for this mount: %s", reason))
}
