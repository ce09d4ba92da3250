package options

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// TunnelOptions configure the reverse tunnels of agents (mounts/<name>/attach, spec.tunnel).
type TunnelOptions struct {
	// AuthorizationInterval is how often an attached agent's permission is checked again.
	AuthorizationInterval time.Duration
	// ReplicaName names this replica in the AgentConnected condition; empty is the host name.
	ReplicaName string
}

// NewTunnelOptions returns the defaults.
func NewTunnelOptions() TunnelOptions {
	return TunnelOptions{AuthorizationInterval: tunnel.DefaultAuthorizationInterval}
}

// AddFlags adds the tunnel flags to fs.
func (o *TunnelOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.AuthorizationInterval, "tunnel-authorization-interval", o.AuthorizationInterval,
		"How often the server checks again that an attached agent may still attach (verb create on mounts/attach for its mount); a revoked permission closes the session.")
	fs.StringVar(&o.ReplicaName, "tunnel-replica-name", o.ReplicaName,
		"Name of this replica in a mount's AgentConnected condition. Defaults to the host name (the pod name in a Deployment).")
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
	return errs
}
