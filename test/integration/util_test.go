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
