package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/features"
	registrygeneric "k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/cborfields"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/controller/agentconnected"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	"github.com/kcp-dev/mount-apiserver/pkg/fanout"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
	eventsregistry "github.com/kcp-dev/mount-apiserver/pkg/registry/events"
	mountsregistry "github.com/kcp-dev/mount-apiserver/pkg/registry/mounts"
	secretsregistry "github.com/kcp-dev/mount-apiserver/pkg/registry/secrets"
	"github.com/kcp-dev/mount-apiserver/pkg/registry/selfreviews"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// Config is the configuration of a mount-apiserver, built by the command's options.
type Config struct {
	Generic *genericapiserver.RecommendedConfig
	Extra   ExtraConfig
}

// ExtraConfig is what the mount-apiserver adds to the generic configuration.
type ExtraConfig struct {
	// EmbeddedEtcd is the etcd started for this server, nil with an external etcd. The server
	// stops it after it stopped serving.
	EmbeddedEtcd *embeddedetcd.Server
	// AdminKubeconfig is the path of the admin kubeconfig written in standalone mode.
	AdminKubeconfig string

	// HostClient talks to the host cluster in delegated mode; nil in standalone mode.
	HostClient kubernetes.Interface
	// APIServiceName, when set, is the APIService whose caBundle the server sets to
	// APIServiceCABundle after it started serving.
	APIServiceName     string
	APIServiceCABundle []byte

	// ServeSecrets serves core v1 Secrets (standalone mode without another cluster for them).
	ServeSecrets bool
	// Events, if set, serves core v1 and events.k8s.io/v1 Events of the server's own objects,
	// which its status controller records there (standalone mode, with no cluster of its own
	// for them).
	Events *eventsregistry.Options

	// Proxier serves mounts/proxy; its Authorizer is filled in from the generic config.
	Proxier *proxy.Proxier
	// Tunnel serves agents' sessions (mounts/attach).
	Tunnel TunnelConfig
	// Status configures the status controller.
	Status StatusConfig
	// UnboundGC configures the collector of Mounts of unbound logical clusters (kcp mode).
	UnboundGC UnboundGCConfig
	// TunnelPeers, with a host, lets replicas reach tunnel sessions held by each other.
	TunnelPeers *TunnelPeersConfig
	// AdmissionRelay, if set, serves the webhooks registered through renaming mounts.
	AdmissionRelay *AdmissionRelayConfig
	// FanOut configures mounts/*/proxy.
	FanOut FanOutConfig
}

// FanOutConfig configures mounts/*/proxy, one request across many mounts (pkg/fanout).
type FanOutConfig struct {
	// MemberTimeout bounds each member's answer; 0 is fanout.DefaultMemberTimeout.
	MemberTimeout time.Duration
}

// TunnelConfig configures the reverse tunnels of agents.
type TunnelConfig struct {
	// Sessions holds this replica's sessions; nil serves no mounts/attach.
	Sessions *tunnel.Sessions
	// AuthorizationInterval is how often an attached agent's permission is checked again.
	AuthorizationInterval time.Duration
	// MaxAttaching bounds the attach requests worked on at once (tunnel.LimitAttaching); 0
	// is tunnel.DefaultMaxAttaching.
	MaxAttaching int
	// AuthorizationLimiter, if set, spaces those checks over all sessions (tunnel.Attacher.Limiter).
	AuthorizationLimiter tunnel.RecheckLimiter
	// ReplicaName names this replica in the AgentConnected condition.
	ReplicaName string
	// ServiceAccounts, if set, are the host's, whose agents keep their sessions only while
	// their ServiceAccount exists (tunnel.Attacher.ServiceAccounts).
	ServiceAccounts corev1client.ServiceAccountsGetter
	// NamedAgents, if set, is the authorizer (in the server's chain) of mounts that name their
	// agent; it reads them from the status controller's cache, without which (status off) a
	// named agent needs verb "create" on mounts/attach like any other.
	NamedAgents *authorization.NamedAgents
}

type completedConfig struct {
	Generic genericapiserver.CompletedConfig
	Extra   *ExtraConfig
}

// CompletedConfig is a Config whose defaults are filled in; only it can build a server.
type CompletedConfig struct {
	*completedConfig
}

// Server is a mount-apiserver.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
	extra            *ExtraConfig
}

// Complete fills in the fields of the generic configuration that derive from others.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{&completedConfig{
		Generic: c.Generic.Complete(),
		Extra:   &c.Extra,
	}}
}

