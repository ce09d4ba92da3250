package kcp

import (
	"net/http"
	"slices"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The headers that name a caller, as kcp's shards (kcp main) and front-proxy send them.
var (
	remoteUserHeaders        = headerrequest.StaticStringSlice{"X-Remote-User"}
	remoteUIDHeaders         = headerrequest.StaticStringSlice{"X-Remote-Uid"}
	remoteGroupHeaders       = headerrequest.StaticStringSlice{"X-Remote-Group"}
	remoteExtraHeaderPrefixe = headerrequest.StaticStringSlice{"X-Remote-Extra-"}
)

// AlwaysPrivilegedGroups are never accepted through X-Remote-Group: this server's and kcp's
// administrators. Whatever forwards a request may pass headers it did not set (kcp main of
// 2026-08 forwarded a mounted workspace's request before authenticating it, client headers
// included), so no header makes an administrator.
var AlwaysPrivilegedGroups = []string{user.SystemPrivilegedGroup, "system:kcp:admin"}

// withoutPrivileged returns groups without the privileged ones (AlwaysPrivilegedGroups and
// extra).
func withoutPrivileged(groups, extra []string) []string {
	return slices.DeleteFunc(groups, func(g string) bool {
		return slices.Contains(AlwaysPrivilegedGroups, g) || slices.Contains(extra, g)
	})
}

// ShardAuthenticator authenticates requests that a kcp shard forwards for the APIExport's
// virtual storage, by the shard's client certificate (verified against verify, common name in
// names unless names is empty). kcp authorized the caller before it forwarded the request:
// every such request is in AuthorizedByKcpGroup. kcp main names the caller in X-Remote-*;
// kcp v0.32.3 names nobody, and the request becomes ForwardedWithoutIdentityUser.
func ShardAuthenticator(verify x509request.VerifyOptionFunc, names headerrequest.StringSliceProvider, privileged []string) authenticator.Request {
	return x509request.NewDynamicCAVerifier(verify, authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		return forwardedCaller(req, privileged)
	}), names)
}

var remoteHeaders = headerrequest.NewDynamic(remoteUserHeaders, remoteUIDHeaders, remoteGroupHeaders, remoteExtraHeaderPrefixe)

func forwardedCaller(req *http.Request, privileged []string) (*authenticator.Response, bool, error) {
	resp, ok, err := remoteHeaders.AuthenticateRequest(req)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		// Nothing of the caller reaches this server; whatever X-Remote-* is left without a
		// user names nobody.
		headerrequest.ClearAuthenticationHeaders(req.Header, remoteUserHeaders, remoteUIDHeaders, remoteGroupHeaders, remoteExtraHeaderPrefixe)
		return &authenticator.Response{User: &user.DefaultInfo{
			Name:   ForwardedWithoutIdentityUser,
			Groups: []string{AuthorizedByKcpGroup, ThroughKcpGroup},
		}}, true, nil
	}
	u := resp.User.(*user.DefaultInfo)
	if u.Name == ForwardedWithoutIdentityUser {
		// A caller named like the stand-in for nobody is nobody.
		u.Groups = nil
	}
	u.Groups = withGroups(withoutPrivileged(u.Groups, privileged), AuthorizedByKcpGroup, ThroughKcpGroup)
	return resp, true, nil
}

// withGroups returns groups with add, each once.
func withGroups(groups []string, add ...string) []string {
	for _, g := range add {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	return groups
}

// FrontProxyAuthenticator authenticates requests that kcp's front-proxy sends to a mounted
// workspace's status.URL: its requestheader client certificate, and X-Remote-* naming the
// caller. The front-proxy did not authorize the caller for this server's resources; these
// requests are authorized like direct ones: X-Remote-Group cannot claim AuthorizedByKcpGroup,
// nor a privileged group (AlwaysPrivilegedGroups and privileged).
func FrontProxyAuthenticator(verify x509request.VerifyOptionFunc, names headerrequest.StringSliceProvider, privileged []string) authenticator.Request {
	named := NotAuthorizedByKcp(headerrequest.NewDynamicVerifyOptionsSecure(verify, names, remoteUserHeaders, remoteUIDHeaders, remoteGroupHeaders, remoteExtraHeaderPrefixe))
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := named.AuthenticateRequest(req)
		if !ok || err != nil {
			return resp, ok, err
		}
		out := *resp
		out.User = &user.DefaultInfo{Name: resp.User.GetName(), UID: resp.User.GetUID(), Extra: resp.User.GetExtra(),
			Groups: withGroups(withoutPrivileged(slices.Clone(resp.User.GetGroups()), privileged), ThroughKcpGroup)}
		return &out, true, nil
	})
}

// NotAuthorizedByKcp keeps every authenticator but the shard's from claiming that kcp
// authorized a request: it drops AuthorizedByKcpGroup from the users it authenticates (a
// client certificate's organization, a token review or X-Remote-Group could carry it).
func NotAuthorizedByKcp(delegate authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := delegate.AuthenticateRequest(req)
		if !ok || err != nil || resp == nil || resp.User == nil {
			return resp, ok, err
		}
		if !slices.Contains(resp.User.GetGroups(), AuthorizedByKcpGroup) {
			return resp, ok, err
		}
		out := *resp
		out.User = &user.DefaultInfo{
			Name:   resp.User.GetName(),
			UID:    resp.User.GetUID(),
			Groups: slices.DeleteFunc(slices.Clone(resp.User.GetGroups()), func(g string) bool { return g == AuthorizedByKcpGroup }),
			Extra:  resp.User.GetExtra(),
		}
		return &out, true, nil
	})
}
