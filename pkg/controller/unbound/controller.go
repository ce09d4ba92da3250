package unbound

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
)

// ControllerName names the collector in logs.
const ControllerName = "mount-unbound-gc"

// MountSource lists and deletes Mounts of all logical clusters.
type MountSource interface {
	ListMounts(ctx context.Context) ([]Mount, error)
	// DeleteMount deletes the Mount if it still has m's UID.
	DeleteMount(ctx context.Context, m Mount) error
}

// Controller deletes the Mounts of logical clusters that no longer bind the APIExport.
type Controller struct {
	bindings kcp.BindingSource
	mounts   MountSource
	interval time.Duration
	metrics  *Metrics

	// state is only touched by collect, which runs one round at a time.
	state state
}

// New returns a collector that compares bindings and mounts every interval.
func New(bindings kcp.BindingSource, mounts MountSource, interval time.Duration) *Controller {
	return &Controller{bindings: bindings, mounts: mounts, interval: interval, metrics: DefaultMetrics()}
}

// Run collects every interval until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx).WithName(ControllerName)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting the collector of Mounts of unbound logical clusters", "interval", c.interval)
	wait.JitterUntilWithContext(ctx, c.collect, c.interval, 0.1, false)
	logger.Info("Stopped the collector of Mounts of unbound logical clusters")
}

// collect is one round: list the bound clusters, then the Mounts, and delete what decide
// says. A failed or empty listing deletes nothing and starts the count of consecutive
// listings anew.
func (c *Controller) collect(ctx context.Context) {
	logger := klog.FromContext(ctx)
	listed := time.Now()
	bound, err := c.bindings.BoundClusters(ctx)
	if err != nil {
		c.metrics.listingFailures.Inc()
		c.state = nil
		logger.Error(err, "Listing the APIExport's bindings failed; deleting nothing this round")
		return
	}
	if len(bound) == 0 {
		// Every consumer leaving at once is far less likely than a listing that is wrong
		// (another export's URL, a stand-in); the last consumers' Mounts stay until a binding
		// exists again.
		c.state = nil
		logger.Info("The APIExport has no bindings at all; deleting nothing")
		return
	}
	mounts, err := c.mounts.ListMounts(ctx)
	if err != nil {
		c.metrics.listingFailures.Inc()
		c.state = nil
		logger.Error(err, "Listing Mounts failed; deleting nothing this round")
		return
	}
	remove, next := decide(c.state, bound, mounts, listed)
	c.state = next
	for cluster, since := range next {
		logger.V(2).Info("Logical cluster holds Mounts and does not bind the APIExport", "cluster", cluster, "since", since)
	}
	for _, m := range remove {
		err := c.mounts.DeleteMount(ctx, m)
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Deleted meanwhile, or a new Mount of the name (another UID): not ours to delete.
		case err != nil:
			logger.Error(err, "Deleting a Mount of an unbound logical cluster failed", "cluster", m.Cluster, "mount", m.Name, "uid", m.UID)
		default:
			c.metrics.deletions.Inc()
			logger.Info("Deleted a Mount of a logical cluster that no longer binds the APIExport", "cluster", m.Cluster, "mount", m.Name, "uid", m.UID, "unboundSince", c.state[m.Cluster])
		}
	}
}

// Metrics of the collector.
type Metrics struct {
	deletions       *metrics.Counter
	listingFailures *metrics.Counter
}

var (
	metricsOnce    sync.Once
	defaultMetrics *Metrics
)

// DefaultMetrics returns the collector's metrics in the legacy registry, registered on first use.
func DefaultMetrics() *Metrics {
	metricsOnce.Do(func() {
		const ns, sub = "mount", "unbound_gc"
		defaultMetrics = &Metrics{
			deletions: metrics.NewCounter(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "deletions_total",
				Help: "Mounts deleted because their logical cluster no longer binds the APIExport.", StabilityLevel: metrics.ALPHA}),
			listingFailures: metrics.NewCounter(&metrics.CounterOpts{Namespace: ns, Subsystem: sub, Name: "listing_failures_total",
				Help: "Rounds that deleted nothing because listing bindings or Mounts failed.", StabilityLevel: metrics.ALPHA}),
		}
		legacyregistry.MustRegister(defaultMetrics.deletions, defaultMetrics.listingFailures)
	})
	return defaultMetrics
}

// LoopbackMounts lists and deletes Mounts through this server's loopback client: metadata
// only, across all logical clusters.
type LoopbackMounts struct {
	wildcard metadata.Interface
	client   rest.Interface
}

var _ MountSource = &LoopbackMounts{}

// NewLoopbackMounts returns a MountSource over the loopback configuration (its user must be
// let into all logical clusters).
func NewLoopbackMounts(loopback *rest.Config) (*LoopbackMounts, error) {
	wildcardConfig := rest.CopyConfig(loopback)
	wildcardConfig.Host = trimSlash(wildcardConfig.Host) + "/clusters/" + string(clusters.Wildcard)
	wildcard, err := metadata.NewForConfig(wildcardConfig)
	if err != nil {
		return nil, fmt.Errorf("creating the metadata client of all logical clusters: %w", err)
	}
	client, err := clientset.NewForConfig(loopback)
	if err != nil {
		return nil, fmt.Errorf("creating the loopback client: %w", err)
	}
	return &LoopbackMounts{wildcard: wildcard, client: client.MountsV1alpha1().RESTClient()}, nil
}

func trimSlash(s string) string {
	for len(s) > 0 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}

// ListMounts lists the metadata of all Mounts from the watch cache.
func (l *LoopbackMounts) ListMounts(ctx context.Context) ([]Mount, error) {
	list, err := l.wildcard.Resource(v1alpha1.SchemeGroupVersion.WithResource("mounts")).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("listing mounts of all logical clusters: %w", err)
	}
	mounts := make([]Mount, 0, len(list.Items))
	for i := range list.Items {
		m := &list.Items[i]
		mounts = append(mounts, Mount{Cluster: kcp.ClusterOf(m), Name: m.Name, UID: m.UID, Created: m.CreationTimestamp.Time})
	}
	return mounts, nil
}

// DeleteMount deletes the Mount in its cluster, on condition of its UID.
func (l *LoopbackMounts) DeleteMount(ctx context.Context, m Mount) error {
	if m.Cluster == clusters.DefaultCluster || m.Cluster == clusters.Wildcard {
		return fmt.Errorf("mount %q is in no logical cluster", m.Name)
	}
	uid := m.UID
	return l.client.Delete().
		AbsPath("/clusters", string(m.Cluster), "apis", v1alpha1.SchemeGroupVersion.Group, v1alpha1.SchemeGroupVersion.Version, "mounts", m.Name).
		Body(&metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}).
		Do(ctx).
		Error()
}