// Close releases what the configuration started (the embedded etcd, the secure listener). A
// Server does this itself when it stops; call Close only when no Server was built.
func (c *Config) Close() {
	if c.Generic != nil && c.Generic.SecureServing != nil && c.Generic.SecureServing.Listener != nil {
		_ = c.Generic.SecureServing.Listener.Close()
	}
	c.Extra.EmbeddedEtcd.Close()
	c.Extra.AdmissionRelay.close()
}

// New builds the server and installs the mounts.kcp.io API group.
func (c CompletedConfig) New() (*Server, error) {
	c.Generic.BuildHandlerChainFunc = carryDryRun(keepAttachCredentials(checkCABundleEncoding(boundYAMLBodies(endLongRunningOnDrain(c.Generic.BuildHandlerChainFunc)))))
	if c.Extra.Tunnel.Sessions != nil {
		c.Generic.BuildHandlerChainFunc = limitAttaching(c.Extra.Tunnel.MaxAttaching, c.Generic.BuildHandlerChainFunc)
	}
	tp := c.Extra.TunnelPeers
	if tp != nil && (c.Extra.HostClient == nil || c.Extra.Tunnel.Sessions == nil) {
		tp = nil
	}
	if tp != nil {
		c.Generic.BuildHandlerChainFunc = withTunnelRelay(tp.Relay, c.Generic.BuildHandlerChainFunc)
	}
	generic, err := c.Generic.New("mount-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("creating generic apiserver: %w", err)
	}

	proxier := c.Extra.Proxier
	if proxier == nil || proxier.Secrets == nil || proxier.Transports == nil {
		return nil, fmt.Errorf("configuration lacks the proxy (Extra.Proxier with Secrets and Transports)")
	}
	proxier.Authorizer = c.Generic.Authorization.Authorizer
	sessions := c.Extra.Tunnel.Sessions
	var attach mountsregistry.AttachHandlerFunc
	if sessions != nil {
		attacher := &tunnel.Attacher{Sessions: sessions, Authorizer: c.Generic.Authorization.Authorizer,
			Authenticator: c.Generic.Authentication.Authenticator, ServiceAccounts: c.Extra.Tunnel.ServiceAccounts,
			Interval: c.Extra.Tunnel.AuthorizationInterval, Limiter: c.Extra.Tunnel.AuthorizationLimiter}
		attach = attacher.Handler
	}
	fan := &fanout.Server{
		Transport:       proxier.RoundTripper,
		Authorizer:      c.Generic.Authorization.Authorizer,
		MemberTimeout:   c.Extra.FanOut.MemberTimeout,
		MinWatchTimeout: time.Duration(c.Generic.MinRequestTimeout) * time.Second,
	}
	storage, err := mountsregistry.NewStorage(Scheme, c.Generic.RESTOptionsGetter, mountsregistry.StorageOptions{
		Proxy: proxier.Handler,
		FanOut: func(ctx context.Context, list func(context.Context, labels.Selector) ([]*mounts.Mount, error), inner string) (http.Handler, error) {
			return fan.Handler(ctx, list, inner)
		},
		Attach: attach,
		AfterDelete: func(m *mounts.Mount) {
			forgetMount(proxier, sessions, kcp.ClusterOf(m), m.Name, m.UID)
		},
		// The embedded etcd lives and dies with this process, and nothing else writes it.
		SoleWriter: c.Extra.EmbeddedEtcd != nil,
	})
	if err != nil {
		return nil, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(mounts.GroupName, Scheme, ParameterCodec, Codecs)
	if utilfeature.DefaultFeatureGate.Enabled(features.CBORServingAndStorage) {
		// The codecs NewDefaultAPIGroupInfo builds with CBOR on, with the CBOR serializer that
		// converts each distinct managedFields set to CBOR once (pkg/cborfields).
		group.NegotiatedSerializer = serializer.NewCodecFactory(Scheme,
			serializer.WithStreamingCollectionEncodingToJSON(),
			serializer.WithStreamingCollectionEncodingToProtobuf(),
			serializer.WithSerializer(cborfields.NewSerializerInfo))
	}
	group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"mounts":        storage.Mount,
		"mounts/status": storage.Status,
		"mounts/proxy":  storage.Proxy,
	}
	if storage.Attach != nil {
		group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version]["mounts/attach"] = storage.Attach
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing API group %s: %w", mounts.GroupName, err)
	}

	if err := installOwnCore(generic, c.Generic.RESTOptionsGetter, c.Extra.ServeSecrets, c.Extra.Events); err != nil {
		return nil, err
	}

	if err := installSelfReviews(generic, c.Generic.Authorization.Authorizer, c.Generic.RuleResolver); err != nil {
		return nil, err
	}

	routes, err := NewProxyRoutes(generic.Handler.GoRestfulContainer)
	if err != nil {
		return nil, fmt.Errorf("routing proxied requests: %w", err)
	}
	generic.Handler.GoRestfulContainer.Router(routes)

	if err := generic.AddPostStartHook("mount-proxy-transport-expiry", func(hookCtx genericapiserver.PostStartHookContext) error {
		go proxier.Transports.Run(hookCtx)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding post-start hook: %w", err)
	}

	var agents *agentconnected.Controller
	if sessions != nil {
		agents = agentconnected.New(sessions, c.Extra.Tunnel.ReplicaName)
		sessions.Watch(agents.Observe)
		if err := generic.AddPostStartHook("start-mount-agent-connected", func(hookCtx genericapiserver.PostStartHookContext) error {
			// A reconnect storm needs a write per mount: the loopback default of 50 QPS
			// would pace 10,000 of them over minutes (see startStatusController).
			loopback := restclient.CopyConfig(hookCtx.LoopbackClientConfig)
			loopback.QPS, loopback.Burst = 500, 1000
			client, err := clientset.NewForConfig(loopback)
			if err != nil {
				return fmt.Errorf("creating loopback client: %w", err)
			}
			go agents.Run(klog.NewContext(hookCtx, klog.FromContext(hookCtx).WithName(agentconnected.ControllerName)), client)
			return nil
		}); err != nil {
			return nil, fmt.Errorf("adding post-start hook: %w", err)
		}
		// Hijacked connections outlive the HTTP server's shutdown: end the sessions, and the
		// agents reconnect to another replica.
		if err := generic.AddPreShutdownHook("mount-tunnel-sessions", func() error {
			sessions.CloseAll()
			return nil
		}); err != nil {
			return nil, fmt.Errorf("adding pre-shutdown hook: %w", err)
		}
	}

	if relay := c.Extra.AdmissionRelay; relay != nil {
		if err := generic.AddPostStartHook("start-admission-relay", startAdmissionRelay(relay, storage, proxier)); err != nil {
			return nil, fmt.Errorf("adding post-start hook: %w", err)
		}
	}

	if c.Extra.Status.Enabled {
		if err := generic.AddPostStartHook("start-mount-status-controller", startStatusController(c.Extra.Status, proxier, sessions, agents, c.Extra.Tunnel.NamedAgents, c.Extra.HostClient)); err != nil {
			return nil, fmt.Errorf("adding post-start hook: %w", err)
		}
	}

	if gc := c.Extra.UnboundGC; gc.Bindings != nil && gc.Interval > 0 {
		leaseClient := c.Extra.Status.LeaseClient
		if leaseClient == nil {
			leaseClient = c.Extra.HostClient
		}
		if err := generic.AddPostStartHook("start-mount-unbound-gc", startUnboundGC(gc, leaseClient)); err != nil {
			return nil, fmt.Errorf("adding post-start hook: %w", err)
		}
	}

	if tp != nil {
		// Sessions are recorded from the first on, before the post-start hooks run; they
		// are released when they end, at the latest when the server closes them all.
		// Each renewal reports the session again: the leader's status controller, probing
		// before it could know of a new session, may have said that no agent is connected.
		sessions.Watch(tp.Owners.Follow(klog.NewContext(context.Background(), klog.Background().WithName("tunnel-peers")), agents.Reaffirm))
		if err := generic.AddPostStartHook("start-tunnel-peers", startTunnelPeers(tp, c.Extra.HostClient)); err != nil {
			return nil, fmt.Errorf("adding post-start hook: %w", err)
		}
	}

	if c.Extra.APIServiceName != "" {
		if err := generic.AddPostStartHook("publish-apiservice-ca-bundle", func(hookCtx genericapiserver.PostStartHookContext) error {
			go publishCABundle(hookCtx, c.Extra.HostClient, c.Extra.APIServiceName, c.Extra.APIServiceCABundle)
			return nil
		}); err != nil {
			return nil, fmt.Errorf("adding post-start hook: %w", err)
		}
	}

	return &Server{GenericAPIServer: generic, extra: c.Extra}, nil
}

