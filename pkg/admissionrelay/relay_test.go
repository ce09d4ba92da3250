package admissionrelay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay/record"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/rewrite"
)

// clusterTargets records the logical cluster each call of the relay was made in.
type clusterTargets struct {
	rules *rewrite.Rules
	seen  []clusters.Name
}

func (c *clusterTargets) RewriteRules(*mounts.Mount) (*rewrite.Rules, error) { return c.rules, nil }

func (c *clusterTargets) ReadTarget(ctx context.Context, _ *mounts.Mount, _ string, _ int64) (int, []byte, error) {
	c.seen = append(c.seen, clusters.From(ctx))
	return http.StatusNotFound, []byte(`{"kind":"Status"}`), nil
}

func (c *clusterTargets) WebhookClient([]byte, string) (*http.Client, error) {
	return nil, context.Canceled
}

// TestRelayReadsInTheHooksCluster: the relay reads a mount, its Secret and its target in the
// logical cluster its hook names; in the default cluster it would lend the operator's
// credentials to whoever POSTs to a relay URL of a workspace's mount.
func TestRelayReadsInTheHooksCluster(t *testing.T) {
	rules, err := rewrite.Compile(&mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{{Presented: "p.io/", Target: "t.io/"}}})
	if err != nil {
		t.Fatal(err)
	}
	targets := &clusterTargets{rules: rules}
	var mountCluster clusters.Name
	relay := &Relay{
		Targets: targets,
		Mount: func(ctx context.Context, cluster, name string) (*mounts.Mount, error) {
			mountCluster = clusters.From(ctx)
			return &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid"}}, nil
		},
	}
	hook := record.Hook{Cluster: "team-a", Mount: "m", UID: "uid", Kind: record.Validating, Config: "c", Webhook: "w", Token: "t"}
	rec := httptest.NewRecorder()
	relay.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, hook.Path(), strings.NewReader(`{}`)))
	if rec.Code != http.StatusForbidden {
		t.Errorf("relay: %d %s, want 403 (no record on the target)", rec.Code, rec.Body)
	}
	if mountCluster != "team-a" || len(targets.seen) != 1 || targets.seen[0] != "team-a" {
		t.Errorf("the mount was read in %q and its target in %v, want team-a", mountCluster, targets.seen)
	}
}
