package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	componentcli "k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/kcp-dev/mount-apiserver/pkg/version"
)

// Run executes cmd and returns the process's exit code. An error is printed as a plain line on
// the command's error stream: component-base's cli.Run prints it as a klog line ("E1126 ...
// command failed") once logging is set up, which is every error of a subcommand and of the
// options' validation.
func Run(cmd *cobra.Command) int {
	if err := componentcli.RunNoErrOutput(cmd); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "Error: %v\n", err)
		return 1
	}
	return 0
}

// SetUsageAndHelpFunc is component-base's, with the subcommands listed between the usage line
// and the flags, which component-base's help leaves out.
func SetUsageAndHelpFunc(cmd *cobra.Command, fss cliflag.NamedFlagSets, cols int) {
	usage := func(c *cobra.Command, out io.Writer) {
		fmt.Fprintf(out, "Usage:\n  %s\n", c.UseLine())
		if c.HasAvailableSubCommands() {
			fmt.Fprintf(out, "  %s [command]\n\nAvailable Commands:\n", c.CommandPath())
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					fmt.Fprintf(out, "  %s %s\n", pad(sub.Name(), sub.NamePadding()), sub.Short)
				}
			}
			fmt.Fprintf(out, "\nUse \"%s [command] --help\" for more about a command.\n", c.CommandPath())
		}
		cliflag.PrintSections(out, fss, cols)
	}
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		usage(c, c.OutOrStderr())
		return nil
	})
	cmd.SetHelpFunc(func(c *cobra.Command, _ []string) {
		fmt.Fprintf(c.OutOrStdout(), "%s\n\n", c.Long)
		usage(c, c.OutOrStdout())
	})
}

func pad(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return s + strings.Repeat(" ", n-len(s))
}

// AddVersion gives cmd a --version flag in fs and a version subcommand: both print
// version.String. The subcommand gets cobra's own help, not cmd's grouped flags.
func AddVersion(cmd *cobra.Command, fs *pflag.FlagSet) {
	var show bool
	fs.BoolVar(&show, "version", false, "Print the version and exit.")
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if show {
			_, err := fmt.Fprintln(c.OutOrStdout(), version.String(c.Name()))
			return err
		}
		return run(c, args)
	}
	sub := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Long:  "Prints the version of " + cmd.Name() + ", the Kubernetes version it builds on, and the commit.",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(c.OutOrStdout(), version.String(cmd.Name()))
			return err
		},
	}
	OwnHelp(sub)
	cmd.AddCommand(sub)
}

// OwnHelp gives a subcommand cobra's default help and usage: its parent's grouped help would
// list the parent's flags.
func OwnHelp(cmd *cobra.Command) {
	defaults := &cobra.Command{}
	cmd.SetUsageFunc(defaults.UsageFunc())
	cmd.SetHelpFunc(defaults.HelpFunc())
}
