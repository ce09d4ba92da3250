package options

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	cliflag "k8s.io/component-base/cli/flag"
	componentbaseconfig "k8s.io/component-base/config"
	componentbaseoptions "k8s.io/component-base/config/options"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	netutils "k8s.io/utils/net"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/apiserver"
	"github.com/kcp-dev/mount-apiserver/pkg/fanout"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/peers"
)

// Defaults of the standalone mode.
const (
	DefaultRootDirectory = ".mount-apiserver"
	DefaultSecurePort    = 6443
	DefaultEtcdPrefix    = "/mount-apiserver"

	// AdminKubeconfigFile is written below the root directory in standalone mode.
	AdminKubeconfigFile = "admin.kubeconfig"
	pkiDir              = "pki"
	etcdDir             = "etcd"
)

// DefaultShutdownWatchTerminationGracePeriod bounds how long a stopping server waits for its
// watches to end; artifacts/apiservice/deployment.yaml's terminationGracePeriodSeconds allows
// for it.
const DefaultShutdownWatchTerminationGracePeriod = 5 * time.Second

// DefaultProxyMaxUpgrades bounds upgraded sessions (up to 250 KB each, measured: two
// connections, their TLS and copy buffers, four goroutines) to some 250 MB.
const DefaultProxyMaxUpgrades = 1000

// DefaultRewriteDocumentMemoryBudget bounds the memory of renaming mounts' rewrites of whole
// discovery and OpenAPI documents, server-wide: a document is held once, and twice while it
// is read, so two of the largest (64 MiB) fit at once, or some thirty /openapi/v2 of a cluster
// without CRDs (4 MiB).
const DefaultRewriteDocumentMemoryBudget = 256 << 20

// DefaultMaxEvents bounds the Events a standalone server keeps: a few for each of some hundred
// mounts, each at most some 2 KB.
const DefaultMaxEvents = 1000

