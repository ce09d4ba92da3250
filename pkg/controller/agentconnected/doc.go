// Package agentconnected keeps the AgentConnected condition of tunnel mounts: the replica that
// holds a mount's agent session says so (which replica, since when), and says so no more when
// the session ends. It writes only on attach and detach, never per ping; a Lease renewal of a
// session looks at the status controller's cached copy and writes only if that contradicts it.
package agentconnected
