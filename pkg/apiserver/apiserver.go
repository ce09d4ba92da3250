package apiserver

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
	mountsregistry "github.com/kcp-dev/mount-apiserver/pkg/registry/mounts"
	secretsregistry "github.com/kcp-dev/mount-apiserver/pkg/registry/secrets"
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

	// Proxier serves mounts/proxy; its Authorizer is filled in from the generic config.
	Proxier *proxy.Proxier
	// Status configures the status controller.
	Status StatusConfig
	// UnboundGC configures the collector of Mounts of unbound logical clusters (kcp mode).
	UnboundGC UnboundGCConfig
	// AdmissionRelay, if set, serves the webhooks registered through renaming mounts.
	AdmissionRelay *AdmissionRelayConfig
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

// Close releases what the configuration started (the embedded etcd). A Server does this itself
// when it stops; call Close only when no Server was built.
func (c *Config) Close() {
	c.Extra.EmbeddedEtcd.Close()
	c.Extra.AdmissionRelay.close()
}

// New builds the server and installs the mounts.kcp.io API group.
func (c CompletedConfig) New() (*Server, error) {
	c.Generic.BuildHandlerChainFunc = checkCABundleEncoding(endLongRunningOnDrain(c.Generic.BuildHandlerChainFunc))
	generic, err := c.Generic.New("mount-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("creating generic apiserver: %w", err)
	}

	proxier := c.Extra.Proxier
	if proxier == nil || proxier.Secrets == nil || proxier.Transports == nil {
		return nil, fmt.Errorf("configuration lacks the proxy (Extra.Proxier with Secrets and Transports)")
	}
	proxier.Authorizer = c.Generic.Authorization.Authorizer
	storage, err := mountsregistry.NewStorage(Scheme, c.Generic.RESTOptionsGetter, proxier.Handler, func(m *mounts.Mount) {
		proxier.Forget(kcp.ClusterOf(m), m.Name, m.UID)
	})
	if err != nil {
		return nil, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(mounts.GroupName, Scheme, ParameterCodec, Codecs)
	group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"mounts":        storage.Mount,
		"mounts/status": storage.Status,
		"mounts/proxy":  storage.Proxy,
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing API group %s: %w", mounts.GroupName, err)
	}

	if c.Extra.ServeSecrets {
		secrets, err := secretsregistry.NewREST(Scheme, c.Generic.RESTOptionsGetter)
		if err != nil {
			return nil, err
		}
		core := genericapiserver.NewDefaultAPIGroupInfo("", Scheme, ParameterCodec, Codecs)
		core.VersionedResourcesStorageMap[CoreV1.Version] = map[string]rest.Storage{"secrets": secrets}
		if err := generic.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &core); err != nil {
			return nil, fmt.Errorf("installing core v1 Secrets: %w", err)
		}
	}

	if err := generic.AddPostStartHook("mount-proxy-transport-expiry", func(hookCtx genericapiserver.PostStartHookContext) error {
		go proxier.Transports.Run(hookCtx)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding post-start hook: %w", err)
	}

	if relay := c.Extra.AdmissionRelay; relay != nil {
		if err := generic.AddPostStartHook("start-admission-relay", startAdmissionRelay(relay, storage, proxier)); err != nil {
			return nil, fmt.Errorf("adding post-start hook: %w", err)
		}
	}

	if c.Extra.Status.Enabled {
		if err := generic.AddPostStartHook("start-mount-status-controller", startStatusController(c.Extra.Status, proxier, c.Extra.HostClient)); err != nil {
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