// Options are the command-line options of mount-apiserver.
type Options struct {
	// RootDirectory holds the embedded etcd's data, the generated PKI and the admin kubeconfig.
	RootDirectory string
	// KubeAPIQPS and KubeAPIBurst bound the server's main client of the host cluster (delegated
	// mode): ServiceAccount reads and Lease writes of agents' sessions, SubjectAccessReviews of
	// lending, Secret watches. The leader election and the Events have limiters of their own at
	// the same rate.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// EmbeddedEtcdQuotaBackendBytes limits the embedded etcd's size; 0 takes etcd's default.
	EmbeddedEtcdQuotaBackendBytes int64
	// Kubeconfig names the host cluster. Set, or running in a pod, the server is an aggregated
	// server of that host: it delegates authentication and authorization to it.
	Kubeconfig string
	// APIServiceName is the APIService whose caBundle the server keeps set to its own CA.
	APIServiceName string
	// ServingCertHosts are extra names and IPs for the generated serving certificate.
	ServingCertHosts []string
	// SecretsKubeconfig names the cluster that holds the Secrets Mounts reference, in
	// standalone mode; in delegated mode the host holds them.
	SecretsKubeconfig string
	// ProxyConnectTimeout bounds dial plus TLS handshake to targets of mounts that set none.
	ProxyConnectTimeout time.Duration
	// ProxyMaxIdleConnsPerMount bounds idle connections kept to one target.
	ProxyMaxIdleConnsPerMount int
	// ProxyMaxHops bounds how many mount proxies one request may pass.
	ProxyMaxHops int
	// ProxyMaxUpgrades bounds the upgraded sessions open at once through the proxy (0: none).
	ProxyMaxUpgrades int
	// RewriteDocumentMemoryBudget bounds, in bytes, the memory that renaming mounts' rewrites
	// of whole discovery and OpenAPI documents hold at once (0: each document's own bound only).
	RewriteDocumentMemoryBudget int64
	// FanOutMemberTimeout bounds each mount's answer to a request across mounts (mounts/*/proxy).
	FanOutMemberTimeout time.Duration
	// EventTTL is how long the standalone server keeps an Event of its own objects.
	EventTTL time.Duration
	// MaxEvents bounds the Events the standalone server keeps.
	MaxEvents int
	// KcpMode serves cluster-aware paths, /clusters/<logical-cluster>/... and /clusters/*/...
	KcpMode bool
	// Kcp says how to meet kcp in kcp mode.
	Kcp KcpOptions
	// Tunnel configures agents' reverse tunnels.
	Tunnel TunnelOptions
	// ProxyAllowedTargets, if not empty, are the only targets mounts may name: CIDRs, IPs and
	// host names ("*.example.com" for the names below), each but CIDRs with an optional port.
	ProxyAllowedTargets []string
	// ProxyDeniedTargets are targets mounts may never name, in the same form; deny wins.
	ProxyDeniedTargets []string
	// ProxyAllowPlainHTTP lets mounts name http:// targets; their credentials then travel
	// unencrypted.
	ProxyAllowPlainHTTP bool
	// ExternalBaseURL is the externally reachable base URL under which status.URL names each
	// mount's proxy; empty derives it (the host's server URL, or this server's own URL).
	ExternalBaseURL string
	// StatusProbeInterval is how often healthy mounts are probed.
	StatusProbeInterval time.Duration
	// StatusWorkers bounds concurrent probes.
	StatusWorkers int
	// StatusProbesQPS bounds the probes of healthy mounts per second, all together.
	StatusProbesQPS float64
	// MetricsPerMount labels the proxy's and tunnels' metric series by mount.
	MetricsPerMount bool
	// StatusController runs the status controller in this process.
	StatusController bool
	// LeaderElection elects the replica that writes status (delegated mode).
	LeaderElection componentbaseconfig.LeaderElectionConfiguration
	// TunnelPeers says how replicas reach tunnel sessions held by each other (delegated mode).
	TunnelPeers *peers.Options
	// AdmissionRelay serves the webhooks registered through renaming mounts.
	AdmissionRelay AdmissionRelayOptions

	ServerRun     *genericoptions.ServerRunOptions
	SecureServing *genericoptions.SecureServingOptionsWithLoopback
	Etcd          *genericoptions.EtcdOptions
	Audit         *genericoptions.AuditOptions
	Features      *genericoptions.FeatureOptions
	Logs          *logs.Options

	// Used in delegated mode only.
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions
}

// DefaultServingCertHosts are the names under which the Kubernetes aggregator reaches the
// server as deployed by artifacts/apiservice: it verifies the certificate against
// <service>.<namespace>.svc.
var DefaultServingCertHosts = []string{"mount-apiserver.mount-apiserver.svc", "mount-apiserver.mount-apiserver.svc.cluster.local"}

