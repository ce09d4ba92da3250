package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
)

// File names below the PKI directory.
const (
	CACertFile      = "ca.crt"
	CAKeyFile       = "ca.key"
	ServingCertFile = "serving.crt"
	ServingKeyFile  = "serving.key"
	AdminCertFile   = "admin.crt"
	AdminKeyFile    = "admin.key"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// renewBefore renews leaf certificates that would expire within this time.
	renewBefore = 30 * 24 * time.Hour

	// AdminUser is the user of the admin kubeconfig.
	AdminUser = "mount-admin"
)

// AdminGroup is the group of the admin kubeconfig. It is not system:masters, which mounts
// never impersonate: the admin must be able to proxy through Impersonate mounts.
const AdminGroup = authorization.AdminsGroup

// PKI is the standalone credential set, loaded or created in Dir.
type PKI struct {
	Dir       string
	CACertPEM []byte

	ca *CA
}

// CA signs certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// NewCA creates a self-signed CA valid for ten years.
func NewCA(commonName string) (*CA, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: commonName}, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(cert)}, nil
}

// Issue signs a new key for template, which names the subject, SANs and extended key usages;
// serial number and validity (one year) are filled in. It returns the certificate and the key.
func (ca *CA) Issue(template *x509.Certificate) (*x509.Certificate, crypto.Signer, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("creating serial number: %w", err)
	}
	now := time.Now()
	template.SerialNumber = serial
	template.NotBefore = now.Add(-5 * time.Minute).UTC()
	template.NotAfter = now.Add(leafValidity).UTC()
	template.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, template, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing signed certificate: %w", err)
	}
	return cert, key, nil
}

// IssuePEM is Issue with PEM-encoded results, as kubeconfigs and files want them.
func (ca *CA) IssuePEM(template *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	cert, key, err := ca.Issue(template)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding key: %w", err)
	}
	return encodeCert(cert), keyPEM, nil
}

// WriteFiles writes a certificate and its key, the key readable by the owner only.
func WriteFiles(certPath, keyPath string, cert *x509.Certificate, key crypto.Signer) error {
	return write(certPath, keyPath, cert, key)
}

