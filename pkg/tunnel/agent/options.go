package agent

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/rancher/remotedialer"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/validation"
)

// DefaultMaxBackoff caps the wait between two connection attempts.
const DefaultMaxBackoff = 30 * time.Second

// DefaultSilenceTimeout is how long a session may go without the hub's answer to the agent's
// pings before the agent drops it: three pings (remotedialer pings every 5 s). remotedialer's
// own 60 s keeps an agent on a replica that vanished (a node lost, no connection reset) for a
// minute, twice the failover the project promises.
const DefaultSilenceTimeout = 15 * time.Second

// MinSilenceTimeout is two of remotedialer's ping intervals: shorter would drop sessions
// whose hub is merely between pongs.
const MinSilenceTimeout = 2 * remotedialer.PingWriteInterval

// Options are the command-line options of mount-agent.
type Options struct {
	// HubKubeconfig is the kubeconfig with which the agent reaches mount-apiserver (directly
	// or through the host's aggregator): bearer token or client certificate, TLS verified.
	HubKubeconfig string
	// Mount is the name of the Mount whose tunnel the agent serves.
	Mount string
	// Cluster is the kcp logical cluster path of the Mount; empty outside kcp.
	Cluster string
	// Target is host:port of the one target the agent dials; empty is the in-cluster
	// kube-apiserver (KUBERNETES_SERVICE_HOST and _PORT).
	Target string
	// Kubeconfig holds the agent's own credentials for its target (agent-credential mode);
	// empty is the in-cluster ServiceAccount.
	Kubeconfig string
	// HealthBindAddress serves /healthz, /readyz and /metrics; empty serves nothing.
	HealthBindAddress string
	// MaxBackoff caps the wait between connection attempts.
	MaxBackoff time.Duration
	// SilenceTimeout is how long a session may go without a pong from the hub.
	SilenceTimeout time.Duration

	// NewAgentHandler builds the handler of tunnel.AddressAgent from the completed options,
	// for the agent-credential mode: it adds the agent's credentials for its target. nil, or
	// a nil handler, answers 503: this agent has no credentials for its target.
	NewAgentHandler func(o *CompletedOptions) (http.Handler, error)
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{HealthBindAddress: ":8080", MaxBackoff: DefaultMaxBackoff, SilenceTimeout: DefaultSilenceTimeout}
}

// Flags returns the options as named flag sets.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	hub := fss.FlagSet("hub")
	hub.StringVar(&o.HubKubeconfig, "hub-kubeconfig", o.HubKubeconfig,
		"Kubeconfig of mount-apiserver (or of the cluster it is aggregated into, or of kcp): the agent attaches with its bearer token or client certificate and verifies the server with its CA. Needs verb create on mounts/attach for --mount.")
	hub.StringVar(&o.Mount, "mount", o.Mount, "Name of the Mount whose tunnel this agent serves.")
	hub.StringVar(&o.Cluster, "cluster", o.Cluster, "kcp logical cluster path of the Mount (e.g. root:org:team); empty outside kcp.")
	hub.DurationVar(&o.MaxBackoff, "max-backoff", o.MaxBackoff, "Longest wait between two connection attempts (exponential backoff with jitter).")
	hub.DurationVar(&o.SilenceTimeout, "hub-silence-timeout", o.SilenceTimeout,
		fmt.Sprintf("How long the session may go without the hub answering the agent's pings (sent every %s) before the agent drops it and attaches again, e.g. to another replica when this one's node vanished. At least %s.", remotedialer.PingWriteInterval, MinSilenceTimeout))
	target := fss.FlagSet("target")
	target.StringVar(&o.Target, "target", o.Target,
		"host:port of the one target the agent dials for the server. Defaults to the in-cluster kube-apiserver (KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT).")
	target.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"The agent's own credentials for its target, for Mounts with spec.tunnel.credentials Agent. Defaults to the in-cluster ServiceAccount.")
	health := fss.FlagSet("health")
	health.StringVar(&o.HealthBindAddress, "health-bind-address", o.HealthBindAddress,
		"Address that serves /healthz, /readyz (ready while a session is up) and /metrics; empty serves nothing.")
	return fss
}

// CompletedOptions are Options with defaults derived.
type CompletedOptions struct {
	*Options
	// InCluster is true when the agent runs in a pod (the target defaulted from it).
	InCluster bool
}

// Complete derives the target from the pod's environment when it is not given.
func (o *Options) Complete() (*CompletedOptions, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	inCluster := host != "" && port != ""
	if o.Target == "" && inCluster {
		o.Target = net.JoinHostPort(host, port)
	}
	return &CompletedOptions{Options: o, InCluster: inCluster}, nil
}

