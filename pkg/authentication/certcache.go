package authentication

import (
	"crypto/x509"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/lru"
)

// cacheSize bounds the certificates remembered: one per client TLS connection in use.
const cacheSize = 1024

// CachingCertificates returns an authenticator in front of next, the server's authenticator
// chain, that remembers for ttl (and never past the certificate's NotAfter) what a client
// certificate was verified as:
//
//   - a front proxy's certificate (requestHeader, the host's aggregator): verified against the
//     requestheader CA and allowed names as next would; the identity is still read from the
//     request's headers every time. A change of that CA bundle or of the allowed names is seen
//     at once.
//   - a user's certificate, on requests without other credentials (no Authorization header, no
//     WebSocket token, no requestheader user): the user next authenticated it as. A client CA
//     taken out of the bundle is seen within ttl, as a revoked token is within the token
//     review cache's TTL.
//
// Everything else, and every failure, goes to next each time. A ttl of 0 returns next.
func CachingCertificates(next authenticator.Request, requestHeader *authenticatorfactory.RequestHeaderConfig, ttl time.Duration) authenticator.Request {
	if ttl <= 0 {
		return next
	}
	c := &certCache{next: next, ttl: ttl, now: time.Now, entries: lru.New(cacheSize)}
	if requestHeader != nil {
		c.requestHeader = requestHeader
		c.headers = group.NewAuthenticatedGroupAdder(headerrequest.NewDynamic(
			requestHeader.UsernameHeaders, requestHeader.UIDHeaders, requestHeader.GroupHeaders, requestHeader.ExtraHeaderPrefixes))
	}
	return c
}

type certCache struct {
	next          authenticator.Request
	requestHeader *authenticatorfactory.RequestHeaderConfig // nil: no front proxy
	headers       authenticator.Request                     // the identity a front proxy sends
	ttl           time.Duration
	now           func() time.Time
	entries       *lru.Cache // cacheKey -> cacheEntry
}

// cacheKey names a verification. The certificate pointer identifies the TLS connection's
// certificate: a connection keeps one, and the cache keeps it alive, so no other certificate
// can take its address while it is cached.
type cacheKey struct {
	cert *x509.Certificate
	// For a front proxy: the requestheader CA pool and allowed names it was verified with.
	proxy bool
	roots *x509.CertPool
	names string
}

type cacheEntry struct {
	expires time.Time
	user    *authenticator.Response // a user's certificate only
}

// AuthenticateRequest authenticates from the cache where it can, otherwise through next.
func (c *certCache) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return c.next.AuthenticateRequest(req)
	}
	cert := req.TLS.PeerCertificates[0]
	if c.requestHeader != nil && anyHeader(req.Header, c.requestHeader.UsernameHeaders.Value()) {
		return c.proxied(req, cert)
	}
	if req.Header.Get("Authorization") != "" || req.Header.Get("Sec-WebSocket-Protocol") != "" {
		return c.next.AuthenticateRequest(req)
	}
	key := cacheKey{cert: cert}
	if e, ok := c.lookup(key); ok {
		return clone(e.user), true, nil
	}
	resp, ok, err := c.next.AuthenticateRequest(req)
	if err == nil && ok && resp != nil && resp.User != nil && resp.User.GetName() != user.Anonymous {
		c.store(key, cert, clone(resp))
	}
	return resp, ok, err
}

// proxied authenticates a request that names its user in requestheader headers. Once the
// certificate was verified as a front proxy's, the headers are read without verifying again.
func (c *certCache) proxied(req *http.Request, cert *x509.Certificate) (*authenticator.Response, bool, error) {
	opts, ok := c.requestHeader.CAContentProvider.VerifyOptions()
	if !ok {
		return c.next.AuthenticateRequest(req)
	}
	key := cacheKey{cert: cert, proxy: true, roots: opts.Roots, names: strings.Join(c.requestHeader.AllowedClientNames.Value(), "\n")}
	if _, ok := c.lookup(key); ok {
		if resp, ok, err := c.headers.AuthenticateRequest(req); ok || err != nil {
			return resp, ok, err
		}
		return c.next.AuthenticateRequest(req)
	}
	// The generic apiserver's own verifier decides; it reads the headers only if the
	// certificate is a front proxy's.
	verified := false
	verifier := x509request.NewDynamicCAVerifier(c.requestHeader.CAContentProvider.VerifyOptions,
		authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
			verified = true
			return c.headers.AuthenticateRequest(req)
		}), c.requestHeader.AllowedClientNames)
	resp, ok, err := verifier.AuthenticateRequest(req)
	if !verified || err != nil || !ok {
		// Not a front proxy: the chain decides, as it would have.
		return c.next.AuthenticateRequest(req)
	}
	c.store(key, cert, nil)
	return resp, ok, err
}

func (c *certCache) lookup(key cacheKey) (cacheEntry, bool) {
	v, ok := c.entries.Get(key)
	if !ok {
		return cacheEntry{}, false
	}
	e := v.(cacheEntry)
	if !c.now().Before(e.expires) {
		c.entries.Remove(key)
		return cacheEntry{}, false
	}
	return e, true
}

func (c *certCache) store(key cacheKey, cert *x509.Certificate, resp *authenticator.Response) {
	expires := c.now().Add(c.ttl)
	if cert.NotAfter.Before(expires) {
		expires = cert.NotAfter
	}
	c.entries.Add(key, cacheEntry{expires: expires, user: resp})
}

func anyHeader(h http.Header, names []string) bool {
	for _, name := range names {
		if h.Get(name) != "" {
			return true
		}
	}
	return false
}

// clone copies a response, so that no caller can change the cached one.
func clone(r *authenticator.Response) *authenticator.Response {
	return &authenticator.Response{
		Audiences: slices.Clone(r.Audiences),
		User: &user.DefaultInfo{
			Name:   r.User.GetName(),
			UID:    r.User.GetUID(),
			Groups: slices.Clone(r.User.GetGroups()),
			Extra:  maps.Clone(r.User.GetExtra()),
		},
	}
}