// Ensure loads the CA from dir or creates it, then makes sure a serving certificate valid for
// hosts and ips and an admin client certificate exist.
func Ensure(dir string, hosts []string, ips []net.IP) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating PKI directory: %w", err)
	}
	p := &PKI{Dir: dir}
	if err := p.ensureCA(); err != nil {
		return nil, err
	}
	if err := p.ensureLeaf(ServingCertFile, ServingKeyFile, func(c *x509.Certificate) bool {
		return coversAll(c, hosts, ips)
	}, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "mount-apiserver"},
		DNSNames:    hosts,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	// An admin certificate of another group (system:masters before) is issued anew.
	if err := p.ensureLeaf(AdminCertFile, AdminKeyFile, func(c *x509.Certificate) bool {
		return slices.Equal(c.Subject.Organization, []string{AdminGroup})
	}, &x509.Certificate{
		Subject:     pkix.Name{CommonName: AdminUser, Organization: []string{AdminGroup}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, fmt.Errorf("admin client certificate: %w", err)
	}
	return p, nil
}

// Path returns the path of a file of the PKI.
func (p *PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

func (p *PKI) ensureCA() error {
	certPath, keyPath := p.Path(CACertFile), p.Path(CAKeyFile)
	cert, key, err := load(certPath, keyPath)
	switch {
	case err == nil && time.Now().Add(renewBefore).Before(cert.NotAfter) && cert.IsCA:
	case err == nil || errors.Is(err, os.ErrNotExist):
		// A new CA invalidates every certificate it signed; the leaves are renewed below
		// because they no longer verify against it.
		ca, err := NewCA("mount-apiserver-ca")
		if err != nil {
			return err
		}
		if err := write(certPath, keyPath, ca.Cert, ca.Key); err != nil {
			return err
		}
		cert, key = ca.Cert, ca.Key
	default:
		return fmt.Errorf("loading CA from %s: %w", p.Dir, err)
	}
	p.ca = &CA{Cert: cert, Key: key, CertPEM: encodeCert(cert)}
	p.CACertPEM = p.ca.CertPEM
	return nil
}

// ensureLeaf keeps an existing certificate that the CA signed, that is not about to expire
// and that fits, or creates a new one from template.
func (p *PKI) ensureLeaf(certFile, keyFile string, fits func(*x509.Certificate) bool, template *x509.Certificate) error {
	certPath, keyPath := p.Path(certFile), p.Path(keyFile)
	cert, _, err := load(certPath, keyPath)
	if err == nil && cert.CheckSignatureFrom(p.ca.Cert) == nil &&
		time.Now().Add(renewBefore).Before(cert.NotAfter) && (fits == nil || fits(cert)) {
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("loading %s: %w", certPath, err)
	}
	cert, key, err := p.ca.Issue(template)
	if err != nil {
		return err
	}
	return write(certPath, keyPath, cert, key)
}

// Load loads an existing PKI from dir without creating or renewing anything.
func Load(dir string) (*PKI, error) {
	cert, key, err := load(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("loading the CA of %s (has the server run with this root directory?): %w", dir, err)
	}
	p := &PKI{Dir: dir, ca: &CA{Cert: cert, Key: key, CertPEM: encodeCert(cert)}}
	p.CACertPEM = p.ca.CertPEM
	return p, nil
}

// WriteAdminKubeconfig writes a kubeconfig for the admin that talks to server. With
// trustCA the kubeconfig trusts this PKI's CA for the server; without it, the system's roots
// (the server presents a certificate of the user's own).
func (p *PKI) WriteAdminKubeconfig(path, server string, trustCA bool) error {
	certPEM, err := os.ReadFile(p.Path(AdminCertFile))
	if err != nil {
		return fmt.Errorf("reading admin certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(p.Path(AdminKeyFile))
	if err != nil {
		return fmt.Errorf("reading admin key: %w", err)
	}
	data, err := p.kubeconfig(server, AdminUser, certPEM, keyPEM, trustCA)
	if err != nil {
		return err
	}
	return writeAtomic(path, data, 0o600)
}

// UserKubeconfig issues a client certificate for userName in groups (valid for a year) and
// returns a kubeconfig with it for server.
func (p *PKI) UserKubeconfig(server, userName string, groups []string, trustCA bool) ([]byte, error) {
	if userName == "" {
		return nil, fmt.Errorf("a user name is required")
	}
	certPEM, keyPEM, err := p.ca.IssuePEM(&x509.Certificate{
		Subject:     pkix.Name{CommonName: userName, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("issuing a client certificate for %q: %w", userName, err)
	}
	return p.kubeconfig(server, userName, certPEM, keyPEM, trustCA)
}

func (p *PKI) kubeconfig(server, userName string, certPEM, keyPEM []byte, trustCA bool) ([]byte, error) {
	const name = "mount-apiserver"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server}
	if trustCA {
		cfg.Clusters[name].CertificateAuthorityData = p.CACertPEM
	}
	cfg.AuthInfos[userName] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: userName}
	cfg.CurrentContext = name
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding kubeconfig: %w", err)
	}
	return data, nil
}

func coversAll(c *x509.Certificate, hosts []string, ips []net.IP) bool {
	for _, h := range hosts {
		if !slices.Contains(c.DNSNames, h) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

func newKey() (crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	return key, nil
}

func load(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	certs, err := certutil.CertsFromFile(certPath)
	if err != nil {
		if _, statErr := os.Stat(certPath); errors.Is(statErr, os.ErrNotExist) {
			return nil, nil, statErr
		}
		return nil, nil, err
	}
	keyAny, err := keyutil.PrivateKeyFromFile(keyPath)
	if err != nil {
		if _, statErr := os.Stat(keyPath); errors.Is(statErr, os.ErrNotExist) {
			return nil, nil, statErr
		}
		return nil, nil, err
	}
	key, ok := keyAny.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("key in %s cannot sign", keyPath)
	}
	return certs[0], key, nil
}

func write(certPath, keyPath string, cert *x509.Certificate, key crypto.Signer) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return fmt.Errorf("encoding key: %w", err)
	}
	if err := writeAtomic(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(certPath, encodeCert(cert), 0o644)
}

func encodeCert(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: cert.Raw})
}

// writeAtomic writes through a temporary file and a rename, so that a crash never leaves a
// half-written key or kubeconfig behind.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
