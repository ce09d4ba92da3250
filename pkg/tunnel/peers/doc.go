// Package peers lets a replica of a highly available mount-apiserver serve a tunnel mount whose
// agent holds its session on another replica. The replica that holds a session records it in
// the host cluster (a coordination.k8s.io Lease per session, naming the replica and its peer
// URL: Owners); a replica without the session dials the owner over HTTPS, TLS-verified and
// authenticated with its own host credentials, and the owner relays the raw connection into
// its local session (Relay, Hop). Dialer puts these together behind tunnel.Dialer: local
// session first, then the owner. The layer-7 work (identity, impersonation, rewrites,
// transports) stays on the replica that got the request; the hop carries bytes only.
//
// A standalone server has no host and no peers: only sessions held by itself exist.
package peers
