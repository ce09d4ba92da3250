package kcp

import "k8s.io/apiserver/pkg/authentication/user"

// ForwardedWithoutIdentityUser is the user of a request that a kcp shard forwarded without
// naming its caller (kcp v0.32.3 sends no X-Remote-*). kcp authorized the caller in the
// workspace, so the request may use Mounts, but nobody can be impersonated on its behalf.
const ForwardedWithoutIdentityUser = "system:kcp:forwarded-without-identity"

// AuthorizedByKcpGroup is a group of every request whose authorization kcp did before it
// forwarded it to this server (shard certificate).
const AuthorizedByKcpGroup = "system:kcp:authorized-by-kcp"

// ThroughKcpGroup is a group of every request that came through kcp (the shard's or the
// front-proxy's certificate): its user and groups are kcp's, not this server's, so they never
// count as this server's administrators, and such requests address a logical cluster.
const ThroughKcpGroup = "system:kcp:through-kcp"

// IsServerGroup reports whether g is one of the groups this server gives requests of kcp;
// they mean nothing to a target and are not impersonated.
func IsServerGroup(g string) bool {
	return g == AuthorizedByKcpGroup || g == ThroughKcpGroup
}

// HasNoIdentity reports whether u stands for a caller kcp did not name.
func HasNoIdentity(u user.Info) bool {
	return u != nil && u.GetName() == ForwardedWithoutIdentityUser
}
