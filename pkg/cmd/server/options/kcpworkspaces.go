package options

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
)

// applyKcpWorkspaces lets the proxy serve Workspace and Redirect mounts in kcp mode with
// --kcp-kubeconfig: workspaces are resolved, and Workspace mounts proxied, with the provider's
// credentials for kcp. Without it both types answer UnsupportedType.
func (o CompletedOptions) applyKcpWorkspaces(p *proxy.Proxier) error {
	if !o.KcpMode || o.Kcp.Kubeconfig == "" {
		return nil
	}
	cfg, err := o.kcpConfig()
	if err != nil {
		return err
	}
	resolver, err := kcp.NewWorkspaceResolver(cfg, kcp.ResolverOptions{})
	if err != nil {
		return fmt.Errorf("--kcp-kubeconfig %s: %w", o.Kcp.Kubeconfig, err)
	}
	p.Workspaces, p.Kcp = resolver, cfg
	return nil
}

// kcpConfig loads --kcp-kubeconfig, the provider's identity in kcp, for every use of it
// (workspaces, Workspace mounts, access reviews, the APIExport's virtual workspace). Its
// clients carry static credentials only: a token (or token file), basic auth, or a client
// certificate; impersonation is the proxy's, per caller.
func (o CompletedOptions) kcpConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kcp.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading --kcp-kubeconfig %s: %w", o.Kcp.Kubeconfig, err)
	}
	switch {
	case cfg.ExecProvider != nil || cfg.AuthProvider != nil:
		return nil, fmt.Errorf("--kcp-kubeconfig %s: exec plugins and auth providers are not supported; use a token, token file or client certificate", o.Kcp.Kubeconfig)
	case cfg.Impersonate.UserName != "" || len(cfg.Impersonate.Groups) > 0 || len(cfg.Impersonate.Extra) > 0 || cfg.Impersonate.UID != "":
		return nil, fmt.Errorf("--kcp-kubeconfig %s: impersonation in the kubeconfig is not supported; the proxy impersonates each caller", o.Kcp.Kubeconfig)
	}
	return cfg, nil
}
