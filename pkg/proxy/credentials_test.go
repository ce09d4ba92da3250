package proxy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func kubeconfig(t *testing.T, mutate func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo)) []byte {
	t.Helper()
	c := clientcmdapi.NewConfig()
	cluster := &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443", CertificateAuthorityData: []byte("ca")}
	auth := &clientcmdapi.AuthInfo{Token: "s3cr3t-token"}
	if mutate != nil {
		mutate(cluster, auth)
	}
	c.Clusters["c"], c.AuthInfos["u"] = cluster, auth
	c.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	c.CurrentContext = "ctx"
	data, err := clientcmd.Write(*c)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestConfigFromKubeconfig(t *testing.T) {
	cfg, err := ConfigFromKubeconfig(kubeconfig(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "s3cr3t-token" || string(cfg.CAData) != "ca" {
		t.Errorf("unexpected config: %+v", cfg)
	}
	certCfg, err := ConfigFromKubeconfig(kubeconfig(t, func(_ *clientcmdapi.Cluster, a *clientcmdapi.AuthInfo) {
		a.Token, a.ClientCertificateData, a.ClientKeyData = "", []byte("cert"), []byte("key")
	}))
	if err != nil || string(certCfg.CertData) != "cert" || string(certCfg.KeyData) != "key" {
		t.Errorf("client certificate kubeconfig: %v %+v", err, certCfg)
	}

	refused := map[string]func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo){
		"exec plugin": func(_ *clientcmdapi.Cluster, a *clientcmdapi.AuthInfo) {
			a.Exec = &clientcmdapi.ExecConfig{Command: "/bin/steal"}
		},
		"auth provider": func(_ *clientcmdapi.Cluster, a *clientcmdapi.AuthInfo) {
			a.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"}
		},
		"token file": func(_ *clientcmdapi.Cluster, a *clientcmdapi.AuthInfo) {
			a.TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		},
		"client cert file":   func(_ *clientcmdapi.Cluster, a *clientcmdapi.AuthInfo) { a.ClientCertificate = "/etc/cert" },
		"CA file":            func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.CertificateAuthority = "/etc/ca" },
		"insecure":           func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.InsecureSkipTLSVerify = true },
		"proxy URL":          func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.ProxyURL = "http://127.0.0.1:3128" },
		"impersonation":      func(_ *clientcmdapi.Cluster, a *clientcmdapi.AuthInfo) { a.Impersonate = "admin" },
		"relative server":    func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = "/api" },
		"userinfo in URL":    func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = "https://u:p@127.0.0.1" },
		"cert without key":   func(_ *clientcmdapi.Cluster, a *clientcmdapi.AuthInfo) { a.ClientCertificateData = []byte("cert") },
		"unsupported scheme": func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = "ftp://127.0.0.1" },
	}
	for name, mutate := range refused {
		_, err := ConfigFromKubeconfig(kubeconfig(t, mutate))
		if !errors.Is(err, ErrCredentials) {
			t.Errorf("%s: got %v, want ErrCredentials", name, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: error leaks the token: %v", name, err)
		}
	}
	if _, err := ConfigFromKubeconfig([]byte("token: s3cr3t-token\n\tgarbage: [")); !errors.Is(err, ErrCredentials) || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("garbage: %v", err)
	}
}

// TestConfigFromKubeconfigTooLarge: a kubeconfig beyond MaxKubeconfigBytes is refused before
// it is parsed, with an error that names sizes, never content.
func TestConfigFromKubeconfigTooLarge(t *testing.T) {
	huge := kubeconfig(t, func(_ *clientcmdapi.Cluster, a *clientcmdapi.AuthInfo) {
		a.Token = "s3cr3t-" + strings.Repeat("x", 1<<20)
	})
	start := time.Now()
	_, err := ConfigFromKubeconfig(huge)
	elapsed := time.Since(start)
	if !errors.Is(err, ErrCredentials) || !strings.Contains(fmt.Sprint(err), "bytes") {
		t.Fatalf("a %d-byte kubeconfig: err %v, want a refusal that names its size", len(huge), err)
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("the error quotes the kubeconfig: %.200s", err)
	}
	t.Logf("refused a %d-byte kubeconfig in %v: %v", len(huge), elapsed, err)
}

// TestConfigFromKubeconfigAliases: a kubeconfig whose YAML aliases repeat a large string (140
// KB standing for 411 MiB of JSON, which clientcmd made and parsed in 40 s) is refused before
// it is parsed.
func TestConfigFromKubeconfigAliases(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Config\nx: &a " + strings.Repeat("z", 100<<10) + "\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    extensions:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "    - name: e%d\n      extension: *a\n", i)
	}
	start := time.Now()
	_, err := ConfigFromKubeconfig([]byte(b.String()))
	if !errors.Is(err, ErrCredentials) || !strings.Contains(err.Error(), "aliases expand") || time.Since(start) > 5*time.Second {
		t.Fatalf("%v after %v, want a refusal of the aliases", err, time.Since(start))
	}
}
