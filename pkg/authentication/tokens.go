package authentication

import (
	"context"
	"net/http"
	"net/textproto"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/request/websocket"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcp-dev/mount-apiserver/pkg/logging"
)

// websocketProtocol is the header through which browsers and kubectl's WebSocket clients send
// a bearer token, canonical as net/http keys it.
var websocketProtocol = textproto.CanonicalMIMEHeaderKey("Sec-WebSocket-Protocol")

// TokensWithoutBodies reviews bearer tokens with review (the TokenReview webhook) under a
// logger capped below client-go's body logging, caching answers for ttl, and leaves everything
// else to next, the generic delegating chain (front proxy, client certificates, anonymous).
// That chain reviews tokens itself, but its cache calls the webhook with a context of its own,
// whose logger is the global one: from -v=8 on, every TokenReview with the caller's token was
// written to the log. next never sees the token headers, so its own reviewer is never used.
//
// The order stays the chain's: a request that next authenticates (front proxy or client
// certificate) is theirs, whatever token it carries; else its token decides, and a token that
// does not pass is an error (401), never anonymous.
func TokensWithoutBodies(next authenticator.Request, review authenticator.Token, ttl time.Duration) authenticator.Request {
	capped := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		return review.AuthenticateToken(logging.WithoutBodies(ctx), token)
	})
	cached := tokencache.New(capped, false, ttl, ttl)
	return &tokensWithoutBodies{
		next:   next,
		tokens: group.NewAuthenticatedGroupAdder(union.New(bearertoken.New(cached), websocket.NewProtocolAuthenticator(cached))),
	}
}

// BearerTokens authenticates a request by its bearer token alone, reviewed with review under a
// logger capped below client-go's body logging and cached for ttl: for endpoints that must not
// believe any other authenticator (the tunnel relay, which only the replicas' own token may
// use).
func BearerTokens(review authenticator.Token, ttl time.Duration) authenticator.Request {
	capped := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		return review.AuthenticateToken(logging.WithoutBodies(ctx), token)
	})
	return bearertoken.New(tokencache.New(capped, false, ttl, ttl))
}

type tokensWithoutBodies struct {
	next, tokens authenticator.Request
}

func (a *tokensWithoutBodies) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	authorization, hasAuthorization := req.Header["Authorization"]
	protocol, hasProtocol := req.Header[websocketProtocol]
	if !hasAuthorization && !hasProtocol {
		return a.next.AuthenticateRequest(req)
	}
	// next sees the request without them (and may remove the headers it consumed, as it
	// would), then they are back for the token's turn.
	delete(req.Header, "Authorization")
	delete(req.Header, websocketProtocol)
	resp, ok, err := a.next.AuthenticateRequest(req)
	if hasAuthorization {
		req.Header["Authorization"] = authorization
	}
	if hasProtocol {
		req.Header[websocketProtocol] = protocol
	}
	if ok && resp.User.GetName() != user.Anonymous {
		return resp, true, nil
	}
	tresp, tok, terr := a.tokens.AuthenticateRequest(req)
	switch {
	case tok:
		return tresp, true, nil
	case terr != nil:
		return nil, false, terr
	}
	return resp, ok, err
}
