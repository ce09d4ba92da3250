package agent

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	// --logging-format=json.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/cli"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// NewCommand returns the mount-agent command. It runs until ctx is cancelled (SIGTERM).
func NewCommand(ctx context.Context, o *Options) *cobra.Command {
	logOptions := logs.NewOptions()
	cmd := &cobra.Command{
		Use:   "mount-agent",
		Short: "Opens a Mount's reverse tunnel to mount-apiserver, for a cluster the server cannot reach",
		Long: `mount-agent runs next to a Kubernetes cluster that mount-apiserver cannot reach (behind NAT
or a firewall). It dials out to the server's mounts/<name>/attach subresource with
--hub-kubeconfig and keeps that session up; the server then reaches the cluster through it.
The agent dials only its --target (default: the in-cluster kube-apiserver) for the server.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return fmt.Errorf("unexpected arguments: %q", args)
			}
			if err := logsapi.ValidateAndApply(logOptions, nil); err != nil {
				return err
			}
			return Run(cmd.Context(), o)
		},
	}
	cmd.SetContext(ctx)
	fss := o.Flags()
	logsapi.AddFlags(logOptions, fss.FlagSet("logs"))
	globalflag.AddGlobalFlags(fss.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	cli.AddVersion(cmd, fss.FlagSet("global"))
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cli.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

// Run completes and validates o and runs the agent until ctx ends.
func Run(ctx context.Context, o *Options) error {
	completed, err := o.Complete()
	if err != nil {
		return err
	}
	if err := completed.Validate(); err != nil {
		return err
	}
	cfg, err := completed.Config()
	if err != nil {
		return err
	}
	logger := klog.Background().WithName("mount-agent")
	ctx = klog.NewContext(ctx, logger)
	tunnel.BridgeLogrus(logger)
	a, err := New(cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