// forgetMount lets go of what this replica keeps for a deleted mount: the proxy's transports
// and metrics, and the agent's session (a session is bound to the mount's UID, so a mount
// deleted and created again needs a new attach).
// keepAttachCredentials keeps what attach requests authenticate with, before the chain's
// authentication filter removes it: the Attacher authenticates agents again while their
// sessions last (tunnel.KeepAttachCredentials).
// limitAttaching puts tunnel.LimitAttaching outside the whole chain: a turned-away attach costs
// no authentication.
func limitAttaching(n int, build func(http.Handler, *genericapiserver.Config) http.Handler) func(http.Handler, *genericapiserver.Config) http.Handler {
	if n <= 0 {
		n = tunnel.DefaultMaxAttaching
	}
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		return tunnel.LimitAttaching(n, tunnel.DefaultMetrics(), build(apiHandler, c))
	}
}

func keepAttachCredentials(build func(http.Handler, *genericapiserver.Config) http.Handler) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		return tunnel.KeepAttachCredentials(build(apiHandler, c))
	}
}

func forgetMount(proxier *proxy.Proxier, sessions *tunnel.Sessions, cluster clusters.Name, name string, uid types.UID) {
	proxier.Forget(cluster, name, uid)
	if sessions != nil {
		sessions.Forget(tunnel.Mount{Cluster: cluster, Name: name, UID: uid})
	}
}

