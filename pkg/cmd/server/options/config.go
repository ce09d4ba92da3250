package options

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	authenticatorunion "k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
	authorizerunion "k8s.io/apiserver/pkg/authorization/union"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/admission/lending"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	mountapiserver "github.com/kcp-dev/mount-apiserver/pkg/apiserver"
	"github.com/kcp-dev/mount-apiserver/pkg/authentication"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/controller/status"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	generatedopenapi "github.com/kcp-dev/mount-apiserver/pkg/generated/openapi"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
	eventsregistry "github.com/kcp-dev/mount-apiserver/pkg/registry/events"
	"github.com/kcp-dev/mount-apiserver/pkg/rewrite"
	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/peers"
)

// publicPaths may be read without credentials: health and version, as in Kubernetes.
var publicPaths = []string{"/healthz", "/livez", "/readyz", "/version"}

// Config builds the server's configuration. It starts the embedded etcd, if any, and opens the
// secure listener; on error it releases both.
func (o CompletedOptions) Config(ctx context.Context) (_ *mountapiserver.Config, err error) {
	logger := klog.FromContext(ctx)
	cfg := &mountapiserver.Config{Generic: genericapiserver.NewRecommendedConfig(mountapiserver.Codecs)}
	defer func() {
		if err != nil {
			cfg.Close()
		}
	}()

	// The PKI's CA authenticates clients in any case; its serving certificate is used unless
	// --tls-cert-file names another one.
	ca, err := o.EnsurePKI()
	if err != nil {
		return nil, err
	}
	if o.GenerateCerts {
		o.SecureServing.ServerCert.CertKey.CertFile = ca.Path(pki.ServingCertFile)
		o.SecureServing.ServerCert.CertKey.KeyFile = ca.Path(pki.ServingKeyFile)
	}

	// The secure port is bound before the embedded etcd asks the kernel for ports of its own:
	// bound later, the port could already be etcd's (the kernel hands out any free port).
	generic := &cfg.Generic.Config
	if err := o.SecureServing.ApplyTo(&generic.SecureServing, &generic.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("applying serving options: %w", err)
	}

	if o.EmbeddedEtcd {
		etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Options{
			Directory:         filepath.Join(o.RootDirectory, etcdDir),
			StartTimeout:      embeddedEtcdStartTimeout,
			QuotaBackendBytes: o.EmbeddedEtcdQuotaBackendBytes,
		})
		if err != nil {
			return nil, err
		}
		cfg.Extra.EmbeddedEtcd = etcd
		o.Etcd.StorageConfig.Transport.ServerList = []string{etcd.ClientURL}
	}

	// Standalone without --secrets-kubeconfig keeps the Secrets of URL mounts itself, encrypted
	// at rest with a key of its own unless --encryption-provider-config says otherwise.
	cfg.Extra.ServeSecrets = !o.Delegated && o.SecretsKubeconfig == ""
	if cfg.Extra.ServeSecrets && o.Etcd.EncryptionProviderConfigFilepath == "" {
		path := filepath.Join(o.RootDirectory, pki.EncryptionConfigFile)
		if err := pki.EnsureEncryptionConfig(path); err != nil {
			return nil, err
		}
		o.Etcd.EncryptionProviderConfigFilepath = path
	}

	if err := o.ServerRun.ApplyTo(generic); err != nil {
		return nil, fmt.Errorf("applying server options: %w", err)
	}
	if err := o.Etcd.ApplyTo(generic); err != nil {
		return nil, fmt.Errorf("applying etcd options: %w", err)
	}
	if err := o.Audit.ApplyTo(generic); err != nil {
		return nil, fmt.Errorf("applying audit options: %w", err)
	}
	if err := o.Features.ApplyTo(generic, nil, nil); err != nil {
		return nil, fmt.Errorf("applying feature options: %w", err)
	}

	if o.KcpMode || o.Kcp.PathPrefix != "" {
		kcpMode, prefix := o.KcpMode, o.Kcp.PathPrefix
		generic.BuildHandlerChainFunc = func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
			handler := genericapiserver.DefaultBuildHandlerChain(apiHandler, c)
			if kcpMode {
				handler = kcp.WithClusterPaths(handler)
			}
			return kcp.WithPathPrefix(prefix, handler)
		}
	}
	generic.LongRunningFunc = mountapiserver.LongRunning()
	generic.RequestInfoResolver = mountapiserver.NewRequestInfoResolver(genericapiserver.NewRequestInfoResolver(generic))
	policy, err := o.targetPolicy(generic.SecureServing, cfg.Extra.EmbeddedEtcd)
	if err != nil {
		return nil, err
	}
	cfg.Extra.Proxier = &proxy.Proxier{
		Transports: proxy.NewTransports(proxy.TransportOptions{
			ConnectTimeout:       o.ProxyConnectTimeout,
			MaxIdleConnsPerMount: o.ProxyMaxIdleConnsPerMount,
			Policy:               policy,
		}, proxy.DefaultMetrics()),
		Metrics:              proxy.DefaultMetrics(),
		MetricsWithoutMounts: !o.MetricsPerMount,
		MaxHops:              o.ProxyMaxHops,
		MaxUpgrades:          o.ProxyMaxUpgrades,
		// Mounts of one target share a probe result for a third of the probe interval.
		Probes: &proxy.ProbeCache{TTL: o.StatusProbeInterval / 3},
	}
	if o.RewriteDocumentMemoryBudget > 0 {
		cfg.Extra.Proxier.RewriteBudget = rewrite.NewBudget(o.RewriteDocumentMemoryBudget, rewrite.DefaultBudgetWait)
	}
	cfg.Extra.FanOut = mountapiserver.FanOutConfig{MemberTimeout: o.FanOutMemberTimeout}
	sessions := tunnel.NewSessions(tunnel.DefaultMetrics(), o.Tunnel.Limits())
	sessions.MetricsWithoutMounts = !o.MetricsPerMount
	cfg.Extra.Proxier.Tunnels = sessions
	cfg.Extra.Tunnel = mountapiserver.TunnelConfig{Sessions: sessions, AuthorizationInterval: o.Tunnel.AuthorizationInterval, ReplicaName: o.Tunnel.ReplicaName,
		MaxAttaching:         o.Tunnel.MaxAttaching,
		AuthorizationLimiter: flowcontrol.NewTokenBucketRateLimiter(o.Tunnel.AuthorizationQPS, max(1, int(o.Tunnel.AuthorizationQPS)))}
	if err := o.applyKcpWorkspaces(cfg.Extra.Proxier); err != nil {
		return nil, err
	}
	if err := o.applyAdmissionRelay(cfg, ca); err != nil {
		return nil, err
	}
	if cfg.Extra.AdmissionRelay != nil {
		cfg.Extra.AdmissionRelay.Cert = generic.SecureServing.Cert
	}

	namer := openapinamer.NewDefinitionNamer(mountapiserver.Scheme)
	generic.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	generic.OpenAPIConfig.Info.Title = "mount-apiserver"
	generic.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	generic.OpenAPIV3Config.Info.Title = "mount-apiserver"

	cfg.Extra.Status = mountapiserver.StatusConfig{
		Enabled: o.StatusController,
		KcpMode: o.KcpMode,
		Options: status.Options{
			BaseURL:         strings.TrimSuffix(o.ExternalBaseURL, "/"),
			Interval:        o.StatusProbeInterval,
			Workers:         o.StatusWorkers,
			ProbesPerSecond: o.StatusProbesQPS,
		},
		LeaderElection: o.LeaderElection,
	}
	if !o.Delegated && !o.KcpMode {
		// Without a host cluster, the server keeps the Events of its own objects itself. In
		// kcp mode the Mounts live in logical clusters, which are served nothing but their
		// mounts.kcp.io API.
		cfg.Extra.Events = &eventsregistry.Options{TTL: o.EventTTL, MaxCount: o.MaxEvents}
		cfg.Extra.Status.OwnEvents = true
	}
	// Workspace and Redirect mounts are Ready when the workspace the proxy resolves is.
	cfg.Extra.Status.Workspaces = cfg.Extra.Proxier.Workspaces
	if cfg.Extra.Status.BaseURL == "" {
		cfg.Extra.Status.BaseURL = o.serverURL(generic.SecureServing.Listener.Addr())
	}
	if o.KcpMode && o.Kcp.APIExportURL != "" && o.Kcp.UnboundGCInterval > 0 {
		kcpConfig, err := o.kcpConfig()
		if err != nil {
			return nil, err
		}
		vw, err := o.apiExportConfig(kcpConfig)
		if err != nil {
			return nil, err
		}
		bindings, err := kcp.NewAPIExportBindings(vw, o.Kcp.APIExportURL)
		if err != nil {
			return nil, fmt.Errorf("--kcp-apiexport-url: %w", err)
		}
		cfg.Extra.UnboundGC = mountapiserver.UnboundGCConfig{Bindings: bindings, Interval: o.Kcp.UnboundGCInterval, LeaderElection: o.LeaderElection}
	}

	if o.Delegated {
		if err := o.applyDelegated(cfg, ca); err != nil {
			return nil, err
		}
		if !o.KcpMode {
			// Agents that are the host's ServiceAccounts lose their sessions with them.
			cfg.Extra.Tunnel.ServiceAccounts = cfg.Extra.HostClient.CoreV1()
		}
		secretsAuthz, err := lending.SecretReviews(cfg.Extra.HostClient.AuthorizationV1())
		if err != nil {
			return nil, err
		}
		if err := o.applySecrets(ctx, cfg, cfg.Extra.HostClient, secretsAuthz, policy); err != nil {
			return nil, err
		}
		logger.Info("Running as an aggregated API server", "kubeconfig", o.Kubeconfig, "inCluster", o.InCluster)
		return cfg, nil
	}

	if err := applyStandaloneAuth(generic, ca); err != nil {
		return nil, err
	}
	// Whoever holds the Secrets of URL mounts decides who may lend them: this server itself,
	// or the cluster of --secrets-kubeconfig.
	secretsAuthz := generic.Authorization.Authorizer
	var secretsClient kubernetes.Interface
	if cfg.Extra.ServeSecrets {
		if secretsClient, err = kubernetes.NewForConfig(generic.LoopbackClientConfig); err != nil {
			return nil, fmt.Errorf("creating loopback client: %w", err)
		}
	} else {
		secretsConfig, err := clientcmd.BuildConfigFromFlags("", o.SecretsKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading --secrets-kubeconfig %s: %w", o.SecretsKubeconfig, err)
		}
		if secretsClient, err = kubernetes.NewForConfig(secretsConfig); err != nil {
			return nil, fmt.Errorf("creating client of --secrets-kubeconfig: %w", err)
		}
		if secretsAuthz, err = lending.SecretReviews(secretsClient.AuthorizationV1()); err != nil {
			return nil, err
		}
	}
	if err := o.applySecrets(ctx, cfg, secretsClient, secretsAuthz, policy); err != nil {
		return nil, err
	}
	cfg.Extra.AdminKubeconfig = filepath.Join(o.RootDirectory, AdminKubeconfigFile)
	if err := ca.WriteAdminKubeconfig(cfg.Extra.AdminKubeconfig, o.serverURL(generic.SecureServing.Listener.Addr()), o.GenerateCerts); err != nil {
		return nil, err
	}
	logger.Info("Wrote admin kubeconfig", "path", cfg.Extra.AdminKubeconfig)
	return cfg, nil
}

