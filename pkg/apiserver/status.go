package apiserver

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"github.com/google/uuid"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfig "k8s.io/component-base/config"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/controller/agentconnected"
	"github.com/kcp-dev/mount-apiserver/pkg/controller/status"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	informers "github.com/kcp-dev/mount-apiserver/pkg/generated/informers/externalversions"
	mountinformers "github.com/kcp-dev/mount-apiserver/pkg/generated/informers/externalversions/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// StatusConfig configures the status controller.
type StatusConfig struct {
	// Enabled runs the controller.
	Enabled bool
	// KcpMode makes the controller keep the status of the Mounts of all logical clusters
	// (wildcard list and watch at /clusters/*), not only of the default cluster.
	KcpMode bool
	status.Options
	// LeaderElection elects one replica to write status. Used only with a host cluster,
	// which holds the Lease; a standalone server is alone.
	LeaderElection componentbaseconfig.LeaderElectionConfiguration
	// LeaseClient holds the Lease; nil uses the host client. A client of its own keeps the
	// Lease's renewals out of the host client's rate limiter, which the Events of thousands
	// of phase changes fill for minutes: renewals waiting behind them lost the lease at
	// 10,000 mounts.
	LeaseClient kubernetes.Interface
	// EventsClient sends the controller's Events; nil uses the host client. A client of its
	// own keeps the Events of thousands of phase changes out of the rate limiter of the host
	// client, whose SubjectAccessReviews every Mount create waits for (MountLending): behind
	// them, creates failed at 10,000 mounts with "client rate limiter Wait ... would exceed
	// context deadline". Events are best effort: when their queue is full they are dropped.
	EventsClient kubernetes.Interface
	// OwnEvents, without a host, records Events in this server's own Events API (Config.Extra.Events).
	OwnEvents bool
}