// Run serves until ctx is cancelled, drains in-flight requests, then stops the embedded etcd
// so that everything acknowledged is on disk. A failing embedded etcd stops the server too:
// without storage every request would fail while /livez still looked fine for a while.
func (s *Server) Run(ctx context.Context) error {
	defer s.extra.EmbeddedEtcd.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if etcd := s.extra.EmbeddedEtcd; etcd != nil {
		go func() {
			select {
			case err, ok := <-etcd.Err():
				if ok && err != nil {
					cancel(fmt.Errorf("embedded etcd failed: %w", err))
				}
			case <-ctx.Done():
			}
		}()
	}
	if err := s.GenericAPIServer.PrepareRun().RunWithContext(ctx); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	klog.FromContext(ctx).Info("Server stopped")
	return nil
}

// installSelfReviews serves kubectl auth whoami and can-i (also --list) with this server's
// own authentication and authorizer (pkg/registry/selfreviews).
func installSelfReviews(generic *genericapiserver.GenericAPIServer, authz authorizer.Authorizer, rules authorizer.RuleResolver) error {
	authn := genericapiserver.NewDefaultAPIGroupInfo(authenticationv1.GroupName, Scheme, ParameterCodec, Codecs)
	authn.VersionedResourcesStorageMap[authenticationv1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		selfreviews.SelfSubjectReviews.Resource: selfreviews.NewSubjectReviewREST(),
	}
	authzGroup := genericapiserver.NewDefaultAPIGroupInfo(authorizationv1.GroupName, Scheme, ParameterCodec, Codecs)
	authzGroup.VersionedResourcesStorageMap[authorizationv1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		selfreviews.SelfSubjectAccessReviews.Resource: selfreviews.NewAccessReviewREST(authz),
		selfreviews.SelfSubjectRulesReviews.Resource:  selfreviews.NewRulesReviewREST(rules),
	}
	if err := generic.InstallAPIGroups(&authn, &authzGroup); err != nil {
		return fmt.Errorf("installing the self reviews: %w", err)
	}
	return nil
}

// installOwnCore serves the core v1 resources the standalone server keeps itself: Secrets of
// URL mounts, and Events of its own objects (also as events.k8s.io/v1).
func installOwnCore(server *genericapiserver.GenericAPIServer, getter registrygeneric.RESTOptionsGetter, serveSecrets bool, eventOpts *eventsregistry.Options) error {
	resources := map[string]rest.Storage{}
	if serveSecrets {
		secrets, err := secretsregistry.NewREST(Scheme, getter)
		if err != nil {
			return err
		}
		resources["secrets"] = secrets
	}
	if eventOpts != nil {
		coreEvents, err := eventsregistry.NewREST(Scheme, getter, *eventOpts)
		if err != nil {
			return err
		}
		resources["events"] = coreEvents
		group := genericapiserver.NewDefaultAPIGroupInfo(eventsv1.GroupName, Scheme, ParameterCodec, Codecs)
		group.VersionedResourcesStorageMap[eventsv1.SchemeGroupVersion.Version] = map[string]rest.Storage{"events": eventsregistry.NewEventsREST(coreEvents)}
		if err := server.InstallAPIGroup(&group); err != nil {
			return fmt.Errorf("installing events.k8s.io/v1 Events: %w", err)
		}
	}
	if len(resources) == 0 {
		return nil
	}
	core := genericapiserver.NewDefaultAPIGroupInfo("", Scheme, ParameterCodec, Codecs)
	core.VersionedResourcesStorageMap[CoreV1.Version] = resources
	if err := server.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &core); err != nil {
		return fmt.Errorf("installing core v1: %w", err)
	}
	return nil
}
