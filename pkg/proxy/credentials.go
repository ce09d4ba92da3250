package proxy

import (
	"errors"
	"fmt"
	"net/url"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcp-dev/mount-apiserver/pkg/yamlbound"
)

// ErrCredentials marks a kubeconfig the proxy refuses. Messages never contain credential bytes.
var ErrCredentials = errors.New("unusable kubeconfig")

// MaxKubeconfigBytes bounds the kubeconfig of a Mount's Secret: room for a CA bundle as large
// as spec.caBundle may be (256 KiB, a third more in base64) plus a client certificate and key.
// Secrets may hold 1 MiB, which takes a third of a second of CPU to parse. YAML aliases that
// would expand it beyond twice that are refused before it is parsed: clientcmd converts the
// whole file to JSON, and 140 KB of aliases of one string were 411 MiB of it.
const MaxKubeconfigBytes = 512 * 1024

// ConfigFromKubeconfig turns the kubeconfig of a Mount's Secret into a client configuration
// for its current context. Only static, inline credentials are accepted: tokens, client
// certificates and CA data. Exec plugins and auth providers would run code or reach other
// services on this server; file references would read this server's files (its own
// service-account token, say) and send them to the target.
func ConfigFromKubeconfig(data []byte) (*rest.Config, error) {
	if len(data) > MaxKubeconfigBytes {
		return nil, fmt.Errorf("%w: it has %d bytes, more than the %d accepted", ErrCredentials, len(data), MaxKubeconfigBytes)
	}
	if err := yamlbound.Check(data, 2*MaxKubeconfigBytes); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		// The decoder's errors may quote the input: say only where it failed.
		return nil, fmt.Errorf("%w: it does not parse as a kubeconfig", ErrCredentials)
	}
	name := kc.CurrentContext
	ctx, ok := kc.Contexts[name]
	if !ok {
		return nil, fmt.Errorf("%w: current context %q does not exist", ErrCredentials, name)
	}
	cluster, ok := kc.Clusters[ctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("%w: cluster %q of context %q does not exist", ErrCredentials, ctx.Cluster, name)
	}
	auth, ok := kc.AuthInfos[ctx.AuthInfo]
	if !ok && ctx.AuthInfo != "" {
		return nil, fmt.Errorf("%w: user %q of context %q does not exist", ErrCredentials, ctx.AuthInfo, name)
	}
	if err := checkInline(cluster, auth); err != nil {
		return nil, err
	}
	u, err := url.Parse(cluster.Server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%w: cluster %q has no absolute http(s) server URL", ErrCredentials, ctx.Cluster)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: cluster %q has credentials in its server URL", ErrCredentials, ctx.Cluster)
	}
	if cluster.InsecureSkipTLSVerify {
		return nil, fmt.Errorf("%w: cluster %q sets insecure-skip-tls-verify; TLS verification is never turned off", ErrCredentials, ctx.Cluster)
	}
	if cluster.ProxyURL != "" {
		return nil, fmt.Errorf("%w: cluster %q sets proxy-url, which is not supported", ErrCredentials, ctx.Cluster)
	}

	cfg := &rest.Config{
		Host: cluster.Server,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: cluster.TLSServerName,
			CAData:     cluster.CertificateAuthorityData,
		},
	}
	if auth != nil {
		cfg.BearerToken = auth.Token
		cfg.Username, cfg.Password = auth.Username, auth.Password
		cfg.CertData, cfg.KeyData = auth.ClientCertificateData, auth.ClientKeyData
	}
	return cfg, nil
}

func checkInline(cluster *clientcmdapi.Cluster, auth *clientcmdapi.AuthInfo) error {
	if cluster.CertificateAuthority != "" {
		return fmt.Errorf("%w: certificate-authority names a file; use certificate-authority-data", ErrCredentials)
	}
	if auth == nil {
		return nil
	}
	switch {
	case auth.Exec != nil:
		return fmt.Errorf("%w: exec credential plugins are not run by this server; use a token or client certificate", ErrCredentials)
	case auth.AuthProvider != nil:
		return fmt.Errorf("%w: auth providers are not supported; use a token or client certificate", ErrCredentials)
	case auth.TokenFile != "":
		return fmt.Errorf("%w: tokenFile names a file; put the token inline", ErrCredentials)
	case auth.ClientCertificate != "" || auth.ClientKey != "":
		return fmt.Errorf("%w: client-certificate/client-key name files; use client-certificate-data/client-key-data", ErrCredentials)
	case auth.Impersonate != "" || len(auth.ImpersonateGroups) > 0 || len(auth.ImpersonateUserExtra) > 0 || auth.ImpersonateUID != "":
		return fmt.Errorf("%w: impersonation in the kubeconfig is not supported; the mount's identity mode decides", ErrCredentials)
	}
	if (auth.ClientCertificateData == nil) != (auth.ClientKeyData == nil) {
		return fmt.Errorf("%w: client-certificate-data and client-key-data go together", ErrCredentials)
	}
	return nil
}
