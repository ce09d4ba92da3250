package status

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned/scheme"
	mountinformers "github.com/kcp-dev/mount-apiserver/pkg/generated/informers/externalversions/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"

	// Registers the workqueue metrics (depth, latency, retries) in the legacy registry.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// ControllerName names the queue, the field manager of status writes, and the event source.
const ControllerName = "mount-status"

const secretIndex = "secret"

// Prober probes a mount's target with a probe begun at or after since. When the probe takes
// longer than wait, it returns pending, closed when the probe has finished; probing the mount
// again then returns that result.
type Prober interface {
	ProbeSince(ctx context.Context, m *mounts.Mount, wait time.Duration, since time.Time) (r proxy.ProbeResult, pending <-chan struct{})
	// CloseIdleConnections closes the idle connections to m's target; they are dialed again
	// when needed.
	CloseIdleConnections(m *mounts.Mount)
}

// targetIdleTimeout is how long a Kubernetes API server keeps an idle connection open (its
// HTTP/2 IdleTimeout, 90 s). When probes of healthy mounts come further apart than this
// (thousands of mounts at --status-probes-qps), a probe's connection is closed by the target
// before the next probe could reuse it; the controller closes it right after the probe
// instead of holding it for nothing: through a tunnel that is memory and a goroutine of the
// replica per mount (about 30 KiB; a third of 10,000 tunnel mounts held one). Connections of
// a Target that other mounts share stay (proxy.Proxier.CloseIdleConnections).
const targetIdleTimeout = 90 * time.Second

// refreshInterval bounds how often a mount is probed at once because the proxy or its agent
// saw a change: a target whose requests alternate between answers and failures costs a
// probe (and at most a status write) per second, no more.
const refreshInterval = time.Second

// Options tune the controller.
type Options struct {
	// BaseURL is the externally reachable URL of this server (or of the host that aggregates
	// it); status.URL is the mount's proxy path below it.
	BaseURL string
	// Interval is how often a mount is probed again; each mount gets 20% jitter.
	Interval time.Duration
	// ProbesPerSecond, if positive, bounds the probes of healthy mounts together: past
	// Interval x ProbesPerSecond mounts, each is probed every mounts/ProbesPerSecond.
	ProbesPerSecond float64
	// Workers bounds concurrent reconciles.
	Workers int
	// ProbeWait is how long a worker waits for a probe; a probe still running then goes on
	// without it, and the mount is reconciled again when it has finished. Hung targets thus
	// hold no worker for longer than this.
	ProbeWait time.Duration
	// Workspaces resolves the workspaces of Workspace and Redirect mounts (kcp mode); without
	// it those types are unsupported.
	Workspaces kcp.WorkspaceResolver
}

// DefaultProbeWait is the ProbeWait of controllers that set none: probes of a healthy target
// take milliseconds, a cold TLS handshake to a distant one a few hundred.
const DefaultProbeWait = 250 * time.Millisecond

// outcome is how one reconcile ended.
type outcome int

const (
	healthy    outcome = iota // status written (or unchanged), target Ready: ordinary interval
	failing                   // status written (or unchanged), not Ready: per-mount backoff
	pending                   // probe still running: no status yet; enqueued when it finishes
	unresolved                // a Workspace or Redirect mount not Ready: looked up again soon
)

// A workspace lookup is one cheap read of kcp, and what fixes it (RBAC granted, the workspace
// created or ready) comes with no event this server sees: a mount not Ready looks again after
// 0.5 s doubling to 5 s, not the targets' 2 min, and all such mounts together read kcp at
// most resolveQPS times a second (beyond resolveQPS*5 failing mounts, each waits longer).
const (
	resolveBaseDelay = 500 * time.Millisecond
	resolveMaxDelay  = 5 * time.Second
	resolveQPS       = 50
)

func newResolveBackoff() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](resolveBaseDelay, resolveMaxDelay),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(resolveQPS, 2*resolveQPS)},
	)
}

// Controller keeps the status of every Mount.
type Controller struct {
	client  clientset.Interface
	indexer cache.Indexer
	synced  cache.InformerSynced
	// queue is the work queue of the current (or next) run; each run after the first, a
	// new leadership term, gets a new one, since the last run shut its queue down.
	queue    atomic.Pointer[workQueue]
	runs     atomic.Int32
	prober   Prober
	recorder events.EventRecorder
	opts     Options
	metrics  *Metrics
	// mounts counts the mounts of the cache (Options.ProbesPerSecond).
	mounts atomic.Int64

	// resolveBackoff spaces the lookups of Workspace and Redirect mounts that are not Ready.
	resolveBackoff workqueue.TypedRateLimiter[string]

	// mu guards phases, since and refreshed, keyed like the queue (Key).
	mu     sync.Mutex
	phases map[string]v1alpha1.MountPhase
	// since is when something was last seen to change for a mount (Refresh): its next probe
	// must begin after it. refreshed is when a refresh last queued it.
	since, refreshed map[string]time.Time
}

