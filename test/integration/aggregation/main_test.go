// Package aggregation tests mount-apiserver registered into a real kube-apiserver through an
// APIService: delegated authentication and authorization, RBAC, the bundle in
// artifacts/apiservice, and kubectl against the host.
package aggregation

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// One kube-apiserver and one registered mount-apiserver serve the whole package: tests use
// their own users and Mount names, so they do not interfere.
var (
	kube *framework.KubeAPIServer
	agg  *framework.Aggregated
	// remote is a second real kube-apiserver: the target of the proxy tests' mounts.
	remote *framework.KubeAPIServer
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mount-apiserver-aggregation-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if _, err := framework.KubeBinDir(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := klog.NewContext(context.Background(), klog.Background())
	// Probe healthy mounts every 2 s so status tests see changes quickly.
	clusters, err := framework.StartClusters(ctx, dir, func(o *options.Options) { o.StatusProbeInterval = 2 * time.Second })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer clusters.Stop()
	kube, agg, remote = clusters.Host, clusters.Agg, clusters.Remote
	fmt.Printf("harness: etcd+kube-apiserver ready in %v, mount-apiserver registered and Available after %v\n",
		clusters.HostReady.Round(time.Millisecond), clusters.AggregatedReady.Round(time.Millisecond))
	return framework.Main(m)
}