// startStatusController is the post-start hook that runs the status controller on the
// server's own API through the loopback client.
// agents, if not nil, reads the mounts of its sessions from the controller's cache.
func startStatusController(cfg StatusConfig, proxier *proxy.Proxier, sessions *tunnel.Sessions, agents *agentconnected.Controller, named *authorization.NamedAgents, host kubernetes.Interface) genericapiserver.PostStartHookFunc {
	return func(hookCtx genericapiserver.PostStartHookContext) error {
		logger := klog.FromContext(hookCtx).WithName(status.ControllerName)
		// Status writes go to this very server, which max-in-flight protects; the loopback
		// default of 50 QPS would take minutes for the first writes of 10,000 mounts.
		loopback := rest.CopyConfig(hookCtx.LoopbackClientConfig)
		loopback.QPS, loopback.Burst = 500, 1000
		client, err := clientset.NewForConfig(loopback)
		if err != nil {
			return fmt.Errorf("creating loopback client: %w", err)
		}
		// The controller never reads managedFields (about half of a Mount's bytes), labels or
		// annotations (kubectl apply's last-applied-configuration repeats the spec); a status
		// update without them keeps the stored ones.
		factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(stripUnread))
		var mountInformer mountinformers.MountInformer
		if !cfg.KcpMode {
			mountInformer = factory.Mounts().V1alpha1().Mounts()
		} else {
			// The loopback user is in system:masters, which logical clusters let in.
			wildcardConfig := rest.CopyConfig(loopback)
			wildcardConfig.Host = strings.TrimSuffix(wildcardConfig.Host, "/") + "/clusters/" + string(clusters.Wildcard)
			wildcard, err := clientset.NewForConfig(wildcardConfig)
			if err != nil {
				return fmt.Errorf("creating loopback client of all logical clusters: %w", err)
			}
			if mountInformer, err = status.NewAllClustersInformer(wildcard, stripUnread); err != nil {
				return err
			}
		}
		var recorder events.EventRecorder
		var sink events.EventSink
		switch {
		case host != nil:
			eventsClient := host
			if cfg.EventsClient != nil {
				eventsClient = cfg.EventsClient
			}
			sink = namespacedSink{namespace: EventsNamespace, sink: &events.EventSinkImpl{Interface: eventsClient.EventsV1()}}
		case cfg.OwnEvents:
			// The server keeps them itself, in the default namespace as a cluster keeps the
			// Events of cluster-scoped objects: kubectl get events shows them.
			own, err := kubernetes.NewForConfig(loopback)
			if err != nil {
				return fmt.Errorf("creating loopback client: %w", err)
			}
			sink = &events.EventSinkImpl{Interface: own.EventsV1()}
		}
		if sink != nil {
			sink := newBoundedSink(sink, maxPendingEvents, logger)
			broadcaster := events.NewBroadcaster(sink)
			if err := broadcaster.StartRecordingToSinkWithContext(hookCtx); err != nil {
				return fmt.Errorf("starting the event recorder: %w", err)
			}
			recorder = broadcaster.NewRecorder(Scheme, status.ControllerName)
			go func() { <-hookCtx.Done(); broadcaster.Shutdown() }()
		}
		ctrl, err := status.New(client, mountInformer, proxier, recorder, cfg.Options)
		if err != nil {
			return err
		}
		// Every replica watches Mounts, leader or not, and so learns of deletes served by
		// another replica; the registry's delete hook runs only on the one that served it.
		if _, err := mountInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			DeleteFunc: func(obj any) {
				if m := status.DeletedMount(obj); m != nil {
					forgetMount(proxier, sessions, status.ClusterOf(m), m.Name, m.UID)
				}
			},
			// A mount that names another agent now closes the session of the one before at
			// once, on every replica, not at that session's next re-check.
			UpdateFunc: func(oldObj, newObj any) {
				old, okOld := oldObj.(*v1alpha1.Mount)
				m, ok := newObj.(*v1alpha1.Mount)
				if sessions == nil || !ok || !okOld || m.Spec.Tunnel == nil || m.Spec.Tunnel.AgentUser == "" {
					return
				}
				if old.Spec.Tunnel != nil && old.Spec.Tunnel.AgentUser == m.Spec.Tunnel.AgentUser {
					return
				}
				mount := tunnel.Mount{Cluster: status.ClusterOf(m), Name: m.Name, UID: m.UID}
				if sessions.CloseOthers(mount, m.Spec.Tunnel.AgentUser) {
					logger.Info("Closed the agent session of a mount that names another agent", "mount", mount.Label())
				}
			},
		}); err != nil {
			return fmt.Errorf("adding the handler of deleted and re-agented mounts: %w", err)
		}
		informer := mountInformer.Informer()
		cached := func(cluster clusters.Name, name string) *v1alpha1.Mount {
			if !informer.HasSynced() {
				return nil
			}
			obj, ok, err := informer.GetIndexer().GetByKey(status.KeyOf(cluster, name))
			if err != nil || !ok {
				return nil
			}
			mount, _ := obj.(*v1alpha1.Mount)
			return mount
		}
		if agents != nil {
			agents.ReadFrom(func(m tunnel.Mount) *v1alpha1.Mount { return cached(m.Cluster, m.Name) })
		}
		if named != nil {
			named.ReadFrom(func(ctx context.Context, name string) (string, bool) {
				m := cached(clusters.From(ctx), name)
				if m == nil {
					return "", false
				}
				if m.Spec.Tunnel == nil {
					return "", true
				}
				return m.Spec.Tunnel.AgentUser, true
			})
		}
		if ws, ok := proxier.Secrets.(*proxy.WatchedSecrets); ok {
			ws.OnChange(ctrl.SecretChanged)
		}
		// What requests through a mount find moves its status at once (Observed).
		proxier.SetObserver(ctrl.Observed)
		factory.Start(hookCtx.Done())
		if cfg.KcpMode {
			go mountInformer.Informer().RunWithContext(hookCtx)
		}

		ctx := klog.NewContext(hookCtx, logger)
		if host == nil || !cfg.LeaderElection.LeaderElect {
			go ctrl.Run(ctx)
			return nil
		}
		leaseClient := cfg.LeaseClient
		if leaseClient == nil {
			leaseClient = host
		}
		go runElected(ctx, leaseClient, cfg.LeaderElection, status.ControllerName, ctrl.Run)
		return nil
	}
}

