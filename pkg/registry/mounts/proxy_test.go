package mounts

import (
	"context"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// TestConnectFanOut: the name * goes to the fan-out with the path after proxy, in one logical
// cluster only; without a fan-out it is no Mount.
func TestConnectFanOut(t *testing.T) {
	var gotPath string
	r := &ProxyREST{fanOut: func(_ context.Context, _ func(context.Context, labels.Selector) ([]*mounts.Mount, error), inner string) (http.Handler, error) {
		gotPath = inner
		return http.NotFoundHandler(), nil
	}}
	ctx := clusters.WithCluster(context.Background(), "2a2a2a2a")
	if _, err := r.Connect(ctx, FanOutName, &mounts.MountProxyOptions{Path: "labels/env=prod/api/v1/pods"}, nil); err != nil || gotPath != "labels/env=prod/api/v1/pods" {
		t.Errorf("fan-out: %v, path %q", err, gotPath)
	}
	if _, err := r.Connect(clusters.WithCluster(context.Background(), clusters.Wildcard), FanOutName, &mounts.MountProxyOptions{Path: "api/v1/pods"}, nil); !apierrors.IsBadRequest(err) {
		t.Errorf("fan-out across all clusters: %v, want 400", err)
	}
	r.fanOut = nil
	if _, err := r.Connect(ctx, FanOutName, &mounts.MountProxyOptions{Path: "api/v1/pods"}, nil); !apierrors.IsNotFound(err) {
		t.Errorf("without a fan-out: %v, want 404", err)
	}
}