// EnsurePKI creates the generated PKI under the certificate directory if it is not there yet
// (the CA and a serving certificate for the serving hosts) and returns it.
func (o CompletedOptions) EnsurePKI() (*pki.PKI, error) {
	hosts, ips := o.servingHosts()
	ca, err := pki.Ensure(o.SecureServing.ServerCert.CertDirectory, hosts, ips)
	if err != nil {
		return nil, fmt.Errorf("preparing certificates in %s: %w", o.SecureServing.ServerCert.CertDirectory, err)
	}
	return ca, nil
}

// targetCheck checks, at admission, the target that a URL mount's Secret names. A Secret that
// is not there (yet), or holds no usable kubeconfig, passes: the proxy checks whatever it
// holds later.
func targetCheck(secrets proxy.SecretSource, policy *targetpolicy.Policy) lending.TargetCheck {
	return func(ctx context.Context, m *mounts.Mount) field.ErrorList {
		secret, err := secrets.GetSecret(ctx, m.Spec.Ref.Namespace, m.Spec.Ref.Name)
		if err != nil {
			return nil
		}
		data, ok := secret.Data[v1alpha1.SecretKeyKubeconfig]
		if !ok {
			return nil
		}
		// Only the policy's refusals: a kubeconfig that does not parse is the status's to
		// report, and may be fixed after the mount was created.
		var refused field.ErrorList
		for _, err := range policy.ValidateKubeconfig(field.NewPath("spec", "ref"), data) {
			if err.Type == field.ErrorTypeForbidden {
				refused = append(refused, err)
			}
		}
		return refused
	}
}

