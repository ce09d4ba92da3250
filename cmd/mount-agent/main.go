// Command mount-agent opens a Mount's reverse tunnel to mount-apiserver. See docs/firewall.md.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kcp-dev/mount-apiserver/pkg/cli"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	o := agent.NewOptions()
	// Agent-credential mode: tunnel.AddressAgent adds the agent's own credentials.
	o.NewAgentHandler = agent.NewCredentialsHandler
	os.Exit(cli.Run(agent.NewCommand(ctx, o)))
}
