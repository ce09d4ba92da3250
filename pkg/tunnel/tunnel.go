package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// The only addresses the server ever asks an agent to dial. The agent maps them to what it was
// configured with and refuses anything else; since remotedialer ends a whole session when the
// agent refuses a dial, the server never asks for anything but these.
const (
	// AddressTarget is a raw TCP connection to the agent's one target (the cluster's
	// kube-apiserver). The server speaks TLS through it with the Mount's kubeconfig.
	AddressTarget = "target:443"
	// AddressAgent is a connection to the agent's own HTTP proxy, which adds the agent's
	// credentials and passes on only the caller's impersonation.
	AddressAgent = "agent:80"
)

// ErrNoSession is returned by a Dialer when no agent holds a session for the mount.
var ErrNoSession = errors.New("no agent is connected")

// ErrLost fails reads and writes of a connection through a tunnel whose path to the agent
// ended under it: the agent's session ended (the agent went away or attached again), or the
// hop to the replica holding the session broke. What the target did with a request sent
// through it is unknown. A clean end of the connection stays io.EOF.
var ErrLost = errors.New("the connection through the agent's tunnel was lost")

// Lost marks err, a failure of a connection through a tunnel, as ErrLost, keeping err.
func Lost(err error) error { return fmt.Errorf("%w: %w", ErrLost, err) }

// Dialer opens connections through the session of a mount's agent, wherever it is held.
type Dialer interface {
	// DialContext dials address (AddressTarget or AddressAgent) through the session with the
	// given key. It returns an error wrapping ErrNoSession when no agent holds one.
	DialContext(ctx context.Context, key, address string) (net.Conn, error)
}

// SessionKey is the key of the session of a mount: its logical cluster and UID, so a session
// never outlives the object it was attached to, and a new mount of the same name needs a new
// attach.
func SessionKey(cluster clusters.Name, uid types.UID) string {
	return string(cluster) + "/" + string(uid)
}
