package options

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// TunnelOptions configure the reverse tunnels of agents (mounts/<name>/attach, spec.tunnel).
type TunnelOptions struct {
	// AuthorizationInterval is how often an attached agent's credentials and permission are
	// checked again.
	AuthorizationInterval time.Duration
	// AuthorizationQPS is how many sessions are checked again per second at most, over all
	// sessions: it bounds what the checks cost the host.
	AuthorizationQPS float32
	// MaxAttaching bounds the attach requests worked on at once.
	MaxAttaching int
	// ReplicaName names this replica in the AgentConnected condition; empty is the host name.
	ReplicaName string
	// ConnectionBufferBytes and SessionBufferBytes bound what an agent makes the server hold
	// (tunnel.Limits).
	ConnectionBufferBytes int64
	SessionBufferBytes    int64
}

// NewTunnelOptions returns the defaults.
func NewTunnelOptions() TunnelOptions {
	return TunnelOptions{AuthorizationInterval: tunnel.DefaultAuthorizationInterval, AuthorizationQPS: tunnel.DefaultAuthorizationQPS, MaxAttaching: tunnel.DefaultMaxAttaching,
		ConnectionBufferBytes: tunnel.DefaultConnectionBuffer, SessionBufferBytes: tunnel.DefaultSessionBuffer}
}

// AddFlags adds the tunnel flags to fs.
func (o *TunnelOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.AuthorizationInterval, "tunnel-authorization-interval", o.AuthorizationInterval,
		"How often the server checks again that an attached agent's credentials still authenticate it (a token review's cache adds up to its TTL), that an agent which is a ServiceAccount of the host still has it, and that it may still attach (verb create on mounts/attach for its mount, or being the user its mount names in spec.tunnel.agentUser); anything revoked closes the session. A check the host does not answer is tried again; the session closes once checks have not been answered for 5 minutes (or this interval, if longer).")
	fs.Float32Var(&o.AuthorizationQPS, "tunnel-authorization-qps", o.AuthorizationQPS,
		"Sessions checked again per second at most, over all agent sessions of this replica (each check costs the host up to a TokenReview, a ServiceAccount GET and a SubjectAccessReview, the last none for a mount that names its agent): with more sessions than this times --tunnel-authorization-interval, each is checked less often than the interval, and the host's load stays bounded (20: at most 60 requests per second; 10,000 sessions are each checked every 8m20s).")
	fs.IntVar(&o.MaxAttaching, "tunnel-max-attaching", o.MaxAttaching,
		"Attach requests of agents this replica works on at once, from their arrival until their session is up; more get 429 before any authentication, with a Retry-After that hands each a later time to come back (one per slot expected to free up, at most 5m), which mount-agent keeps to. Bounds the host calls (TokenReviews, SubjectAccessReviews, ServiceAccount GETs) of a reconnect storm, so attaches finish within the agents' 10s handshake timeout instead of all timing out.")
	fs.StringVar(&o.ReplicaName, "tunnel-replica-name", o.ReplicaName,
		"Name of this replica in a mount's AgentConnected condition. Defaults to the host name (the pod name in a Deployment).")
	fs.Int64Var(&o.ConnectionBufferBytes, "tunnel-connection-buffer-bytes", o.ConnectionBufferBytes,
		"Bytes an agent may send on one tunnel connection that the server has not read yet (it asks the agent to pause at 2 MiB); an agent past it has its session closed. Raise it for links whose bandwidth-delay product is larger than about 14 MiB.")
	fs.Int64Var(&o.SessionBufferBytes, "tunnel-session-buffer-bytes", o.SessionBufferBytes,
		"Bytes an agent may send past the 2 MiB at which the server asks it to pause a connection, summed over its session's connections, that the server has not read yet; the connection that receives bytes past it is dropped (its proxied request fails), the session lives on. With --tunnel-connection-buffer-bytes, bounds the memory one agent can take on this server beyond 2 MiB per open connection.")
}

// Limits are the bounds of each agent's session.
func (o *TunnelOptions) Limits() tunnel.Limits {
	return tunnel.Limits{ConnectionBuffer: o.ConnectionBufferBytes, SessionBuffer: o.SessionBufferBytes}
}

// Complete fills in the replica name.
func (o *TunnelOptions) Complete() {
	if o.ReplicaName == "" {
		hostname, _ := os.Hostname()
		o.ReplicaName = strings.TrimSuffix(hostname, ".")
	}
}

// Validate checks the options.
func (o *TunnelOptions) Validate() []error {
	var errs []error
	if o.AuthorizationInterval < time.Second {
		errs = append(errs, errors.New("--tunnel-authorization-interval must be at least 1s"))
	}
	if o.MaxAttaching < 1 {
		errs = append(errs, errors.New("--tunnel-max-attaching must be at least 1"))
	}
	if !(o.AuthorizationQPS > 0) {
		errs = append(errs, errors.New("--tunnel-authorization-qps must be positive"))
	}
	if o.ConnectionBufferBytes <= 0 || o.SessionBufferBytes <= 0 {
		errs = append(errs, errors.New("--tunnel-connection-buffer-bytes and --tunnel-session-buffer-bytes must be positive"))
	} else if err := o.Limits().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--tunnel-connection-buffer-bytes, --tunnel-session-buffer-bytes: %w", err))
	}
	return errs
}
