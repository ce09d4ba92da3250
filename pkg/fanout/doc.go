// Package fanout serves one request across many mounts: mounts/*/proxy/<path> lists, watches
// and discovers a resource in every mount the caller may proxy through, live, under the
// caller's identity on every target, without a cache. Members' answers are merged as they
// arrive, bounded per member and per request; each member has a deadline, and a member that
// fails is named in a Warning instead of failing the others. Every object says where it comes
// from: its name is <mount>:<name> and it carries the label mounts.kcp.io/mount. Lists page
// across mounts with a composite continue token, watches resume from a composite
// resourceVersion, discovery is what the selected targets serve in common, and Tables get a
// first column naming the mount.
//
// The package knows nothing of HTTP routing, storage or the proxy: the registry gives it the
// selected Mounts, the proxy a round tripper per member (which carries the caller's identity,
// a renaming mount's rewrites and a tunnel mount's dialer), and the server's authorizer decides
// which mounts the caller may use.
package fanout