// Validate checks the options; all problems at once.
func (o *CompletedOptions) Validate() error {
	var errs []error
	if o.HubKubeconfig == "" {
		errs = append(errs, errors.New("--hub-kubeconfig is required"))
	}
	if o.Mount == "" {
		errs = append(errs, errors.New("--mount is required"))
	} else if msgs := validation.ValidateMountName(o.Mount, false); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--mount %q: %s", o.Mount, strings.Join(msgs, ", ")))
	}
	if o.Cluster != "" && strings.ContainsAny(o.Cluster, "/?#% ") {
		errs = append(errs, fmt.Errorf("--cluster %q is not a logical cluster path", o.Cluster))
	}
	if o.Target == "" {
		errs = append(errs, errors.New("--target is required outside a pod"))
	} else if _, port, err := net.SplitHostPort(o.Target); err != nil || port == "" {
		errs = append(errs, fmt.Errorf("--target %q must be host:port", o.Target))
	}
	if o.MaxBackoff < time.Second {
		errs = append(errs, errors.New("--max-backoff must be at least 1s"))
	}
	if o.SilenceTimeout < MinSilenceTimeout {
		errs = append(errs, fmt.Errorf("--hub-silence-timeout must be at least %s (two of the agent's ping intervals)", MinSilenceTimeout))
	}
	return errors.Join(errs...)
}

// Config builds the agent's configuration.
func (o *CompletedOptions) Config() (*Config, error) {
	hub, err := clientcmd.BuildConfigFromFlags("", o.HubKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--hub-kubeconfig: %w", err)
	}
	if err := checkHubConfig(hub); err != nil {
		return nil, fmt.Errorf("--hub-kubeconfig: %w", err)
	}
	attach, err := AttachURL(hub.Host, o.Cluster, o.Mount)
	if err != nil {
		return nil, fmt.Errorf("--hub-kubeconfig: %w", err)
	}
	cfg := &Config{
		Hub:               hub,
		AttachURL:         attach,
		Mount:             o.Mount,
		Target:            o.Target,
		HealthBindAddress: o.HealthBindAddress,
		MaxBackoff:        o.MaxBackoff,
		SilenceTimeout:    o.SilenceTimeout,
	}
	if o.NewAgentHandler != nil {
		if cfg.AgentHandler, err = o.NewAgentHandler(o); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// checkHubConfig accepts what the agent can use to reach the hub: a verified https server,
// authenticated by a bearer token (or token file) or a client certificate. Anything else
// would attach unauthenticated or unverified, or not at all.
func checkHubConfig(hub *rest.Config) error {
	switch {
	case strings.HasPrefix(strings.ToLower(hub.Host), "http://"):
		return errors.New("the server must be https: the agent's credentials and the mount's traffic go through it")
	case hub.Insecure:
		return errors.New("insecure-skip-tls-verify is not allowed: the agent carries the mount's traffic and must verify the server")
	case hub.ExecProvider != nil, hub.AuthProvider != nil:
		return errors.New("exec plugins and auth providers are not supported: use a bearer token, a token file or a client certificate")
	case hub.Username != "" || hub.Password != "":
		return errors.New("basic authentication is not supported: use a bearer token, a token file or a client certificate")
	case hub.BearerToken == "" && hub.BearerTokenFile == "" && !hasClientCert(hub):
		return errors.New("no credentials: use a bearer token, a token file or a client certificate")
	case hub.Impersonate.UserName != "" || len(hub.Impersonate.Groups) > 0:
		return errors.New("impersonation is not supported: the agent attaches as itself")
	}
	return nil
}

func hasClientCert(c *rest.Config) bool {
	return (len(c.CertData) > 0 || c.CertFile != "") && (len(c.KeyData) > 0 || c.KeyFile != "")
}

// AttachURL is the WebSocket URL of mounts/<mount>/attach below the hub's server URL, in the
// logical cluster when one is given.
func AttachURL(server, cluster, mount string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("server URL does not parse: %w", err)
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	case "http":
		u.Scheme = "ws"
	default:
		return "", fmt.Errorf("server URL %q must be https (or http)", server)
	}
	path := strings.TrimSuffix(u.Path, "/")
	if cluster != "" {
		path += "/clusters/" + cluster
	}
	u.Path = path + "/apis/mounts.kcp.io/v1alpha1/mounts/" + mount + "/attach"
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u.String(), nil
}
