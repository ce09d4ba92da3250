package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
	"github.com/kcp-dev/mount-apiserver/test/soak/soak"
)

// TestSoak10s is the soak command (go run ./test/soak) for 10 s: 500 proxied watches and 200
// proxied GETs per second through the host aggregator against a real remote, with the goal
// of issue #16: no errors, and afterwards goroutines and fds within 5 % of the baseline, RSS
// within 20 %.
func TestSoak10s(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var report strings.Builder
	r, err := soak.Run(ctx, soak.Config{Duration: 10 * time.Second, Watches: 500, RPS: 200,
		Binary: string(framework.BuildBinary(t)), Dir: t.TempDir(), Out: &report})
	t.Log("\n" + report.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Goal(); err != nil {
		t.Error(err)
	}
}