// New returns a controller over informer; recorder may be nil (standalone mode: no events).
// informer is the client's Mount informer, or in kcp mode one of all logical clusters
// (NewAllClustersInformer). client reaches this server without a cluster prefix; status of
// a logical cluster's mount is written below /clusters/<cluster>.
func New(client clientset.Interface, informer mountinformers.MountInformer, prober Prober, recorder events.EventRecorder, opts Options) (*Controller, error) {
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if opts.ProbeWait <= 0 {
		opts.ProbeWait = DefaultProbeWait
	}
	c := &Controller{
		client:    client,
		indexer:   informer.Informer().GetIndexer(),
		synced:    informer.Informer().HasSynced,
		prober:    prober,
		recorder:  recorder,
		opts:      opts,
		metrics:   DefaultMetrics(),
		phases:    map[string]v1alpha1.MountPhase{},
		since:     map[string]time.Time{},
		refreshed: map[string]time.Time{},

		resolveBackoff: newResolveBackoff(),
	}
	c.queue.Store(newWorkQueue())
	if err := informer.Informer().AddIndexers(cache.Indexers{secretIndex: func(obj any) ([]string, error) {
		m, ok := obj.(*v1alpha1.Mount)
		if !ok || m.Spec.Type != v1alpha1.MountTypeURL {
			return nil, nil
		}
		return []string{m.Spec.Ref.Namespace + "/" + m.Spec.Ref.Name}, nil
	}}); err != nil {
		return nil, fmt.Errorf("adding secret index: %w", err)
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.mounts.Add(1)
			c.enqueue(obj)
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*v1alpha1.Mount), newObj.(*v1alpha1.Mount)
			// Our own status writes change neither; a spec change or a status reset does.
			// So does an agent attaching or leaving (pkg/controller/agentconnected): the phase
			// follows it at once, with a probe begun after it, not at the next probe nor with
			// the result of one from before (which said that no agent was there).
			switch {
			case agentChanged(o, n):
				c.refresh(Key(n))
			case o.Generation != n.Generation || n.Status.ObservedGeneration != n.Generation || n.Status.Phase == "":
				c.enqueue(n)
			}
		},
		DeleteFunc: func(obj any) {
			c.mounts.Add(-1)
			if m := DeletedMount(obj); m != nil {
				c.setPhase(Key(m), "")
				c.forget(Key(m))
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("adding event handler: %w", err)
	}
	return c, nil
}

// workQueue is the controller's queue of mount keys (Key).
type workQueue struct {
	workqueue.TypedRateLimitingInterface[string]
}

func newWorkQueue() *workQueue {
	return &workQueue{workqueue.NewTypedRateLimitingQueueWithConfig(
		// Per-mount backoff for failing targets: 1 s doubling to 2 min.
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 2*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "mount_status"})}
}

// DeletedMount returns the Mount of an informer's delete notification, also when the informer
// missed the delete and only knows the last state it saw; nil for anything else.
func DeletedMount(obj any) *v1alpha1.Mount {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	m, _ := obj.(*v1alpha1.Mount)
	return m
}

func (c *Controller) enqueue(obj any) {
	if m, ok := obj.(*v1alpha1.Mount); ok {
		c.queue.Load().Add(Key(m))
	}
}

// Observed is the proxy's Observer: requests through m began to reach its target (reached) or
// stopped reaching it. When the mount's phase says otherwise, the mount is probed again at
// once, with a probe begun now, and its status follows; the probe, not the request, decides.
func (c *Controller) Observed(ctx context.Context, m *mounts.Mount, reached bool) {
	key := m.Name
	if cluster := clusters.From(ctx); cluster != clusters.DefaultCluster && cluster != "" {
		key = string(cluster) + "/" + m.Name
	}
	c.mu.Lock()
	phase, known := c.phases[key]
	c.mu.Unlock()
	if !known || (phase == v1alpha1.MountPhaseReady) == reached {
		return
	}
	c.refresh(key)
}

// refresh probes the mount of key again now, with a probe begun after this call, at most
// once per refreshInterval.
func (c *Controller) refresh(key string) {
	now := time.Now()
	c.mu.Lock()
	c.since[key] = now
	wait := refreshInterval - now.Sub(c.refreshed[key])
	if wait <= 0 {
		c.refreshed[key] = now
	}
	c.mu.Unlock()
	if wait > 0 {
		c.queue.Load().AddAfter(key, wait)
		return
	}
	c.queue.Load().Add(key)
}

