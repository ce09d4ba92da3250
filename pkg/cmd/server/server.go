package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	// --logging-format=json.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/cli"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/lockfile"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/version"
)

// LockFile, below the root directory, is held by the server that uses the directory.
const LockFile = "mount-apiserver.lock"

// NewCommand returns the mount-apiserver command. It runs until ctx is cancelled.
func NewCommand(ctx context.Context) *cobra.Command {
	o := options.NewOptions()
	cmd := &cobra.Command{
		Use:   "mount-apiserver",
		Short: "Serves the mounts.kcp.io API: remote Kubernetes clusters and kcp workspaces behind one API",
		Long: `mount-apiserver serves the mounts.kcp.io API group (kind Mount).

With no flags it runs standalone: an embedded etcd and generated certificates under
--root-directory, the API on https://127.0.0.1:6443, and an admin kubeconfig written to
<root-directory>/admin.kubeconfig. --etcd-servers switches to an external etcd.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return fmt.Errorf("unexpected arguments: %q", args)
			}
			// Logging is process-wide, so it is applied here and not in Run, which tests call
			// many times in one process.
			if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
				return err
			}
			return Run(cmd.Context(), o)
		},
	}
	cmd.SetContext(ctx)
	cmd.AddCommand(newKubeconfigCommand(), newCACommand())

	fss := o.Flags()
	// The logs flag set has -v and the other logging flags already.
	globalflag.AddGlobalFlags(fss.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	cli.AddVersion(cmd, fss.FlagSet("global"))
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cli.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

// Run completes and validates o, builds the server and serves until ctx is cancelled.
func Run(ctx context.Context, o *options.Options) error {
	completed, err := o.Complete()
	if err != nil {
		return err
	}
	if err := completed.Validate(); err != nil {
		return err
	}
	logger := klog.Background().WithName("mount-apiserver")
	ctx = klog.NewContext(ctx, logger)
	tunnel.BridgeLogrus(logger)

	// A second server on the same directory would wait for the first one's etcd database lock
	// for as long as the first one runs, deaf to signals; it fails at once instead.
	lock, err := lockRootDirectory(completed.RootDirectory)
	if err != nil {
		return err
	}
	defer func() {
		if err := lock.Release(); err != nil {
			logger.Error(err, "Releasing the root directory lock")
		}
	}()

	info := version.Get()
	logger.Info("Starting mount-apiserver", "version", info.GitVersion, "kubernetes", version.Kubernetes(nil), "rootDirectory", completed.RootDirectory)
	cfg, err := completed.Config(ctx)
	if err != nil {
		return err
	}
	cfg.Generic.EffectiveVersion = version.Effective(cfg.Generic.EffectiveVersion)
	server, err := cfg.Complete().New()
	if err != nil {
		cfg.Close()
		return err
	}
	return server.Run(ctx)
}

// lockRootDirectory creates the root directory and locks it for this process.
func lockRootDirectory(root string) (*lockfile.Lock, error) {
	// Only this process may read what the server keeps there (keys, etcd data).
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("creating root directory: %w", err)
	}
	lock, err := lockfile.Acquire(filepath.Join(root, LockFile))
	if errors.Is(err, lockfile.ErrInUse) {
		return nil, fmt.Errorf("root directory %s in use (%w); stop that mount-apiserver, or choose another --root-directory", root, err)
	}
	if err != nil {
		return nil, fmt.Errorf("locking root directory %s: %w", root, err)
	}
	return lock, nil
}
