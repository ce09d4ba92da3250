package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// apiOnly turns the status controller off: these tests write status themselves and check
// exactly what they wrote.
func apiOnly(o *options.Options) { o.StatusController = false }

// kcpAPIOnly runs kcp mode without the status controller; status.URL points at a front-proxy
// mapping no test reaches (kcp mode needs --external-base-url).
func kcpAPIOnly(o *options.Options) {
	o.KcpMode = true
	o.ExternalBaseURL = "https://kcp.invalid/services/mounts"
	apiOnly(o)
}

func clientcmdConfig(kubeconfig []byte) (*rest.Config, error) {
	return clientcmd.RESTConfigFromKubeConfig(kubeconfig)
}

// userKubeconfigFile writes a kubeconfig of a new user of s's CA, for server (s itself or a
// mount's URL), readable by the owner only, and returns its path.
func userKubeconfigFile(t *testing.T, s *framework.Server, server, user string, groups ...string) string {
	t.Helper()
	ca, err := pki.Load(filepath.Join(s.RootDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := ca.UserKubeconfig(server, user, groups, true)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
