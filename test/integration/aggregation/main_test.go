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

	start := time.Now()
	if kube, err = framework.StartKubeAPIServer(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer kube.Stop()
	kubeReady := time.Since(start)
	// Probe healthy mounts every 2 s so status tests see changes quickly.
	if agg, err = framework.StartAggregated(ctx, kube, dir, func(o *options.Options) { o.StatusProbeInterval = 2 * time.Second }); err != nil {
		fmt.Fprintf(os.Stderr, "%v\nkube-apiserver log:\n%s\n", err, tail(kube.Log(), 60))
		return 1
	}
	defer func() {
		if err := agg.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	fmt.Printf("harness: etcd+kube-apiserver ready in %v, mount-apiserver registered and Available after %v\n",
		kubeReady.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	remoteDir, err := os.MkdirTemp(dir, "remote-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if remote, err = framework.StartKubeAPIServer(ctx, remoteDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer remote.Stop()
	return m.Run()
}

func tail(s string, lines int) string {
	n := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			n++
			if n > lines {
				return s[i+1:]
			}
		}
	}
	return s
}