// sinceOf is the time the mount of key was last seen to change (refresh).
func (c *Controller) sinceOf(key string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.since[key]
}

func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.since, key)
	delete(c.refreshed, key)
}

// SecretChanged re-probes at once every mount that references the Secret, in every logical
// cluster: a change notification without a cluster costs extra probes, never a missed one.
func (c *Controller) SecretChanged(namespace, name string) {
	objs, err := c.indexer.ByIndex(secretIndex, namespace+"/"+name)
	if err != nil {
		return
	}
	for _, obj := range objs {
		c.enqueue(obj)
	}
}

// Run works the queue until ctx ends. It may run again afterwards (leader election: a
// replica that lost the lease and wins it back), then with every mount queued anew.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	queue := c.queue.Load()
	again := c.runs.Add(1) > 1
	if again {
		queue = newWorkQueue()
		c.queue.Store(queue)
	}
	defer queue.ShutDown()
	// The caller names the logger (pkg/apiserver: mount-status).
	logger := klog.FromContext(ctx)
	logger.Info("Starting status controller", "workers", c.opts.Workers, "interval", c.opts.Interval)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return
	}
	if again {
		// The informer does not replay what it delivered to the last run's queue.
		for _, key := range c.indexer.ListKeys() {
			queue.Add(key)
		}
	}
	var wg sync.WaitGroup
	for range c.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx, queue) {
			}
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
	logger.Info("Stopped status controller")
}

// probeInterval is how often each of mounts healthy mounts is probed: interval, or longer
// when they would be probed more than perSecond times a second together. Probes of 10,000
// tunnel mounts every 30 s went through 10,000 agents to their targets 333 times a second.
func probeInterval(interval time.Duration, mounts int64, perSecond float64) time.Duration {
	if perSecond <= 0 {
		return interval
	}
	return max(interval, time.Duration(float64(mounts)/perSecond*float64(time.Second)))
}

func (c *Controller) processNext(ctx context.Context, queue *workQueue) bool {
	name, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(name)
	result, probed, err := c.reconcile(ctx, queue, name)
	switch {
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Reconciling mount failed; retrying", "key", name, "err", err.Error())
		queue.AddRateLimited(name)
	case result == healthy:
		queue.Forget(name)
		c.resolveBackoff.Forget(name)
		queue.AddAfter(name, wait.Jitter(probeInterval(c.opts.Interval, c.mounts.Load(), c.opts.ProbesPerSecond), 0.2))
	case result == pending:
		// The worker moves on; the mount comes back when its probe is done, at the latest after
		// the probe timeout.
		go func() {
			select {
			case <-probed:
				queue.Add(name)
			case <-ctx.Done():
			}
		}()
	case result == unresolved:
		queue.AddAfter(name, c.resolveBackoff.When(name))
	default:
		// Failing targets are probed again with per-mount backoff.
		queue.AddRateLimited(name)
	}
	return true
}

// reconcile probes one mount and writes its status if it changed. It reports whether the
// target is healthy (ordinary interval), failing (backoff), or its probe still runs (then
// probed is closed when it is done).
func (c *Controller) reconcile(ctx context.Context, queue *workQueue, key string) (result outcome, probed <-chan struct{}, err error) {
	obj, exists, err := c.indexer.GetByKey(key)
	if err != nil {
		return failing, nil, err
	}
	if !exists {
		queue.Forget(key)
		return healthy, nil, nil
	}
	m := obj.(*v1alpha1.Mount)
	cluster := ClusterOf(m)
	// The proxy reads the mount's Secret, and keys its transports and metrics, in the
	// mount's logical cluster.
	ctx = clusters.WithCluster(ctx, cluster)
	now := metav1.Now()

	var status v1alpha1.MountStatus
	if c.opts.Workspaces != nil && (m.Spec.Type == v1alpha1.MountTypeWorkspace || m.Spec.Type == v1alpha1.MountTypeRedirect) {
		resolveCtx, cancel := context.WithTimeout(ctx, proxy.DefaultProbeTimeout)
		ws, err := c.opts.Workspaces.ResolveWorkspace(resolveCtx, m.Spec.Ref.Name)
		cancel()
		status = workspaceStatus(m, ws, err, now)
		c.metrics.resolved(status)
		if status.Phase != v1alpha1.MountPhaseReady {
			if err := c.write(ctx, m, status); err != nil {
				return failing, nil, err
			}
			return unresolved, nil, nil
		}
	} else {
		internal := &mounts.Mount{}
		if err := v1alpha1.Convert_v1alpha1_Mount_To_mounts_Mount(m, internal, nil); err != nil {
			return failing, nil, fmt.Errorf("converting mount: %w", err)
		}
		internal.Namespace = "" // the cache's cluster key, see NewAllClustersInformer
		start := time.Now()
		probe, probed := c.prober.ProbeSince(ctx, internal, c.opts.ProbeWait, c.sinceOf(key))
		if probed != nil {
			klog.FromContext(ctx).V(4).Info("Probe still running; reconciling when it is done", "key", key)
			return pending, probed, nil
		}
		c.metrics.probed(probe, time.Since(start))
		if probeInterval(c.opts.Interval, c.mounts.Load(), c.opts.ProbesPerSecond) > targetIdleTimeout {
			c.prober.CloseIdleConnections(internal)
		}
		status = computeStatus(m, probe, ClusterProxyURL(c.opts.BaseURL, cluster, m.Name), now)
	}
	if err := c.write(ctx, m, status); err != nil {
		return failing, nil, err
	}
	if status.Phase == v1alpha1.MountPhaseReady {
		return healthy, nil, nil
	}
	return failing, nil, nil
}