// targetPolicy is the proxy's target policy: the operator's lists, and this server's own
// endpoints (the secure port, the embedded etcd's client and peer listeners, which serve
// plain http on loopback) and serving certificates, which no mount may reach.
func (o CompletedOptions) targetPolicy(serving *genericapiserver.SecureServingInfo, etcd *embeddedetcd.Server) (*targetpolicy.Policy, error) {
	allowed, err := targetpolicy.ParseRules(o.ProxyAllowedTargets)
	if err != nil {
		return nil, fmt.Errorf("--proxy-allowed-targets: %w", err)
	}
	denied, err := targetpolicy.ParseRules(o.ProxyDeniedTargets)
	if err != nil {
		return nil, fmt.Errorf("--proxy-denied-targets: %w", err)
	}
	var own []netip.AddrPort
	if serving == nil || serving.Listener == nil {
		return nil, fmt.Errorf("the target policy needs the secure listener, which is not open")
	}
	if tcp, ok := serving.Listener.Addr().(*net.TCPAddr); ok {
		own = append(own, tcp.AddrPort())
	}
	if etcd != nil {
		for _, u := range []string{etcd.ClientURL, etcd.PeerURL} {
			parsed, err := url.Parse(u)
			if err != nil {
				return nil, fmt.Errorf("embedded etcd URL %q: %w", u, err)
			}
			ap, err := netip.ParseAddrPort(parsed.Host)
			if err != nil {
				return nil, fmt.Errorf("embedded etcd URL %q: %w", u, err)
			}
			own = append(own, ap)
		}
	}
	return targetpolicy.New(targetpolicy.Config{
		AllowPlainHTTP:  o.ProxyAllowPlainHTTP,
		Allowed:         allowed,
		Denied:          denied,
		OwnEndpoints:    own,
		OwnCertificates: servingCertificates(serving),
	}), nil
}

