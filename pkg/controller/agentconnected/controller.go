package agentconnected

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned/scheme"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// ControllerName is the field manager of the condition writes.
const ControllerName = "mount-agent-connected"

// Reasons of the AgentConnected condition.
const (
	ReasonAttached = "Attached"
	ReasonDetached = "Detached"
)

// ConnectedMessage is the message of the True condition written by replica.
func ConnectedMessage(replica string) string {
	return fmt.Sprintf("An agent is connected to replica %q.", replica)
}

// Sessions says whether this replica holds a session, and since when.
type Sessions interface {
	Connected(key string) (time.Time, bool)
}

// Cached returns a mount as a watch of this server last delivered it, or nil when it has
// none (not synced yet, or no such mount).
type Cached func(tunnel.Mount) *v1alpha1.Mount

// Controller writes the condition of the mounts whose sessions start or end on this replica.
type Controller struct {
	client   clientset.Interface
	sessions Sessions
	replica  string
	queue    workqueue.TypedRateLimitingInterface[tunnel.Mount]
	cached   atomic.Pointer[Cached]
}

// New returns the controller; feed it with Observe (tunnel.Sessions.Watch) from the start,
// and Run it once the server serves.
func New(sessions Sessions, replica string) *Controller {
	return &Controller{
		sessions: sessions,
		replica:  replica,
		// A mount whose agent flaps is written at most at this rate: the queue coalesces.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[tunnel.Mount](500*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[tunnel.Mount]{Name: "mount_agent_connected"}),
	}
}

// Observe queues the mount of a session event.
func (c *Controller) Observe(e tunnel.Event) { c.queue.Add(e.Mount) }

// ReadFrom lets Reaffirm look at mounts in cached instead of reading each from the server, and
// attaches write on top of cached copies.
func (c *Controller) ReadFrom(cached Cached) { c.cached.Store(&cached) }

// Reaffirm says again that this replica holds the session of e's mount (each renewal of the
// session's Lease calls it), in case something else wrote otherwise meanwhile: the leader's
// status controller, probing before it knew of the session, or a replica that had not seen
// the session move. A mount whose cached copy already says what this replica would write is
// left alone; reading each from the server took a seventh of a replica's idle CPU at 1,000
// sessions. A stale cache only delays the correction to a later renewal.
func (c *Controller) Reaffirm(e tunnel.Event) {
	if cached := c.cached.Load(); cached != nil {
		if m := (*cached)(e.Mount); m != nil && c.says(m, e.Mount) {
			return
		}
	}
	c.queue.Add(e.Mount)
}

// says reports whether m already carries the condition this replica would write for the
// session it holds of mount.
func (c *Controller) says(m *v1alpha1.Mount, mount tunnel.Mount) bool {
	since, connected := c.sessions.Connected(mount.Key())
	if !connected || m.UID != mount.UID || m.Spec.Tunnel == nil {
		return false
	}
	return c.saysConnected(meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionAgentConnected), since)
}

// saysConnected reports whether prev is the True condition this replica writes for its
// session that started at since.
func (c *Controller) saysConnected(prev *metav1.Condition, since time.Time) bool {
	return prev != nil && prev.Status == metav1.ConditionTrue && prev.Message == ConnectedMessage(c.replica) &&
		prev.LastTransitionTime.Time.Equal(since.Truncate(time.Second))
}

// Workers is how many mounts the controller writes at once. One worker wrote about 25 mounts a
// second, a read and a write each: after a reconnect storm of 10,000 agents, their Mounts
// waited minutes for the condition that lets them be Ready.
const Workers = 16

