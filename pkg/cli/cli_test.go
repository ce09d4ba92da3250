package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
)

func newTestCommand(out *bytes.Buffer) *cobra.Command {
	cmd := &cobra.Command{Use: "tool", Long: "Tool does things.", RunE: func(*cobra.Command, []string) error { return errors.New("the flag --x is wrong") }}
	sub := &cobra.Command{Use: "sub", Short: "A subcommand", RunE: func(*cobra.Command, []string) error { return errors.New("--user is required") }}
	OwnHelp(sub)
	cmd.AddCommand(sub)
	var fss cliflag.NamedFlagSets
	fss.FlagSet("misc").String("name", "", "A name.")
	AddVersion(cmd, fss.FlagSet("global"))
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	SetUsageAndHelpFunc(cmd, fss, 100)
	cmd.SetOut(out)
	cmd.SetErr(out)
	return cmd
}

// TestRunPrintsPlainErrors: errors after logging was set up (every subcommand's, the
// options' validation) were klog lines ("E1126 10:00:00.000000 1 run.go:72] "command
// failed" err=...").
func TestRunPrintsPlainErrors(t *testing.T) {
	for args, want := range map[string]string{"": "Error: the flag --x is wrong\n", "sub": "Error: --user is required\n"} {
		var out bytes.Buffer
		cmd := newTestCommand(&out)
		cmd.SetArgs(strings.Fields(args))
		if code := Run(cmd); code != 1 || out.String() != want {
			t.Errorf("%q: exit %d, %q; want 1, %q", args, code, out.String(), want)
		}
	}
}

func TestHelpListsSubcommands(t *testing.T) {
	var out bytes.Buffer
	cmd := newTestCommand(&out)
	cmd.SetArgs([]string{"--help"})
	if code := Run(cmd); code != 0 {
		t.Fatalf("exit %d\n%s", code, out.String())
	}
	for _, want := range []string{"Tool does things.\n\nUsage:\n  tool [flags]\n  tool [command]\n\nAvailable Commands:\n", "\n  sub ", "A subcommand\n", "\n  version ", "Print the version\n",
		`Use "tool [command] --help" for more about a command.`, "Misc flags:", "--name string", "Global flags:", "--version"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var out bytes.Buffer
		cmd := newTestCommand(&out)
		cmd.SetArgs(args)
		if code := Run(cmd); code != 0 || !strings.HasPrefix(out.String(), "tool v0.0.0-devel (Kubernetes v1.") {
			t.Errorf("%v: exit %d, %q", args, code, out.String())
		}
	}
	var out bytes.Buffer
	cmd := newTestCommand(&out)
	cmd.SetArgs([]string{"version", "extra"})
	if code := Run(cmd); code != 1 || !strings.Contains(out.String(), `Error: unknown command "extra" for "tool version"`) {
		t.Errorf("version extra: exit %d, %q", code, out.String())
	}
}
