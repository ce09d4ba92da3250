package proxy

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
)

// FuzzKubeconfig feeds arbitrary Secret data to both readers of a Mount's kubeconfig: the
// proxy's ConfigFromKubeconfig and the admission check ValidateKubeconfig. Properties:
//   - an accepted kubeconfig yields a config with inline credentials only: no file, exec
//     plugin, auth provider, proxy, impersonation or skipped TLS verification, and an
//     absolute http(s) server without user information;
//   - what the proxy accepts, admission parses too (it may refuse the target, never the file);
//   - refusals are ErrCredentials, and admission's errors sit at the given field path;
//   - no error quotes a token, password or key of the kubeconfig.
//
// The seed corpus is testdata/fuzz/FuzzKubeconfig.
func FuzzKubeconfig(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:6443', certificate-authority-data: Y2E=}\nusers:\n- name: u\n  user: {token: s3cr3t-token}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"))
	policy := targetpolicy.New(targetpolicy.Config{})
	fldPath := field.NewPath("spec", "ref")
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ConfigFromKubeconfig(data)
		errs := policy.ValidateKubeconfig(fldPath, data)
		for _, e := range errs {
			if e.Field != "spec.ref" {
				t.Fatalf("ValidateKubeconfig error at %q, want spec.ref: %v", e.Field, e)
			}
		}

		// The credentials the file holds, if it parses at all, must appear in no error.
		var secrets []string
		if kc, lerr := clientcmd.Load(data); lerr == nil {
			for _, a := range kc.AuthInfos {
				if a == nil {
					continue
				}
				secrets = append(secrets, a.Token, a.Password, string(a.ClientKeyData))
			}
		}
		messages := errs.ToAggregate()
		for _, s := range secrets {
			if len(s) < 8 {
				continue // too short to tell apart from the words of a message
			}
			if err != nil && strings.Contains(err.Error(), s) {
				t.Fatalf("ConfigFromKubeconfig's error quotes a credential: %v", err)
			}
			if messages != nil && strings.Contains(messages.Error(), s) {
				t.Fatalf("ValidateKubeconfig's error quotes a credential: %v", messages)
			}
		}

		if err != nil {
			if !errors.Is(err, ErrCredentials) {
				t.Fatalf("refusal is not ErrCredentials: %v", err)
			}
			return
		}
		for _, e := range errs {
			if e.Type == field.ErrorTypeInvalid {
				t.Fatalf("the proxy accepts a kubeconfig admission cannot read: %v", e)
			}
		}
		switch {
		case cfg.ExecProvider != nil, cfg.AuthProvider != nil:
			t.Fatalf("accepted a kubeconfig that runs code or calls a provider: %+v", cfg)
		case cfg.CAFile != "", cfg.CertFile != "", cfg.KeyFile != "", cfg.BearerTokenFile != "":
			t.Fatalf("accepted a kubeconfig that names files: %+v", cfg)
		case cfg.Insecure, cfg.Proxy != nil, cfg.Impersonate.UserName != "", len(cfg.Impersonate.Groups) > 0, cfg.Impersonate.UID != "", len(cfg.Impersonate.Extra) > 0:
			t.Fatalf("accepted a kubeconfig that weakens TLS, proxies or impersonates: %+v", cfg)
		case (cfg.CertData == nil) != (cfg.KeyData == nil):
			t.Fatalf("accepted a certificate without its key or the reverse")
		}
		u, perr := url.Parse(cfg.Host)
		if perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			t.Fatalf("accepted server %q", cfg.Host)
		}
	})
}
