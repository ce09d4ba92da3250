package targetpolicy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
)

// ErrNotAllowed is what every refusal of the policy is (errors.Is).
var ErrNotAllowed = errors.New("not allowed by the server's target policy")

// Class is the kind of rule that refused a target. It is the whole explanation a refusal
// gives: the rule class, never an address a name resolved to or what the target answered.
type Class string

// The classes of refusal.
const (
	ClassPlainHTTP      Class = "plain http is not allowed, the mount's credentials would travel unencrypted; use https"
	ClassScheme         Class = "only https URLs can be targets"
	ClassHost           Class = "its host is neither a DNS name nor an IP address"
	ClassMetadata       Class = "link-local and cloud metadata addresses are never allowed"
	ClassOwnEndpoint    Class = "it is one of this server's own endpoints"
	ClassOwnCertificate Class = "it presented this server's own serving certificate"
	ClassDenied         Class = "it is on the server's list of denied targets"
	ClassNotAllowed     Class = "it is not on the server's list of allowed targets"
)

// Error is a refusal of the policy.
type Error struct {
	// Target is the target's host and port as the mount names it.
	Target string
	Class  Class
}

func (e *Error) Error() string {
	if e.Target == "" {
		return fmt.Sprintf("the mount's target is not allowed by the server's target policy: %s", e.Class)
	}
	return fmt.Sprintf("the mount's target %s is not allowed by the server's target policy: %s", e.Target, e.Class)
}

// Is makes every Error match ErrNotAllowed.
func (e *Error) Is(target error) bool { return target == ErrNotAllowed }

// metadataPrefixes are never targets: link-local (where clouds serve instance metadata and
// credentials) and the metadata addresses that lie outside it.
var metadataPrefixes = [...]netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS instance metadata over IPv6
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud instance metadata
}

// Config is what a Policy decides by.
type Config struct {
	// AllowPlainHTTP lets targets be http:// URLs.
	AllowPlainHTTP bool
	// Allowed, if not empty, are the only targets allowed. A target is on it when its name
	// or the address connected to matches an entry.
	Allowed []Rule
	// Denied targets are refused, whatever Allowed says.
	Denied []Rule
	// OwnEndpoints are the addresses this server listens on; an unspecified address
	// (0.0.0.0, ::) stands for the port on every address of this host.
	OwnEndpoints []netip.AddrPort
	// OwnCertificates returns the DER leaf certificates this server currently serves.
	OwnCertificates func() [][]byte
	// IsLocal reports whether an address belongs to this host; nil lists the interface
	// addresses each time. Loopback and unspecified addresses are always local.
	IsLocal func(netip.Addr) bool
}

// Policy decides which targets mounts may name. It is immutable and safe for concurrent use.
type Policy struct {
	c Config
}

// New returns the policy of c. The zero Config is the default: https only, link-local and
// metadata addresses refused, everything else allowed.
func New(c Config) *Policy {
	if c.IsLocal == nil {
		c.IsLocal = interfaceAddress
	}
	return &Policy{c: c}
}

// CheckURL checks what a target URL tells without resolving names: its scheme, and its
// host when that is an IP address or a name the lists decide. Names on no list are decided
// by CheckConnection, on the addresses they resolve to.
func (p *Policy) CheckURL(u *url.URL) error {
	port, err := portOf(u)
	if err != nil {
		return &Error{Target: u.Host, Class: ClassHost}
	}
	host := u.Hostname()
	target := net.JoinHostPort(host, strconv.Itoa(int(port)))
	switch u.Scheme {
	case "https":
	case "http":
		if !p.c.AllowPlainHTTP {
			return &Error{Target: target, Class: ClassPlainHTTP}
		}
	default:
		return &Error{Target: target, Class: ClassScheme}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return p.CheckConnection(target, netip.AddrPortFrom(ip, port))
	}
	name, ok := hostName(host)
	if !ok {
		return &Error{Target: target, Class: ClassHost}
	}
	if matchesName(p.c.Denied, name, port) {
		return &Error{Target: target, Class: ClassDenied}
	}
	if len(p.c.Allowed) > 0 && !matchesName(p.c.Allowed, name, port) && !hasAddressRules(p.c.Allowed) {
		return &Error{Target: target, Class: ClassNotAllowed}
	}
	return nil
}

