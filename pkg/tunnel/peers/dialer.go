package peers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"k8s.io/klog/v2"

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

	mu sync.Mutex
	// down are owners that did not answer a hop, until when they are not tried again: a
	// dead node's address swallows packets, and each request would wait out the hop's
	// timeout until the agent has moved and its new owner took the Lease over.
	down map[string]time.Time
}

// ownerDownFor is how long an owner that did not answer is not tried again.
const ownerDownFor = 2 * time.Second

// maxDown bounds the owners remembered as down.
const maxDown = 1024

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
	if d.isDown(peer.URL) {
		return nil, fmt.Errorf("%w: %w %s (a moment ago)", tunnel.ErrNoSession, ErrOwnerUnreachable, peer.URL)
	}
	conn, err = d.Hop.Dial(ctx, peer, key, address)
	if errors.Is(err, ErrOwnerUnreachable) && ctx.Err() == nil {
		// Once per owner and ownerDownFor: a wrong CA or server name shows here, as every
		// request for sessions held elsewhere gets 503.
		klog.FromContext(ctx).Info("The replica that holds a tunnel session does not answer the hop; requests get 503 until the agent moves", "owner", peer.Identity, "err", err.Error())
		d.markDown(peer.URL)
	}
	return conn, err
}

func (d *Dialer) isDown(url string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	until, ok := d.down[url]
	if ok && time.Now().After(until) {
		delete(d.down, url)
		return false
	}
	return ok
}

func (d *Dialer) markDown(url string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down == nil {
		d.down = map[string]time.Time{}
	}
	if len(d.down) >= maxDown {
		now := time.Now()
		for u, until := range d.down {
			if now.After(until) {
				delete(d.down, u)
			}
		}
		if len(d.down) >= maxDown {
			return
		}
	}
	d.down[url] = time.Now().Add(ownerDownFor)
}
