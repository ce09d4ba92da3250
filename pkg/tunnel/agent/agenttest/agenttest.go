package agenttest

import (
	"context"
	"sync"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
)

// Run starts an agent of cfg and runs it until the test ends; the test's cleanup stops it and
// waits until it has stopped, so no agent outlives its test.
func Run(t testing.TB, cfg *agent.Config) *agent.Agent {
	t.Helper()
	a, _ := Start(t, cfg)
	return a
}

// Start is Run with stop, which stops the agent before the test ends (an agent that goes
// away) and waits until it has stopped; the test's cleanup calls it too.
func Start(t testing.TB, cfg *agent.Config) (a *agent.Agent, stop func()) {
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
	stop = sync.OnceFunc(func() {
		cancel()
		<-done
	})
	t.Cleanup(stop)
	return a, stop
}