// CheckServer parses a kubeconfig's server URL and checks it with CheckURL.
func (p *Policy) CheckServer(server string) error {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return &Error{Class: ClassHost}
	}
	return p.CheckURL(u)
}

// CheckConnection checks one connection about to be made: target is the "host:port" the
// mount names (a name or an address), addr the address and port actually connected to.
func (p *Policy) CheckConnection(target string, addr netip.AddrPort) error {
	ip, port := normalize(addr.Addr()), addr.Port()
	for _, m := range metadataPrefixes {
		if m.Contains(ip) {
			return &Error{Target: target, Class: ClassMetadata}
		}
	}
	if p.isOwn(ip, port) {
		return &Error{Target: target, Class: ClassOwnEndpoint}
	}
	nameAllowed := false
	if host, _, err := net.SplitHostPort(target); err == nil {
		if _, err := netip.ParseAddr(host); err != nil {
			name, ok := hostName(host)
			if !ok {
				return &Error{Target: target, Class: ClassHost}
			}
			if matchesName(p.c.Denied, name, port) {
				return &Error{Target: target, Class: ClassDenied}
			}
			nameAllowed = matchesName(p.c.Allowed, name, port)
		}
	}
	if matchesAddr(p.c.Denied, ip, port) {
		return &Error{Target: target, Class: ClassDenied}
	}
	if len(p.c.Allowed) > 0 && !nameAllowed && !matchesAddr(p.c.Allowed, ip, port) {
		return &Error{Target: target, Class: ClassNotAllowed}
	}
	return nil
}

// CheckPeerCertificate refuses a target whose leaf certificate (DER) is one this server
// serves: whatever name, address or relay led there, the target is this server.
func (p *Policy) CheckPeerCertificate(target string, leaf []byte) error {
	if p.c.OwnCertificates == nil || len(leaf) == 0 {
		return nil
	}
	for _, own := range p.c.OwnCertificates() {
		if bytes.Equal(own, leaf) {
			return &Error{Target: target, Class: ClassOwnCertificate}
		}
	}
	return nil
}

// isOwn reports whether ip:port (normalized) reaches one of this server's endpoints.
func (p *Policy) isOwn(ip netip.Addr, port uint16) bool {
	// Connecting to 0.0.0.0 or :: reaches loopback.
	ip = unspecifiedToLoopback(ip)
	for _, e := range p.c.OwnEndpoints {
		if e.Port() != port {
			continue
		}
		own := normalize(e.Addr())
		if own.IsUnspecified() {
			if ip.IsLoopback() || p.c.IsLocal(ip) {
				return true
			}
			continue
		}
		if unspecifiedToLoopback(own) == ip {
			return true
		}
	}
	return false
}

func unspecifiedToLoopback(ip netip.Addr) netip.Addr {
	switch {
	case ip.IsUnspecified() && ip.Is4():
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	case ip.IsUnspecified():
		return netip.IPv6Loopback()
	}
	return ip
}

// interfaceAddress reports whether ip is an address of one of this host's interfaces. Not
// knowing counts as yes: the answer only ever refuses this server's own ports.
func interfaceAddress(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if local, ok := netip.AddrFromSlice(n.IP); ok && normalize(local) == ip {
				return true
			}
		}
	}
	return false
}

func portOf(u *url.URL) (uint16, error) {
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("port %q", p)
		}
		return uint16(n), nil
	}
	if u.Scheme == "http" {
		return 80, nil
	}
	return 443, nil
}

func matchesName(rules []Rule, name string, port uint16) bool {
	for _, r := range rules {
		if r.matchesName(name, port) {
			return true
		}
	}
	return false
}

func matchesAddr(rules []Rule, ip netip.Addr, port uint16) bool {
	for _, r := range rules {
		if r.matchesAddr(ip, port) {
			return true
		}
	}
	return false
}

func hasAddressRules(rules []Rule) bool {
	for _, r := range rules {
		if r.prefix.IsValid() {
			return true
		}
	}
	return false
}
