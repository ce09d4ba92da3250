package options

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
)

// TestApplyKcpWorkspaces: --kcp-kubeconfig gives the proxy a resolver and the provider's
// configuration in kcp mode only, and refuses kubeconfigs the proxy could not use as they say.
func TestApplyKcpWorkspaces(t *testing.T) {
	write := func(server string, auth *clientcmdapi.AuthInfo) string {
		kc := clientcmdapi.NewConfig()
		kc.Clusters["kcp"] = &clientcmdapi.Cluster{Server: server}
		kc.AuthInfos["provider"] = auth
		kc.Contexts["kcp"] = &clientcmdapi.Context{Cluster: "kcp", AuthInfo: "provider"}
		kc.CurrentContext = "kcp"
		path := filepath.Join(t.TempDir(), "kcp.kubeconfig")
		if err := clientcmd.WriteToFile(*kc, path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	token := &clientcmdapi.AuthInfo{Token: "provider"}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("provider"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, kubeconfig string
		kcpMode          bool
		err              string
		served           bool
	}{
		{name: "token", kubeconfig: write("https://kcp.example:6443", token), kcpMode: true, served: true},
		{name: "token file", kubeconfig: write("https://kcp.example:6443/", &clientcmdapi.AuthInfo{TokenFile: tokenFile}), kcpMode: true, served: true},
		{name: "not in kcp mode", kubeconfig: write("https://kcp.example:6443", token)},
		{name: "no kubeconfig", kcpMode: true},
		{name: "workspace URL", kubeconfig: write("https://kcp.example:6443/clusters/root", token), kcpMode: true, err: "without /clusters/"},
		{name: "plain http", kubeconfig: write("http://kcp.example", token), kcpMode: true, err: "not an absolute https URL"},
		{name: "exec plugin", kubeconfig: write("https://kcp.example", &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "kubelogin", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}), kcpMode: true, err: "exec plugins"},
		{name: "impersonation", kubeconfig: write("https://kcp.example", &clientcmdapi.AuthInfo{Token: "provider", Impersonate: "someone"}), kcpMode: true, err: "impersonation"},
		{name: "missing file", kubeconfig: filepath.Join(t.TempDir(), "nope"), kcpMode: true, err: "loading --kcp-kubeconfig"},
	} {
		o := CompletedOptions{&completedOptions{Options: NewOptions()}}
		o.KcpMode, o.Kcp.Kubeconfig = c.kcpMode, c.kubeconfig
		p := &proxy.Proxier{}
		err := o.applyKcpWorkspaces(p)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && (p.Workspaces != nil) != c.served:
			t.Errorf("%s: workspaces served %v, want %v", c.name, p.Workspaces != nil, c.served)
		case c.served && (p.Kcp == nil || p.Kcp.Host == ""):
			t.Errorf("%s: no kcp configuration for the proxy", c.name)
		}
	}
}
