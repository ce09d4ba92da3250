package options

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"

	"github.com/spf13/pflag"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay"
	mountapiserver "github.com/kcp-dev/mount-apiserver/pkg/apiserver"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

// AdmissionRelayOptions configure the admission relay of renaming mounts: a listener of its
// own that targets' kube-apiservers call as a webhook, without credentials.
type AdmissionRelayOptions struct {
	// Address is where the relay listens (host:port); empty serves no relay.
	Address string
	// URL is how targets reach the relay; empty derives https://<listening address>.
	URL string
	// CAFile verifies the relay's serving certificate (this server's); empty takes the
	// generated CA, and is required with --tls-cert-file.
	CAFile string
}

// AddFlags adds the relay's flags.
func (o *AdmissionRelayOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Address, "admission-relay-address", o.Address,
		"host:port of the admission relay: targets' kube-apiservers call the webhooks registered through renaming mounts (spec.rewrites) here, without credentials, with this server's serving certificate. Empty: no relay, and webhook configurations written through renaming mounts are refused.")
	fs.StringVar(&o.URL, "admission-relay-url", o.URL,
		"https URL at which targets reach the admission relay. Defaults to https://<--admission-relay-address as listened on>.")
	fs.StringVar(&o.CAFile, "admission-relay-ca-file", o.CAFile,
		"PEM CA that verifies this server's serving certificate, written into relayed webhooks' caBundle. Defaults to the generated CA; required with --tls-cert-file.")
}

// Validate checks the relay's flags.
func (o *AdmissionRelayOptions) Validate(generateCerts bool) []error {
	if o.Address == "" {
		if o.URL != "" || o.CAFile != "" {
			return []error{errors.New("--admission-relay-url and --admission-relay-ca-file need --admission-relay-address")}
		}
		return nil
	}
	var errs []error
	if _, _, err := net.SplitHostPort(o.Address); err != nil {
		errs = append(errs, fmt.Errorf("--admission-relay-address must be host:port: %w", err))
	}
	if o.URL != "" {
		if u, err := url.Parse(o.URL); err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, errors.New("--admission-relay-url must be an absolute https URL without query"))
		}
	}
	if o.CAFile == "" && !generateCerts {
		errs = append(errs, errors.New("--admission-relay-ca-file is required with --tls-cert-file"))
	}
	return errs
}

// applyAdmissionRelay opens the relay's listener and tells the proxy where targets reach it.
func (o CompletedOptions) applyAdmissionRelay(cfg *mountapiserver.Config, ca *pki.PKI) error {
	r := o.AdmissionRelay
	if r.Address == "" {
		return nil
	}
	caPEM := ca.CACertPEM
	if r.CAFile != "" {
		data, err := os.ReadFile(r.CAFile)
		if err != nil {
			return fmt.Errorf("--admission-relay-ca-file: %w", err)
		}
		caPEM = data
	}
	listener, err := net.Listen("tcp", r.Address)
	if err != nil {
		return fmt.Errorf("--admission-relay-address: %w", err)
	}
	relayURL := r.URL
	if relayURL == "" {
		relayURL = "https://" + listener.Addr().String()
	}
	cfg.Extra.AdmissionRelay = &mountapiserver.AdmissionRelayConfig{Listener: listener}
	cfg.Extra.Proxier.AdmissionRelay = &admissionrelay.Config{URL: relayURL, CABundle: caPEM}
	return nil
}
