package integration

import (
	"regexp"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
)

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// apiOnly turns the status controller off: these tests write status themselves and check
// exactly what they wrote.
func apiOnly(o *options.Options) { o.StatusController = false }

func clientcmdConfig(kubeconfig []byte) (*rest.Config, error) {
	return clientcmd.RESTConfigFromKubeConfig(kubeconfig)
}
