// Package agenttest runs real agents (pkg/tunnel/agent, the code of cmd/mount-agent) in
// tests, each until its test ends: the one way tests of the hub, the proxy and the tunnel
// start an agent beside them, instead of each writing its own goroutine and cleanup.
package agenttest
