package agenttest

import (
	"context"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
)

// Run starts an agent of cfg and runs it until the test ends; the test's cleanup stops it and
// waits until it has stopped, so no agent outlives its test.
func Run(t testing.TB, cfg *agent.Config) *agent.Agent {
	t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return a
}
