package pki

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
)

var loopback = []net.IP{net.ParseIP("127.0.0.1")}

func TestEnsureCreatesAndReuses(t *testing.T) {
	dir := t.TempDir()
	p, err := Ensure(dir, []string{"localhost"}, loopback)
	if err != nil {
		t.Fatal(err)
	}
	serving := readFile(t, p.Path(ServingCertFile))
	admin := readFile(t, p.Path(AdminCertFile))

	certs, err := certutil.ParseCertsPEM(admin)
	if err != nil {
		t.Fatal(err)
	}
	if certs[0].Subject.CommonName != AdminUser || len(certs[0].Subject.Organization) != 1 || certs[0].Subject.Organization[0] != AdminGroup {
		t.Errorf("admin subject = %v", certs[0].Subject)
	}
	for _, f := range []string{CAKeyFile, ServingKeyFile, AdminKeyFile} {
		st, err := os.Stat(p.Path(f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}

	again, err := Ensure(dir, []string{"localhost"}, loopback)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.CACertPEM, p.CACertPEM) || !bytes.Equal(serving, readFile(t, p.Path(ServingCertFile))) || !bytes.Equal(admin, readFile(t, p.Path(AdminCertFile))) {
		t.Error("a restart with the same addresses replaced certificates")
	}

	// A new address renews the serving certificate only.
	if _, err := Ensure(dir, []string{"localhost"}, append(loopback, net.ParseIP("10.0.0.1"))); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(serving, readFile(t, p.Path(ServingCertFile))) {
		t.Error("serving certificate not renewed for a new address")
	}
	if !bytes.Equal(admin, readFile(t, p.Path(AdminCertFile))) {
		t.Error("admin certificate renewed without reason")
	}
}

func TestEnsureRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CACertFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CAKeyFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(dir, nil, loopback); err == nil {
		t.Error("a corrupt CA was silently replaced; it must be reported")
	}
}

func TestWriteAdminKubeconfig(t *testing.T) {
	dir := t.TempDir()
	p, err := Ensure(dir, []string{"localhost"}, loopback)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "admin.kubeconfig")
	if err := p.WriteAdminKubeconfig(path, "https://127.0.0.1:6443", true); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || !bytes.Equal(cfg.CAData, p.CACertPEM) || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 {
		t.Errorf("unexpected kubeconfig: host %q, CA %d bytes, cert %d bytes", cfg.Host, len(cfg.CAData), len(cfg.CertData))
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600", st.Mode().Perm())
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
