package targetpolicy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Rule is one entry of an allow or a deny list: an IP prefix (a CIDR or one address) or a
// DNS name, optionally with a port. "*.example.com" matches every name below example.com,
// not example.com itself.
type Rule struct {
	// prefix is valid for address rules.
	prefix netip.Prefix
	// name is the lower-case name of name rules, without a trailing dot; below is true for
	// "*." rules, which match names below it.
	name  string
	below bool
	// port is 0 for every port.
	port uint16
	text string
}

// String returns the rule as it was written.
func (r Rule) String() string { return r.text }

// ParseRule parses one entry: "10.0.0.0/8", "fd00::/8", "10.1.2.3", "10.1.2.3:6443",
// "[fd00::1]:6443", "api.example.com", "api.example.com:6443", "*.example.com",
// "*.example.com:443". CIDRs take no port.
func ParseRule(s string) (Rule, error) {
	s = strings.TrimSpace(s)
	r := Rule{text: s}
	if s == "" {
		return r, errors.New("empty entry")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return r, fmt.Errorf("%q is not a CIDR", s)
		}
		r.prefix = normalizePrefix(p)
		return r, nil
	}
	if ip, err := netip.ParseAddr(s); err == nil {
		r.prefix = netip.PrefixFrom(normalize(ip), normalize(ip).BitLen())
		return r, nil
	}
	host := s
	if strings.Contains(s, ":") {
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			return r, fmt.Errorf("%q is neither a CIDR, an IP address nor a host name, each with an optional :port", s)
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil || port == 0 {
			return r, fmt.Errorf("%q has no port between 1 and 65535", s)
		}
		host, r.port = h, uint16(port)
		if ip, err := netip.ParseAddr(host); err == nil {
			r.prefix = netip.PrefixFrom(normalize(ip), normalize(ip).BitLen())
			return r, nil
		}
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, r.below = rest, true
	}
	name, ok := hostName(host)
	if !ok {
		return r, fmt.Errorf("%q is neither a CIDR, an IP address nor a host name (wildcards only as a leading \"*.\")", s)
	}
	r.name = name
	return r, nil
}

// ParseRules parses a list of entries; the error names every entry that does not parse.
func ParseRules(entries []string) ([]Rule, error) {
	rules := make([]Rule, 0, len(entries))
	var errs []error
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rules = append(rules, r)
	}
	return rules, errors.Join(errs...)
}

func (r Rule) matchesAddr(ip netip.Addr, port uint16) bool {
	return r.prefix.IsValid() && (r.port == 0 || r.port == port) && r.prefix.Contains(ip)
}

func (r Rule) matchesName(name string, port uint16) bool {
	if r.name == "" || r.port != 0 && r.port != port {
		return false
	}
	if r.below {
		return strings.HasSuffix(name, "."+r.name)
	}
	return name == r.name
}

// normalize makes addresses comparable: no IPv6 zone (a prefix never contains a zoned
// address), IPv4-mapped IPv6 addresses as IPv4 (they reach the same host).
func normalize(ip netip.Addr) netip.Addr {
	return ip.WithZone("").Unmap()
}

// normalizePrefix turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96), so that it matches
// the normalized addresses it covers.
func normalizePrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// hostName returns a DNS name in the form rules compare (lower case, no trailing dot), and
// whether it is one. A name whose last label is numeric is refused: resolvers read forms
// like "127.1" or "2130706433" as IPv4 addresses, which a name rule must not stand for.
func hostName(host string) (string, bool) {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "" || len(validation.IsDNS1123Subdomain(name)) != 0 {
		return "", false
	}
	last := name[strings.LastIndexByte(name, '.')+1:]
	if hex, ok := strings.CutPrefix(last, "0x"); strings.Trim(last, "0123456789") == "" || ok && strings.Trim(hex, "0123456789abcdef") == "" {
		return "", false
	}
	return name, true
}
