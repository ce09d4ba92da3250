package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// DefaultAuthorizationInterval is how often an attached agent's credentials and permission
// are checked again.
const DefaultAuthorizationInterval = time.Minute

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
	// Interval is how often the agent's credentials and permission are checked again; 0
	// means DefaultAuthorizationInterval.
	Interval time.Duration
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
	// Whatever verb the request chain checked (an upgrade is a GET), attaching lends the mount's
	// traffic to the agent: it needs "create" on mounts/attach for this very name.
	if err := a.authorize(ctx, agent, m.Name); err != nil {
		return nil, err
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
		ctx, cancel := context.WithCancel(req.Context())
		defer cancel()
		go a.recheck(ctx, cancel, agent, creds, mount)
		a.Sessions.Serve(ctx, w, req, mount)
	}), nil
}

// recheck ends the session (cancel) once the agent's credentials no longer authenticate it,
// or it may no longer attach to the mount. A failing authenticator or authorizer counts as a
// refusal: an agent keeps a session only while it is known to be allowed, and reconnects
// (with a fresh check) when it is again.
func (a *Attacher) recheck(ctx context.Context, cancel context.CancelFunc, agent user.Info, creds *Credentials, mount Mount) {
	interval := a.Interval
	if interval <= 0 {
		interval = DefaultAuthorizationInterval
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		now := agent
		var err error
		if a.Authenticator != nil {
			now, err = a.reauthenticate(ctx, creds, agent)
		}
		if err == nil {
			err = a.authorize(ctx, now, mount.Name)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			klog.FromContext(ctx).Info("Closing an agent session: the agent may no longer attach", "mount", mount.Label(), "agent", agent.GetName(), "reason", err.Error())
			cancel()
			return
		}
	}
}

func (a *Attacher) authorize(ctx context.Context, agent user.Info, name string) error {
	if a.Authorizer == nil {
		return nil
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
		return nil
	}
	if err != nil {
		reason = err.Error()
	}
	return apierrors.NewForbidden(mounts.Resource("mounts/attach"), name,
		fmt.Errorf("an agent needs verb \"create\" on mounts/attach for this mount: %s", reason))
}
