package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Credentials are what an attach request authenticated with: its headers and TLS state, as
// they arrived. An agent's session outlives its request by hours, so the Attacher
// authenticates these again while the session lasts: a token deleted or expired, a client
// certificate expired or of a CA taken out of the bundle, ends the session.
type Credentials struct {
	header http.Header
	tls    *tls.ConnectionState
	remote string
	url    *url.URL
}

type credentialsKey struct{}

// KeepAttachCredentials keeps the credentials of attach requests (WebSocket upgrades of a
// path ending in /attach) in their context. It must run before the authentication filter,
// which takes the Authorization header (and requestheader headers) off the request.
func KeepAttachCredentials(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if httpstream.IsUpgradeRequest(req) && strings.HasSuffix(strings.TrimRight(req.URL.Path, "/"), "/attach") {
			c := &Credentials{header: req.Header.Clone(), tls: req.TLS, remote: req.RemoteAddr, url: req.URL}
			req = req.WithContext(context.WithValue(req.Context(), credentialsKey{}, c))
		}
		next.ServeHTTP(w, req)
	})
}

func credentialsFrom(ctx context.Context) (*Credentials, bool) {
	c, ok := ctx.Value(credentialsKey{}).(*Credentials)
	return c, ok && c != nil
}

// errCredentials says that an agent's credentials no longer authenticate it.
var errCredentials = errors.New("the agent's credentials no longer authenticate it")

// reauthenticate authenticates c again and returns who it is now: agent's name and UID, or an
// error wrapping errCredentials.
func (a *Attacher) reauthenticate(ctx context.Context, c *Credentials, agent user.Info) (user.Info, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCredentials, err)
	}
	req.Header, req.TLS, req.RemoteAddr = c.header.Clone(), c.tls, c.remote
	resp, ok, err := a.Authenticator.AuthenticateRequest(req)
	switch {
	case err != nil && hostUnavailable(err):
		return nil, &unsureError{fmt.Errorf("%w: %v", errCredentials, err)}
	case err != nil:
		// An error is also what authenticators answer for a token they refuse ("invalid
		// bearer token", the host's reason for a TokenReview that did not authenticate).
		return nil, fmt.Errorf("%w: %v", errCredentials, err)
	case !ok || resp == nil || resp.User == nil:
		return nil, errCredentials
	case resp.User.GetName() != agent.GetName() || resp.User.GetUID() != agent.GetUID():
		return nil, fmt.Errorf("%w: they authenticate %q now", errCredentials, resp.User.GetName())
	}
	return resp.User, nil
}

// hostUnavailable says whether err, or one error of an aggregate (what a union of
// authenticators answers), is a review that got no answer: a timeout, a connection that
// failed, the host overloaded or failing. Anything else is an answer that refuses.
func hostUnavailable(err error) bool {
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) {
		for _, e := range agg.Errors() {
			if hostUnavailable(e) {
				return true
			}
		}
		return false
	}
	var netErr net.Error // *url.Error, what a client's failed request returns, is one
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &netErr) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}
