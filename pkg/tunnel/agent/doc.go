// Package agent is mount-agent, which runs next to a cluster that mount-apiserver cannot
// reach: it opens the reverse tunnel of one Mount (mounts/<name>/attach on the hub) and dials,
// on the hub's behalf, only its one target (tunnel.AddressTarget) or its own in-process proxy
// that adds the agent's credentials (tunnel.AddressAgent).
package agent