// write updates the status when it differs, and records the phase transition.
func (c *Controller) write(ctx context.Context, m *v1alpha1.Mount, status v1alpha1.MountStatus) error {
	key := Key(m)
	if apiequality.Semantic.DeepEqual(m.Status, status) {
		c.setPhase(key, status.Phase)
		return nil
	}
	cluster := ClusterOf(m)
	updated := m.DeepCopy()
	updated.Namespace = "" // the cache's cluster key, not the object's
	updated.Status = status
	if err := c.updateStatus(ctx, cluster, updated); err != nil {
		return fmt.Errorf("updating status of mount %s: %w", key, err)
	}
	c.metrics.writes.Inc()
	c.setPhase(key, status.Phase)
	if m.Status.Phase != status.Phase {
		klog.FromContext(ctx).V(2).Info("Mount changed phase", "mount", m.Name, "cluster", cluster, "from", m.Status.Phase, "to", status.Phase)
		c.event(updated, cluster, m.Status.Phase, status)
	}
	return nil
}

// updateStatus writes m's status: through the typed client in the default cluster, below
// /clusters/<cluster> otherwise.
func (c *Controller) updateStatus(ctx context.Context, cluster clusters.Name, m *v1alpha1.Mount) error {
	opts := metav1.UpdateOptions{FieldManager: ControllerName}
	if cluster == clusters.DefaultCluster {
		_, err := c.client.MountsV1alpha1().Mounts().UpdateStatus(ctx, m, opts)
		return err
	}
	return c.client.MountsV1alpha1().RESTClient().Put().
		AbsPath("/clusters", string(cluster), "apis", v1alpha1.SchemeGroupVersion.Group, v1alpha1.SchemeGroupVersion.Version, "mounts", m.Name, "status").
		VersionedParams(&opts, scheme.ParameterCodec).
		Body(m).
		Do(ctx).
		Error()
}

func (c *Controller) event(m *v1alpha1.Mount, cluster clusters.Name, from v1alpha1.MountPhase, status v1alpha1.MountStatus) {
	if c.recorder == nil {
		return
	}
	eventType := "Normal"
	if status.Phase == v1alpha1.MountPhaseUnknown || status.Phase == v1alpha1.MountPhaseConnecting && from != v1alpha1.MountPhaseInitializing && from != "" {
		eventType = "Warning"
	}
	message := eventMessage(from, status)
	if cluster != clusters.DefaultCluster {
		// Events name the mount by name and UID; the cluster tells same-named mounts apart.
		message = "Logical cluster " + string(cluster) + ": " + message
	}
	c.recorder.Eventf(m, nil, eventType, string(status.Phase), "Probe", "%s", message)
}

// eventMessage says the phase change and the Ready condition's reason. Events may be read by
// others than the Mount's readers: the condition's message, with the target's address and
// the error, stays in the Mount's status.
func eventMessage(from v1alpha1.MountPhase, status v1alpha1.MountStatus) string {
	message := fmt.Sprintf("Phase %s -> %s", from, status.Phase)
	if cond := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady); cond != nil {
		message += ", reason " + cond.Reason + "; the Mount's conditions say more"
	}
	return message
}

func (c *Controller) setPhase(name string, phase v1alpha1.MountPhase) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had := c.phases[name]
	if had && old == phase {
		return
	}
	if had {
		c.metrics.phases.WithLabelValues(string(old)).Dec()
	}
	if phase == "" {
		delete(c.phases, name)
		return
	}
	c.phases[name] = phase
	c.metrics.phases.WithLabelValues(string(phase)).Inc()
}
