package peers

import (
	"context"
	"errors"
	"net"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// OwnerLookup finds the replica that holds a session (Owners).
type OwnerLookup interface {
	Owner(key string) (Peer, bool)
}

// Dialer is the tunnel.Dialer of a replica among others: the session held here, else the one
// the owner recorded in the host, through a hop. Without either, the error wraps
// tunnel.ErrNoSession.
type Dialer struct {
	Local  tunnel.Dialer
	Owners OwnerLookup
	// Hop reaches other replicas; nil serves local sessions only.
	Hop *Hop
}

var _ tunnel.Dialer = &Dialer{}

// DialContext dials address through the session of key, wherever it is held.
func (d *Dialer) DialContext(ctx context.Context, key, address string) (net.Conn, error) {
	conn, err := d.Local.DialContext(ctx, key, address)
	if err == nil || !errors.Is(err, tunnel.ErrNoSession) || d.Hop == nil || d.Owners == nil {
		return conn, err
	}
	peer, ok := d.Owners.Owner(key)
	if !ok {
		return nil, err
	}
	return d.Hop.Dial(ctx, peer, key, address)
}
