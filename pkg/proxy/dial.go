package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
)

// dialAllowed dials addr ("host:port" as the target URL names it) with dialer, letting the
// policy refuse each address actually connected to: a name may resolve anywhere, and to
// something else on the next lookup. A refused address is never connected to.
func dialAllowed(ctx context.Context, dialer net.Dialer, policy *targetpolicy.Policy, network, addr string) (net.Conn, error) {
	dialer.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			// The dialer passes resolved addresses; anything else is not connected to.
			return fmt.Errorf("refusing to connect to an address that does not parse: %w", err)
		}
		return policy.CheckConnection(addr, ap)
	}
	return dialer.DialContext(ctx, network, addr)
}

// refuseOwnCertificate is a tls.Config.VerifyConnection that refuses this server's own
// serving certificate, on full and resumed handshakes alike.
func refuseOwnCertificate(policy *targetpolicy.Policy) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil
		}
		return policy.CheckPeerCertificate(cs.ServerName, cs.PeerCertificates[0].Raw)
	}
}