// servingCertificates returns the leaf certificates (DER) the server serves at the time of
// the call: the main one and the SNI ones, the loopback client's included. Read on each TLS
// handshake to a target, so rotated certificates count from the next one on.
func servingCertificates(serving *genericapiserver.SecureServingInfo) func() [][]byte {
	return func() [][]byte {
		var leaves [][]byte
		add := func(p dynamiccertificates.CertKeyContentProvider) {
			if p == nil {
				return
			}
			certPEM, _ := p.CurrentCertKeyContent()
			if block, _ := pem.Decode(certPEM); block != nil && block.Type == "CERTIFICATE" {
				leaves = append(leaves, block.Bytes)
			}
		}
		add(serving.Cert)
		for _, sni := range serving.SNICerts {
			add(sni)
		}
		return leaves
	}
}

// applyDelegated makes the server an aggregated server of its host: TokenReview and
// requestheader authentication (CAs from kube-system/extension-apiserver-authentication,
// reloaded when they rotate), SubjectAccessReview authorization.
func (o CompletedOptions) applyDelegated(cfg *mountapiserver.Config, ca *pki.PKI) error {
	generic := &cfg.Generic.Config
	if err := o.Authentication.ApplyTo(&generic.Authentication, generic.SecureServing, generic.OpenAPIConfig); err != nil {
		return fmt.Errorf("applying delegated authentication options: %w", err)
	}
	if err := o.reviewTokensWithoutBodies(&generic.Authentication); err != nil {
		return err
	}
	// Client certificates are verified once per connection and TTL, like tokens are reviewed.
	if generic.Authentication.Authenticator != nil {
		generic.Authentication.Authenticator = authentication.CachingCertificates(generic.Authentication.Authenticator,
			generic.Authentication.RequestHeaderConfig, o.Authentication.CacheTTL)
	}
	if err := o.Authorization.ApplyTo(&generic.Authorization); err != nil {
		return fmt.Errorf("applying delegated authorization options: %w", err)
	}
	// The client CAs come from a ConfigMap through an informer that syncs only after serving
	// starts; until then TLS asks for certificates of no CA, clients send none and are served
	// (and, over a kept HTTP/2 connection, stay) anonymous. Not ready until they are loaded.
	if clientCA := generic.SecureServing.ClientCA; clientCA != nil {
		generic.AddReadyzChecks(healthz.NamedCheck("delegated-client-ca", func(*http.Request) error {
			if len(clientCA.CurrentCABundleContent()) == 0 {
				return fmt.Errorf("client CAs of kube-system/extension-apiserver-authentication are not loaded yet")
			}
			return nil
		}))
	}
	hostConfig, err := o.hostConfig()
	if err != nil {
		return err
	}
	if cfg.Extra.HostClient, err = kubernetes.NewForConfig(hostConfig); err != nil {
		return fmt.Errorf("creating host cluster client: %w", err)
	}
	// The Lease and the Events get clients (and rate limiters) of their own: see
	// StatusConfig.LeaseClient and EventsClient.
	if cfg.Extra.Status.LeaseClient, err = kubernetes.NewForConfig(rest.CopyConfig(hostConfig)); err != nil {
		return fmt.Errorf("creating host cluster client of the leader election: %w", err)
	}
	if cfg.Extra.Status.EventsClient, err = kubernetes.NewForConfig(rest.CopyConfig(hostConfig)); err != nil {
		return fmt.Errorf("creating host cluster client of the events: %w", err)
	}
	if o.ExternalBaseURL == "" {
		// Users reach the mounts through the host's aggregator.
		cfg.Extra.Status.BaseURL = strings.TrimSuffix(hostConfig.Host, "/")
	}
	if o.APIServiceName != "" {
		cfg.Extra.APIServiceName = o.APIServiceName
		cfg.Extra.APIServiceCABundle = ca.CACertPEM
	}
	if sessions := cfg.Extra.Tunnel.Sessions; sessions != nil {
		if cfg.Extra.TunnelPeers, err = o.tunnelPeers(hostConfig, cfg.Extra.HostClient, generic.SecureServing.Listener.Addr(), ca); err != nil {
			return err
		}
		tp := cfg.Extra.TunnelPeers
		tp.Relay.Local = sessions
		// Sessions held here first, then the replica that holds the mount's.
		cfg.Extra.Proxier.Tunnels = &peers.Dialer{Local: sessions, Owners: tp.Owners, Hop: tp.Hop}
	}
	return nil
}

