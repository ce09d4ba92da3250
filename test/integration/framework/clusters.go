package framework

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
)

// Clusters is the usual setup of the tests and benchmarks: a host kube-apiserver with
// mount-apiserver aggregated into it, and a remote kube-apiserver for mounts to point at.
type Clusters struct {
	Host   *KubeAPIServer
	Agg    *Aggregated
	Remote *KubeAPIServer
	// HostReady and AggregatedReady are how long the host and then the registered,
	// Available mount-apiserver took from the start.
	HostReady, AggregatedReady time.Duration
}

// StartClusters starts the three in dir; modify may adjust mount-apiserver's options. On
// error, what was started is stopped again.
func StartClusters(ctx context.Context, dir string, modify func(*options.Options)) (*Clusters, error) {
	return startClusters(ctx, dir, func(host *KubeAPIServer) (*Aggregated, error) { return StartAggregated(ctx, host, dir, modify) })
}

// StartClustersProcess is StartClusters with mount-apiserver as its own process, the binary
// bin with args added to its flags (StartAggregatedProcess).
func StartClustersProcess(ctx context.Context, dir, bin string, args ...string) (*Clusters, error) {
	return startClusters(ctx, dir, func(host *KubeAPIServer) (*Aggregated, error) {
		return StartAggregatedProcess(ctx, host, dir, bin, args...)
	})
}

func startClusters(ctx context.Context, dir string, startAggregated func(host *KubeAPIServer) (*Aggregated, error)) (_ *Clusters, err error) {
	c := &Clusters{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	start := time.Now()
	if c.Host, err = StartKubeAPIServer(ctx, dir); err != nil {
		return nil, err
	}
	c.HostReady = time.Since(start)
	if c.Agg, err = startAggregated(c.Host); err != nil {
		return nil, fmt.Errorf("%w\nkube-apiserver log (tail):\n%s", err, tail(c.Host.Log(), 60))
	}
	c.AggregatedReady = time.Since(start)
	remoteDir, err := os.MkdirTemp(dir, "remote-")
	if err != nil {
		return nil, err
	}
	if c.Remote, err = StartKubeAPIServer(ctx, remoteDir); err != nil {
		return nil, err
	}
	return c, nil
}

// Stop stops whatever runs, remote first.
func (c *Clusters) Stop() {
	if c.Remote != nil {
		c.Remote.Stop()
	}
	if c.Agg != nil {
		if err := c.Agg.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	if c.Host != nil {
		c.Host.Stop()
	}
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
