package kcp

import "k8s.io/apiserver/pkg/authentication/user"

// ForwardedWithoutIdentityUser is the user of a request that a kcp shard forwarded without
// naming its caller (kcp v0.32.3 sends no X-Remote-*). kcp authorized the caller in the
// workspace, so the request may use Mounts, but nobody can be impersonated on its behalf.
const ForwardedWithoutIdentityUser = "system:kcp:forwarded-without-identity"

// AuthorizedByKcpGroup is a group of every request whose authorization kcp did before it
// forwarded it to this server (shard certificate).
const AuthorizedByKcpGroup = "system:kcp:authorized-by-kcp"

// HasNoIdentity reports whether u stands for a caller kcp did not name.
func HasNoIdentity(u user.Info) bool {
	return u != nil && u.GetName() == ForwardedWithoutIdentityUser
}
