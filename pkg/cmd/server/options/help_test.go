package options

import (
	"path/filepath"
	"testing"
)

// TestCertDir: --help says <root-directory>/pki, and that is where the certificates go unless
// --cert-dir names another directory.
func TestCertDir(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct{ flag, want string }{
		{"", filepath.Join(root, "pki")},
		{"/etc/mount-apiserver/pki", "/etc/mount-apiserver/pki"},
	} {
		o := NewOptions()
		o.RootDirectory = root
		if c.flag != "" {
			fss := o.Flags()
			if err := fss.FlagSet("secure serving").Set("cert-dir", c.flag); err != nil {
				t.Fatal(err)
			}
		}
		completed, err := o.Complete()
		if err != nil {
			t.Fatal(err)
		}
		if got := completed.SecureServing.ServerCert.CertDirectory; got != c.want {
			t.Errorf("--cert-dir=%q: certificates in %s, want %s", c.flag, got, c.want)
		}
	}
}