// tunnelPeers sets up how replicas reach tunnel sessions held by each other: Leases in the
// namespace of the leader election, this replica's peer URL, and the hop, verified with
// --tunnel-peer-ca-file or the CA of generated serving certificates.
func (o CompletedOptions) tunnelPeers(hostConfig *rest.Config, host kubernetes.Interface, addr net.Addr, ca *pki.PKI) (*mountapiserver.TunnelPeersConfig, error) {
	peerURL, err := o.peerURL(addr)
	if err != nil {
		return nil, err
	}
	owners, err := peers.NewOwners(peers.OwnersConfig{
		// The status controller's Lease client has its own rate limiter too; the sessions'
		// renewals share this one, bounded by --tunnel-lease-renewals-qps.
		Client:            host,
		Namespace:         o.LeaderElection.ResourceNamespace,
		Identity:          o.Tunnel.ReplicaName + "_" + uuid.NewString(),
		PeerURL:           peerURL,
		RenewalsPerSecond: o.TunnelPeers.LeaseRenewalsQPS,
	})
	if err != nil {
		return nil, err
	}
	tp := &mountapiserver.TunnelPeersConfig{Owners: owners, Relay: &peers.Relay{Metrics: peers.DefaultMetrics()}}
	// The relay believes no authenticator of the handler chain: a hop's token is reviewed by
	// the host, and must be the replicas' own (peers.Relay).
	review, err := o.tokenReviewer()
	if err != nil {
		return nil, err
	}
	if review != nil {
		tp.Relay.Authenticator = authentication.BearerTokens(review, o.Authentication.CacheTTL)
	}
	var cas *x509.CertPool
	switch {
	case o.TunnelPeers.PeerCAFile != "":
		if cas, err = peers.LoadCAFile(o.TunnelPeers.PeerCAFile); err != nil {
			return nil, fmt.Errorf("--tunnel-peer-ca-file: %w", err)
		}
	case o.GenerateCerts:
		if cas, err = peers.ParseCAs(ca.CACertPEM); err != nil {
			return nil, fmt.Errorf("the CA of the generated serving certificates: %w", err)
		}
	}
	if cas != nil {
		if tp.Hop, err = peers.NewHop(hostConfig, cas, o.TunnelPeers.PeerServerName, 0, peers.DefaultMetrics()); err != nil {
			return nil, err
		}
	}
	return tp, nil
}