// EventsNamespace holds the Events of Mount phase changes. The recorder would put Events of
// cluster-scoped objects in "default", which many may read; Kubernetes accepts them elsewhere
// only in kube-system (for events.k8s.io/v1 Events), readable by cluster administrators.
const EventsNamespace = metav1.NamespaceSystem

// maxPendingEvents bounds the events on their way to the host: about a second of the host
// client's rate.
const maxPendingEvents = 100

// boundedSink drops an event when maxPending are on their way already. client-go's broadcaster
// starts a goroutine per event, which waits for the client's rate limiter: the 10,000 phase
// changes of a bulk create held about 60 MiB of goroutine stacks and event copies for minutes
// (issue #17, the scale bench). Events are best effort; a dropped one counts as recorded.
type boundedSink struct {
	sink    events.EventSink
	slots   chan struct{}
	dropped *atomic.Int64
	logger  klog.Logger
}

func newBoundedSink(sink events.EventSink, maxPending int, logger klog.Logger) boundedSink {
	return boundedSink{sink: sink, slots: make(chan struct{}, maxPending), dropped: &atomic.Int64{}, logger: logger}
}

func (s boundedSink) send(e *eventsv1.Event, send func() (*eventsv1.Event, error)) (*eventsv1.Event, error) {
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
		return send()
	default:
		if n := s.dropped.Add(1); n == 1 || n%1000 == 0 {
			s.logger.V(2).Info("Dropped events: too many are on their way to the host", "dropped", n, "pending", cap(s.slots))
		}
		return e, nil
	}
}

func (s boundedSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.send(e, func() (*eventsv1.Event, error) { return s.sink.Create(ctx, e) })
}

func (s boundedSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.send(e, func() (*eventsv1.Event, error) { return s.sink.Update(ctx, e) })
}

func (s boundedSink) Patch(ctx context.Context, e *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return s.send(e, func() (*eventsv1.Event, error) { return s.sink.Patch(ctx, e, data) })
}

// namespacedSink writes events into one namespace, whatever namespace the recorder chose.
type namespacedSink struct {
	namespace string
	sink      events.EventSink
}

func (s namespacedSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.sink.Create(ctx, s.in(e))
}

func (s namespacedSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.sink.Update(ctx, s.in(e))
}

func (s namespacedSink) Patch(ctx context.Context, e *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return s.sink.Patch(ctx, s.in(e), data)
}

func (s namespacedSink) in(e *eventsv1.Event) *eventsv1.Event {
	if e.Namespace == s.namespace {
		return e
	}
	moved := e.DeepCopy()
	moved.Namespace = s.namespace
	return moved
}

// stripUnread drops the metadata the status controller never reads from the objects its
// informer caches.
func stripUnread(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
		m.SetLabels(nil)
		m.SetAnnotations(nil)
	}
	return obj, nil
}

// runElected runs the controller name's run while this replica holds the Lease, campaigning
// again when it loses it, until ctx ends. name also names the elector (metrics, logs).
func runElected(ctx context.Context, host kubernetes.Interface, le componentbaseconfig.LeaderElectionConfiguration, name string, run func(context.Context)) {
	logger := klog.FromContext(ctx)
	hostname, _ := os.Hostname()
	id := strings.TrimSuffix(hostname, ".") + "_" + uuid.NewString()
	lock, err := resourcelock.New(le.ResourceLock, le.ResourceNamespace, le.ResourceName, host.CoreV1(), host.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		logger.Error(err, "Cannot create the leader election lock; the controller does not run", "controller", name)
		return
	}
	for ctx.Err() == nil {
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   le.LeaseDuration.Duration,
			RenewDeadline:   le.RenewDeadline.Duration,
			RetryPeriod:     le.RetryPeriod.Duration,
			ReleaseOnCancel: true,
			Name:            name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					logger.Info("Leading", "controller", name, "identity", id)
					run(ctx)
				},
				OnStoppedLeading: func() { logger.Info("Stopped leading", "identity", id) },
			},
		})
		if err != nil {
			logger.Error(err, "Invalid leader election configuration; the controller does not run", "controller", name)
			return
		}
		elector.Run(ctx)
	}
}