// NewOptions returns the options of the standalone default: embedded etcd in
// .mount-apiserver, serving on 127.0.0.1:6443.
func NewOptions() *Options {
	o := &Options{
		RootDirectory: DefaultRootDirectory,
		ServerRun:     genericoptions.NewServerRunOptions(),
		SecureServing: genericoptions.NewSecureServingOptions().WithLoopback(),
		Etcd: genericoptions.NewEtcdOptions(storagebackend.NewDefaultConfig(DefaultEtcdPrefix,
			apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion, apiserver.CoreV1))),
		Audit:            genericoptions.NewAuditOptions(),
		Features:         genericoptions.NewFeatureOptions(),
		Logs:             logs.NewOptions(),
		Authentication:   genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:    genericoptions.NewDelegatingAuthorizationOptions(),
		ServingCertHosts: append([]string(nil), DefaultServingCertHosts...),

		ProxyConnectTimeout:         10 * time.Second,
		ProxyMaxIdleConnsPerMount:   16,
		ProxyMaxHops:                proxy.DefaultMaxHops,
		ProxyMaxUpgrades:            DefaultProxyMaxUpgrades,
		RewriteDocumentMemoryBudget: DefaultRewriteDocumentMemoryBudget,
		FanOutMemberTimeout:         fanout.DefaultMemberTimeout,
		EventTTL:                    time.Hour,
		MaxEvents:                   DefaultMaxEvents,
		StatusProbeInterval:         30 * time.Second,
		StatusWorkers:               16,
		StatusProbesQPS:             100,
		MetricsPerMount:             true,
		KubeAPIQPS:                  100,
		KubeAPIBurst:                200,
		StatusController:            true,
		Kcp:                         NewKcpOptions(),
		Tunnel:                      NewTunnelOptions(),
		TunnelPeers:                 peers.NewOptions(),
		LeaderElection: componentbaseconfig.LeaderElectionConfiguration{
			LeaderElect:       true,
			LeaseDuration:     metav1.Duration{Duration: 15 * time.Second},
			RenewDeadline:     metav1.Duration{Duration: 10 * time.Second},
			RetryPeriod:       metav1.Duration{Duration: 2 * time.Second},
			ResourceLock:      "leases",
			ResourceName:      "mount-apiserver-status",
			ResourceNamespace: "mount-apiserver",
		},
	}
	o.Authorization.AlwaysAllowPaths = append(o.Authorization.AlwaysAllowPaths, "/version")
	o.SecureServing.BindAddress = netutils.ParseIPSloppy("127.0.0.1")
	o.SecureServing.BindPort = DefaultSecurePort
	o.SecureServing.ServerCert.PairName = "serving"
	// Empty means <root-directory>/pki, known only once flags are parsed.
	o.SecureServing.ServerCert.CertDirectory = ""
	// Priority and fairness keeps its configuration in a Kubernetes API, which standalone
	// mode does not have; max-in-flight limits protect the server instead.
	o.Features.EnablePriorityAndFairness = false
	// Without a grace period, watches are not ended when the server stops, and each open one
	// holds the shutdown for --request-timeout (60 s).
	o.ServerRun.ShutdownWatchTerminationGracePeriod = DefaultShutdownWatchTerminationGracePeriod
	o.Etcd.StorageConfig.Transport.ServerList = nil
	return o
}