// peerURL is --tunnel-peer-url, or https://<advertise address>:<secure port>.
func (o CompletedOptions) peerURL(addr net.Addr) (string, error) {
	if o.TunnelPeers.PeerURL != "" {
		return strings.TrimSuffix(o.TunnelPeers.PeerURL, "/"), nil
	}
	// The advertise address, else the bound one (loopback included: then only replicas on
	// this host are peers), else the address of the default route's interface.
	host := o.ServerRun.AdvertiseAddress
	if host == nil || host.IsUnspecified() {
		host = o.SecureServing.BindAddress
	}
	if host == nil || host.IsUnspecified() {
		var err error
		if host, err = o.SecureServing.DefaultExternalAddress(); err != nil {
			return "", fmt.Errorf("deriving --tunnel-peer-url (set it, or --advertise-address): %w", err)
		}
	}
	port := o.SecureServing.BindPort
	if tcp, ok := addr.(*net.TCPAddr); ok {
		port = tcp.Port
	}
	return "https://" + net.JoinHostPort(host.String(), strconv.Itoa(port)), nil
}

// hostConfig is the client configuration of the host cluster: --kubeconfig, or the pod's
// service account in a cluster.
func (o CompletedOptions) hostConfig() (*rest.Config, error) {
	var c *rest.Config
	var err error
	if o.Kubeconfig != "" {
		if c, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig); err != nil {
			return nil, fmt.Errorf("loading --kubeconfig %s: %w", o.Kubeconfig, err)
		}
	} else if c, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("loading in-cluster config: %w", err)
	}
	// Every create and reference change of a URL mount costs a SubjectAccessReview through this
	// client, every agent's attach a ServiceAccount read and a Lease write: client-go's default
	// 5 QPS would make the host client the bottleneck of the whole server.
	c.QPS, c.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	return c, nil
}

// standaloneCertCacheTTL is how long a verified client certificate is remembered in standalone
// mode. Its CA never changes while the server runs; the bound only keeps the cache fresh.
const standaloneCertCacheTTL = time.Minute

