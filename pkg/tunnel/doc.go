// Package tunnel carries proxied requests to targets that the server cannot dial: an agent next
// to the target (cmd/mount-agent) opens a reverse tunnel to the server through the connect
// subresource mounts/<name>/attach, and the proxy dials the target through that session. One
// session is bound to one Mount (its logical cluster and UID). The wire protocol is
// github.com/rancher/remotedialer's; this package decides who may hold a session (and for how
// long: the agent's credentials are authenticated and its permission authorized again while the
// session lasts), what an agent is asked to dial, how much an agent can make the server hold
// (every session's WebSocket passes a guard, bounds.go, before remotedialer reads it), and how
// replicas reach a session held by another replica.
package tunnel