// Flags returns the options as named flag sets, for grouped --help output.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("mount-apiserver")
	fs.StringVar(&o.RootDirectory, "root-directory", o.RootDirectory,
		"Directory for the embedded etcd's data, the generated certificates and admin.kubeconfig. Relative paths are resolved against the working directory.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"Kubeconfig of the host cluster. With it (or when running in a pod), mount-apiserver runs as an aggregated API server of that cluster: authentication and authorization are delegated to it. Without it, standalone mode.")
	fs.StringVar(&o.APIServiceName, "apiservice-name", o.APIServiceName,
		"Name of the APIService (e.g. v1alpha1.mounts.kcp.io) whose spec.caBundle the server sets to the CA of its generated serving certificate at start-up. Delegated mode only; empty leaves the APIService alone.")
	fs.StringSliceVar(&o.ServingCertHosts, "serving-cert-hosts", o.ServingCertHosts,
		"DNS names and IPs, besides localhost and loopback, that the generated serving certificate covers. The aggregator verifies <service>.<namespace>.svc.")
	fs.StringVar(&o.SecretsKubeconfig, "secrets-kubeconfig", o.SecretsKubeconfig,
		"Standalone mode: kubeconfig of another cluster that holds the Secrets (key \"kubeconfig\") that URL mounts reference; referencing one needs get on it there. Without it, the server keeps these Secrets itself as core v1 Secrets, encrypted at rest. In delegated mode the host cluster holds them.")
	fs.DurationVar(&o.ProxyConnectTimeout, "proxy-connect-timeout", o.ProxyConnectTimeout,
		"Bound of dial plus TLS handshake to a mount's target, for mounts without spec.timeouts.connectSeconds.")
	fs.IntVar(&o.ProxyMaxIdleConnsPerMount, "proxy-max-idle-conns-per-mount", o.ProxyMaxIdleConnsPerMount,
		"Idle connections kept open to one mount's target.")
	fs.IntVar(&o.ProxyMaxHops, "proxy-max-hops", o.ProxyMaxHops,
		"How many mount proxies (of this or other mount-apiservers) one request may pass, counted in the "+proxy.HopsHeader+" header; a request beyond is refused with 508. Bounds loops through mounts whose target leads back to a mount proxy.")
	fs.IntVar(&o.ProxyMaxUpgrades, "proxy-max-upgrades", o.ProxyMaxUpgrades,
		"How many upgraded sessions (exec, attach, port-forward through mounts) may be open at once; one more is refused with 429 until one ends. 0: no bound. Each holds two connections, four goroutines and up to 250 KB.")
	fs.Int64Var(&o.RewriteDocumentMemoryBudget, "rewrite-document-memory-budget", o.RewriteDocumentMemoryBudget,
		"Bytes of memory that renaming mounts (spec.rewrites) may hold at once, server-wide, to rewrite discovery and OpenAPI documents, which are read whole (each at most 64 MiB, held twice while it is read). A request that finds no room waits up to 5s, then is answered 503 with Retry-After; a document that needs more than the whole budget is answered 502. 0: no budget, only each document's bound.")
	fs.DurationVar(&o.FanOutMemberTimeout, "fanout-member-timeout", o.FanOutMemberTimeout,
		"How long each mount may take to answer a request across mounts (mounts/*/proxy): a list whole, a watch its start. A mount slower than this is left out and named in a Warning; the others answer within it.")
	fs.DurationVar(&o.EventTTL, "event-ttl", o.EventTTL,
		"Standalone mode: how long the server keeps an Event of its own objects (a mount's phase changes, shown by kubectl describe mount) after it last happened. With a host cluster, the host keeps them.")
	fs.IntVar(&o.MaxEvents, "max-events", o.MaxEvents,
		"Standalone mode: how many Events the server keeps at most; when there are as many, the oldest tenth is removed before the next is written.")
	fs.BoolVar(&o.KcpMode, "kcp-mode", o.KcpMode,
		"Serve cluster-aware paths as kcp's APIExport virtual storage forwards them: /clusters/<logical-cluster>/apis/mounts.kcp.io/... for every verb, and /clusters/*/... to list and watch across logical clusters. See docs/kcp-mode.md.")
	fs.StringSliceVar(&o.ProxyAllowedTargets, "proxy-allowed-targets", o.ProxyAllowedTargets,
		"If set, the only targets mounts may name: CIDRs (10.0.0.0/8), IPs (10.1.2.3, fd00::1), host names (api.example.com) and *.domain for the names below it (*.example.com), each but CIDRs with an optional :port. A name is allowed on whatever it resolves to (unless denied), an address when the connection goes there. Empty: every target not denied.")
	fs.StringSliceVar(&o.ProxyDeniedTargets, "proxy-denied-targets", o.ProxyDeniedTargets,
		"Targets mounts may never name, in the form of --proxy-allowed-targets; checked on the name and on every address connected to, and winning over --proxy-allowed-targets. Link-local and cloud metadata addresses and this server's own endpoints and certificate are always denied.")
	fs.BoolVar(&o.ProxyAllowPlainHTTP, "proxy-allow-plain-http", o.ProxyAllowPlainHTTP,
		"Let mounts name http:// targets. Their credentials then travel unencrypted; off, only https targets are served.")
	fs.StringVar(&o.ExternalBaseURL, "external-base-url", o.ExternalBaseURL,
		"Externally reachable base URL of the mount proxies; status.URL is <base>/apis/mounts.kcp.io/v1alpha1/mounts/<name>/proxy. Defaults to the host cluster's server URL from --kubeconfig in delegated mode, and to this server's URL in standalone mode.")
	fs.DurationVar(&o.StatusProbeInterval, "status-probe-interval", o.StatusProbeInterval,
		"How often the status controller probes a healthy mount's target (with 20% jitter); failing targets are retried with per-mount backoff.")
	fs.IntVar(&o.StatusWorkers, "status-workers", o.StatusWorkers, "Concurrent probes of the status controller.")
	fs.Float64Var(&o.StatusProbesQPS, "status-probes-qps", o.StatusProbesQPS,
		"Probes per second of healthy mounts at most, all together: up to --status-probe-interval x this many mounts, each is probed every --status-probe-interval; past that each less often (10,000 mounts at 100: every 100 s; probes more than 90 s apart close their connection after them, since a Kubernetes API server closes it before the next one). Requests through a mount and its agent's coming and going still move its status at once. 0: no bound.")
	fs.BoolVar(&o.MetricsPerMount, "metrics-per-mount", o.MetricsPerMount,
		"Label the series of mount_proxy_* and mount_tunnel_* by mount: about 20 series for an idle tunnel mount, more for each verb and code of the requests through a mount. false: one set of series for all mounts (the mount label empty), for fleets whose Prometheus should not hold series per mount.")
	fs.BoolVar(&o.StatusController, "status-controller", o.StatusController, "Run the status controller, which probes every mount and writes its status. Turn it off where another process writes status.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS,
		"Delegated mode: requests per second the server sends the host cluster through its main client: agents' attaches (a ServiceAccount read and a Lease write each) and re-checks, Lease renewals of tunnel sessions, SubjectAccessReviews of lending, Secret reads. Raise it with the host's capacity to reconnect large fleets faster: a reconnect storm of 10,000 agents is paced by it (docs/tunnel-scale.md). The leader election and the Events have limiters of their own at this rate.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst,
		"Delegated mode: burst of --kube-api-qps, the requests sent at once after a quiet time.")
	fs.Int64Var(&o.EmbeddedEtcdQuotaBackendBytes, "embedded-etcd-quota-backend-bytes", o.EmbeddedEtcdQuotaBackendBytes,
		"Size limit of the embedded etcd's database in bytes; 0 takes etcd's default (2 GiB). Ignored with --etcd-servers.")
	o.Kcp.AddFlags(fss.FlagSet("kcp"))
	o.Tunnel.AddFlags(fss.FlagSet("tunnel"))
	o.TunnelPeers.AddFlags(fss.FlagSet("tunnel"))
	o.AdmissionRelay.AddFlags(fss.FlagSet("admission relay"))
	o.ServerRun.AddUniversalFlags(fss.FlagSet("generic"))
	o.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	o.Etcd.AddFlags(fss.FlagSet("etcd"))
	o.Audit.AddFlags(fss.FlagSet("auditing"))
	o.Features.AddFlags(fss.FlagSet("features"))
	o.Authentication.AddFlags(fss.FlagSet("delegated authentication"))
	o.Authorization.AddFlags(fss.FlagSet("delegated authorization"))
	componentbaseoptions.BindLeaderElectionFlags(&o.LeaderElection, fss.FlagSet("leader election"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	fixHelp(&fss)
	return fss
}

type completedOptions struct {
	*Options
	// EmbeddedEtcd is true when no --etcd-servers were given.
	EmbeddedEtcd bool
	// GenerateCerts is true when no --tls-cert-file was given: the server makes its own PKI.
	GenerateCerts bool
	// Delegated is true when the server is an aggregated server of a host cluster.
	Delegated bool
	// InCluster is true when the host is the cluster this pod runs in.
	InCluster bool
}

// CompletedOptions are options with defaults derived; only they can be validated and turned
// into a Config.
type CompletedOptions struct {
	*completedOptions
}

// Complete derives the paths below the root directory and the storage mode.
func (o *Options) Complete() (CompletedOptions, error) {
	root, err := filepath.Abs(o.RootDirectory)
	if err != nil {
		return CompletedOptions{}, fmt.Errorf("resolving --root-directory %q: %w", o.RootDirectory, err)
	}
	o.RootDirectory = root
	o.Tunnel.Complete()
	// Fix the effective version and feature gates now that flags are parsed.
	if err := o.ServerRun.ComponentGlobalsRegistry.Set(); err != nil {
		return CompletedOptions{}, fmt.Errorf("applying version and feature gate flags: %w", err)
	}
	if o.SecureServing.ServerCert.CertDirectory == "" {
		o.SecureServing.ServerCert.CertDirectory = filepath.Join(root, pkiDir)
	}
	inCluster := o.Kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != ""
	delegated := o.Kubeconfig != "" || inCluster
	if delegated {
		// Authentication and authorization talk to the host unless told otherwise.
		if o.Authentication.RemoteKubeConfigFile == "" {
			o.Authentication.RemoteKubeConfigFile = o.Kubeconfig
		}
		if o.Authorization.RemoteKubeConfigFile == "" {
			o.Authorization.RemoteKubeConfigFile = o.Kubeconfig
		}
	}
	return CompletedOptions{&completedOptions{
		Options:       o,
		EmbeddedEtcd:  len(o.Etcd.StorageConfig.Transport.ServerList) == 0,
		GenerateCerts: o.SecureServing.ServerCert.CertKey.CertFile == "",
		Delegated:     delegated,
		InCluster:     inCluster,
	}}, nil
}

// Validate checks the options; all problems are reported at once.
func (o CompletedOptions) Validate() error {
	var errs []error
	if o.RootDirectory == "" {
		errs = append(errs, errors.New("--root-directory must not be empty"))
	}
	if o.EmbeddedEtcdQuotaBackendBytes < 0 {
		errs = append(errs, errors.New("--embedded-etcd-quota-backend-bytes must not be negative"))
	}
	if o.SecureServing.BindPort == 0 && o.SecureServing.Listener == nil {
		errs = append(errs, errors.New("--secure-port must be between 1 and 65535"))
	}
	errs = append(errs, o.AdmissionRelay.Validate(o.GenerateCerts)...)
	errs = append(errs, o.ServerRun.Validate()...)
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.etcdValidate()...)
	errs = append(errs, o.Audit.Validate()...)
	errs = append(errs, o.Features.Validate()...)
	if o.Delegated {
		errs = append(errs, o.Authentication.Validate()...)
		errs = append(errs, o.Authorization.Validate()...)
	} else if o.APIServiceName != "" {
		errs = append(errs, errors.New("--apiservice-name needs a host cluster: set --kubeconfig"))
	}
	if o.Delegated && o.SecretsKubeconfig != "" {
		errs = append(errs, errors.New("--secrets-kubeconfig is for standalone mode; in delegated mode the host cluster holds the Secrets"))
	}
	if o.KcpMode && o.ExternalBaseURL == "" {
		// Derived, status.URL would point at this server itself: kcp serves a mounted
		// workspace from status.URL, and standalone kcp sends the caller's kcp credentials
		// along (DESIGN.md, section 1) to whatever is there.
		errs = append(errs, errors.New("--kcp-mode needs --external-base-url: the base of every Mount's status.URL, which kcp serves mounted workspaces from; point it at kcp's front-proxy mapping of this server (e.g. https://<kcp-front-proxy>/services/mounts), never at this server itself, where kcp would send its callers' kcp credentials"))
	}
	if o.ExternalBaseURL != "" {
		if u, err := url.Parse(o.ExternalBaseURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("--external-base-url %q must be an absolute http(s) URL without query or credentials", o.ExternalBaseURL))
		}
	}
	if o.StatusProbeInterval < time.Second {
		errs = append(errs, errors.New("--status-probe-interval must be at least 1s"))
	}
	if o.StatusWorkers < 1 {
		errs = append(errs, errors.New("--status-workers must be at least 1"))
	}
	if o.KubeAPIQPS <= 0 {
		errs = append(errs, errors.New("--kube-api-qps must be positive"))
	}
	if o.KubeAPIBurst < 1 {
		errs = append(errs, errors.New("--kube-api-burst must be at least 1"))
	}
	if o.StatusProbesQPS < 0 {
		errs = append(errs, errors.New("--status-probes-qps must not be negative"))
	}
	if o.ProxyConnectTimeout <= 0 {
		errs = append(errs, errors.New("--proxy-connect-timeout must be positive"))
	}
	if o.ProxyMaxUpgrades < 0 {
		errs = append(errs, errors.New("--proxy-max-upgrades must not be negative"))
	}
	if o.RewriteDocumentMemoryBudget < 0 {
		errs = append(errs, errors.New("--rewrite-document-memory-budget must not be negative"))
	}
	if o.FanOutMemberTimeout <= 0 {
		errs = append(errs, errors.New("--fanout-member-timeout must be positive"))
	}
	if o.EventTTL < time.Second {
		errs = append(errs, errors.New("--event-ttl must be at least 1s"))
	}
	if o.MaxEvents < 1 {
		errs = append(errs, errors.New("--max-events must be at least 1"))
	}
	if o.ProxyMaxHops < 1 {
		errs = append(errs, errors.New("--proxy-max-hops must be at least 1"))
	}
	if o.ProxyMaxIdleConnsPerMount < 1 {
		errs = append(errs, errors.New("--proxy-max-idle-conns-per-mount must be at least 1"))
	}
	if _, err := targetpolicy.ParseRules(o.ProxyAllowedTargets); err != nil {
		errs = append(errs, fmt.Errorf("--proxy-allowed-targets: %w", err))
	}
	if _, err := targetpolicy.ParseRules(o.ProxyDeniedTargets); err != nil {
		errs = append(errs, fmt.Errorf("--proxy-denied-targets: %w", err))
	}
	if o.APIServiceName != "" && !o.GenerateCerts {
		errs = append(errs, errors.New("--apiservice-name publishes the CA of the generated serving certificate; it cannot be used with --tls-cert-file"))
	}
	errs = append(errs, o.Kcp.Validate(o.KcpMode)...)
	errs = append(errs, o.Tunnel.Validate()...)
	errs = append(errs, o.TunnelPeers.Validate()...)
	if !o.Delegated && (o.TunnelPeers.PeerURL != "" || o.TunnelPeers.PeerCAFile != "" || o.TunnelPeers.PeerServerName != "") {
		errs = append(errs, errors.New("--tunnel-peer-url, --tunnel-peer-ca-file and --tunnel-peer-server-name are for replicas of an aggregated server; a standalone server has no peers"))
	}
	// Logging is process-wide; the command applies it once, Validate only checks it.
	errs = append(errs, logsapi.Validate(o.Logs, nil, nil).ToAggregate())
	return utilerrors.NewAggregate(errs)
}

// etcdValidate validates the etcd options; the embedded server's URL is known only once it
// listens, so in embedded mode the check for --etcd-servers is done on a stand-in.
func (o CompletedOptions) etcdValidate() []error {
	if !o.EmbeddedEtcd {
		return o.Etcd.Validate()
	}
	etcd := *o.Etcd
	etcd.StorageConfig.Transport.ServerList = []string{"http://127.0.0.1:2379"}
	return etcd.Validate()
}

// servingHosts returns the names and addresses the generated serving certificate covers.
func (o CompletedOptions) servingHosts() ([]string, []net.IP) {
	hosts := []string{"localhost"}
	ips := []net.IP{netutils.ParseIPSloppy("127.0.0.1"), net.IPv6loopback}
	if bind := o.SecureServing.BindAddress; bind != nil && !bind.IsUnspecified() && !bind.IsLoopback() {
		ips = append(ips, bind)
	}
	for _, h := range o.ServingCertHosts {
		if ip := netutils.ParseIPSloppy(h); ip != nil {
			ips = append(ips, ip)
		} else if h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts, ips
}

// embeddedEtcdStartTimeout bounds the wait for a fresh or recovering embedded etcd.
const embeddedEtcdStartTimeout = time.Minute