// applyStandaloneAuth authenticates clients by certificates of the standalone CA and
// authorizes by the built-in groups (pkg/authorization), plus anonymous reads of the public
// paths.
func applyStandaloneAuth(c *genericapiserver.Config, ca *pki.PKI) error {
	clientCA, err := dynamiccertificates.NewStaticCAContent("mount-apiserver-client-ca", ca.CACertPEM)
	if err != nil {
		return fmt.Errorf("loading client CA: %w", err)
	}
	c.SecureServing.ClientCA = clientCA

	conditions := make([]apiserver.AnonymousAuthCondition, 0, len(publicPaths))
	for _, p := range publicPaths {
		conditions = append(conditions, apiserver.AnonymousAuthCondition{Path: p})
	}
	// Certificate users are in system:authenticated, as every Kubernetes authenticator puts
	// them: reviews sent elsewhere (kcp, --secrets-kubeconfig's cluster) see the same user
	// that a delegated server would have sent.
	c.Authentication.Authenticator = authentication.CachingCertificates(authenticatorunion.New(
		group.NewAuthenticatedGroupAdder(x509request.NewDynamic(clientCA.VerifyOptions, x509request.CommonNameUserConversion)),
		anonymous.NewAuthenticator(conditions),
	), nil, standaloneCertCacheTTL)

	public, err := path.NewAuthorizer(publicPaths)
	if err != nil {
		return fmt.Errorf("creating public path authorizer: %w", err)
	}
	c.Authorization.Authorizer, err = authorizerunion.New(
		authorizerunion.NamedAuthorizer{AuthorizerName: "public-paths", Authorizer: public},
		authorizerunion.NamedAuthorizer{AuthorizerName: "standalone-groups", Authorizer: authorization.Standalone{}},
	)
	if err != nil {
		return fmt.Errorf("creating authorizer: %w", err)
	}
	// kubectl auth can-i --list (SelfSubjectRulesReview) lists the groups' rights.
	c.RuleResolver = authorization.Standalone{}
	return nil
}

// applySecrets sets where URL mounts' Secrets come from (the given client's cluster, and in
// kcp mode the consumer workspaces), and the admission that checks who may lend them. It
// comes last: kcp mode wraps the authentication and authorization set up before.
func (o CompletedOptions) applySecrets(ctx context.Context, cfg *mountapiserver.Config, secrets kubernetes.Interface, secretsAuthz authorizer.Authorizer, policy *targetpolicy.Policy) error {
	generic := &cfg.Generic.Config
	clientFor, secretsAuthz, err := o.applyKcp(generic, secrets, secretsAuthz)
	if err != nil {
		return err
	}
	cfg.Extra.Proxier.Secrets = proxy.NewClusterWatchedSecrets(ctx, clientFor, proxy.DefaultSecretIdleTimeout)
	if generic.AdmissionControl, err = lending.New(generic.Authorization.Authorizer, secretsAuthz, targetCheck(cfg.Extra.Proxier.Secrets, policy)); err != nil {
		return err
	}
	// kubectl auth whoami and can-i work for every caller, in every mode.
	generic.Authorization.Authorizer = authorization.WithSelfReviews(generic.Authorization.Authorizer)
	// A Mount that names its agent decides who attaches to it, before any delegate.
	cfg.Extra.Tunnel.NamedAgents = &authorization.NamedAgents{}
	generic.Authorization.Authorizer = authorization.WithNamedAgents(cfg.Extra.Tunnel.NamedAgents, generic.Authorization.Authorizer)
	return nil
}

// serverURL is the URL clients on this host use: the bound address, or loopback when bound to
// all addresses.
func (o CompletedOptions) serverURL(addr net.Addr) string {
	host := "127.0.0.1"
	if bind := o.SecureServing.BindAddress; bind != nil && !bind.IsUnspecified() {
		host = bind.String()
	}
	port := o.SecureServing.BindPort
	if tcp, ok := addr.(*net.TCPAddr); ok {
		port = tcp.Port
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(port))
}