// Run writes conditions through client until ctx ends. It is called once.
func (c *Controller) Run(ctx context.Context, client clientset.Interface) {
	c.client = client
	defer c.queue.ShutDown()
	for range Workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for c.processNext(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) processNext(ctx context.Context) bool {
	m, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(m)
	if err := c.sync(ctx, m); err != nil {
		klog.FromContext(ctx).V(2).Info("Writing the AgentConnected condition failed; retrying", "mount", m.Label(), "err", err.Error())
		c.queue.AddRateLimited(m)
		return true
	}
	c.queue.Forget(m)
	return true
}

// sync writes what this replica knows now: True with its name and the session's start while
// it holds a session; False when it does not and the condition still names this replica (a
// session taken over by another replica is that replica's to report).
func (c *Controller) sync(ctx context.Context, m tunnel.Mount) error {
	since, connected := c.sessions.Connected(m.Key())
	// An attach's first try starts from the status controller's cached copy when it has one (a
	// stale copy costs a conflict, then a read), so that it costs one write, not a read too:
	// after a reconnect storm every mount needs its write. A copy that would have nothing
	// written is not believed, and a detach always reads the server: a stale copy could show
	// another replica's word where the server has this one's.
	tryCache := connected
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var current *v1alpha1.Mount
		var cond *metav1.Condition
		if tryCache {
			tryCache = false
			if current = c.cachedCopy(m); current != nil {
				if cond = c.condition(current, m, connected, since); cond == nil {
					current = nil
				}
			}
		}
		if current == nil {
			var err error
			if current, err = c.get(ctx, m); apierrors.IsNotFound(err) {
				return nil
			} else if err != nil {
				return err
			}
			if cond = c.condition(current, m, connected, since); cond == nil {
				return nil
			}
		}
		// Set by hand: SetStatusCondition keeps the old transition time when the status is
		// unchanged, and a new session is a new "since".
		meta.RemoveStatusCondition(&current.Status.Conditions, v1alpha1.ConditionAgentConnected)
		current.Status.Conditions = append(current.Status.Conditions, *cond)
		return c.updateStatus(ctx, m.Cluster, current)
	})
}

// condition is the AgentConnected condition to write on current, or nil when there is
// nothing to write: current is another mount of the name or has no tunnel (not ours to say),
// already says this session, or (detached) names another replica's session.
func (c *Controller) condition(current *v1alpha1.Mount, m tunnel.Mount, connected bool, since time.Time) *metav1.Condition {
	if current.UID != m.UID || current.Spec.Tunnel == nil {
		return nil
	}
	mine := ConnectedMessage(c.replica)
	cond := &metav1.Condition{Type: v1alpha1.ConditionAgentConnected, ObservedGeneration: current.Generation}
	prev := meta.FindStatusCondition(current.Status.Conditions, v1alpha1.ConditionAgentConnected)
	if connected {
		if c.saysConnected(prev, since) {
			return nil
		}
		cond.Status, cond.Reason, cond.Message, cond.LastTransitionTime = metav1.ConditionTrue, ReasonAttached, mine, metav1.NewTime(since.Truncate(time.Second))
		return cond
	}
	if prev != nil && (prev.Status != metav1.ConditionTrue || prev.Message != mine) {
		return nil
	}
	cond.Status, cond.Reason, cond.Message, cond.LastTransitionTime = metav1.ConditionFalse, ReasonDetached, "No agent is connected.", metav1.Now()
	return cond
}

// cachedCopy returns a copy of the mount from the status controller's cache, without its
// namespace (the cache's cluster key), or nil when there is no cache or it lacks the mount.
func (c *Controller) cachedCopy(m tunnel.Mount) *v1alpha1.Mount {
	cache := c.cached.Load()
	if cache == nil {
		return nil
	}
	current := (*cache)(m)
	if current == nil {
		return nil
	}
	current = current.DeepCopy()
	current.Namespace = ""
	return current
}

func (c *Controller) get(ctx context.Context, m tunnel.Mount) (*v1alpha1.Mount, error) {
	if m.Cluster == clusters.DefaultCluster || m.Cluster == "" {
		return c.client.MountsV1alpha1().Mounts().Get(ctx, m.Name, metav1.GetOptions{})
	}
	out := &v1alpha1.Mount{}
	err := c.client.MountsV1alpha1().RESTClient().Get().
		AbsPath("/clusters", string(m.Cluster), "apis", v1alpha1.SchemeGroupVersion.Group, v1alpha1.SchemeGroupVersion.Version, "mounts", m.Name).
		Do(ctx).Into(out)
	return out, err
}

func (c *Controller) updateStatus(ctx context.Context, cluster clusters.Name, m *v1alpha1.Mount) error {
	opts := metav1.UpdateOptions{FieldManager: ControllerName}
	if cluster == clusters.DefaultCluster || cluster == "" {
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
