package peers

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Options are the command-line options of the hop between replicas.
type Options struct {
	// PeerURL is the URL under which other replicas reach this one; empty derives
	// https://<advertise or bind address>:<secure port>.
	PeerURL string
	// PeerCAFile verifies the serving certificates of other replicas; empty takes the CA of
	// the generated serving certificates, if the server made them.
	PeerCAFile string
	// PeerServerName is the name verified in other replicas' serving certificates; empty
	// verifies the host of their peer URL.
	PeerServerName string
	// LeaseRenewalsQPS bounds this replica's renewals of its sessions' ownership Leases, all
	// together (OwnersConfig.RenewalsPerSecond).
	LeaseRenewalsQPS float64
}

// DefaultLeaseRenewalsQPS lets 400 sessions renew every 20 s; past that each is renewed less
// often: 10,000 sessions put 20 writes a second on the host instead of 500.
const DefaultLeaseRenewalsQPS = 20

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{LeaseRenewalsQPS: DefaultLeaseRenewalsQPS}
}

// AddFlags adds the flags to fs (the "tunnel peers" flag set).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.PeerURL, "tunnel-peer-url", o.PeerURL,
		"URL under which the other replicas reach this one to use an agent's tunnel session held here (aggregated mode). Defaults to https://<address>:<secure port> with --advertise-address, else --bind-address unless it is 0.0.0.0 or ::, else the address of the default route's interface (a pod's IP); the serving certificate must cover it (--serving-cert-hosts).")
	fs.StringVar(&o.PeerCAFile, "tunnel-peer-ca-file", o.PeerCAFile,
		"PEM bundle of the CAs that sign the other replicas' serving certificates, to verify them on the hop to the replica that holds a tunnel session. Defaults to the CA of the generated serving certificate (replicas sharing one PKI); without either, requests for sessions held by other replicas get 503.")
	fs.StringVar(&o.PeerServerName, "tunnel-peer-server-name", o.PeerServerName,
		"Name verified in the other replicas' serving certificates on the hop, instead of the host of their peer URL: replicas of a Deployment dial each other's pod IP and verify the Service name that their shared serving certificate covers (e.g. mount-apiserver.mount-apiserver.svc).")
	fs.Float64Var(&o.LeaseRenewalsQPS, "tunnel-lease-renewals-qps", o.LeaseRenewalsQPS,
		"Renewals per second of the host Leases that say which replica holds each tunnel session, over all sessions of this replica (aggregated mode). Up to 20 s x this many sessions, each is renewed every 20 s (Leases of 60 s); past that each less often, with Leases written three times as long, so the host sees at most this many writes a second. A session that moves to another replica takes its Lease over at once. 0: no bound.")
}

// Validate checks the options.
func (o *Options) Validate() []error {
	var errs []error
	if o.PeerURL != "" {
		if _, err := ParsePeerURL(o.PeerURL); err != nil {
			errs = append(errs, fmt.Errorf("--tunnel-peer-url: %w", err))
		}
	}
	if o.PeerServerName != "" {
		if msgs := validation.IsDNS1123Subdomain(o.PeerServerName); len(msgs) > 0 && net.ParseIP(o.PeerServerName) == nil {
			errs = append(errs, fmt.Errorf("--tunnel-peer-server-name %q: %s", o.PeerServerName, strings.Join(msgs, ", ")))
		}
	}
	if o.LeaseRenewalsQPS < 0 {
		errs = append(errs, errors.New("--tunnel-lease-renewals-qps must not be negative"))
	}
	if o.PeerCAFile != "" {
		if _, err := LoadCAFile(o.PeerCAFile); err != nil {
			errs = append(errs, fmt.Errorf("--tunnel-peer-ca-file: %w", err))
		}
	}
	return errs
}

// ParsePeerURL checks that s is an https URL of a host (and port), nothing more.
func ParsePeerURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("parsing %q: %w", s, err)
	}
	if u.Scheme != "https" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q must be https://<host>[:<port>] without path, query or credentials", s)
	}
	return u, nil
}

// LoadCAFile reads a PEM bundle of CA certificates.
func LoadCAFile(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return ParseCAs(data)
}

// ParseCAs parses a PEM bundle of CA certificates; a bundle without one is an error.
func ParseCAs(pemBytes []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("no PEM certificate found")
	}
	return pool, nil
}
