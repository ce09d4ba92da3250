package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
)

// commands are the binaries, each as its main package builds its command. A new command is
// made for every --help: cobra keeps parsed flags in the command.
var commands = []func() *cobra.Command{
	func() *cobra.Command { return server.NewCommand(context.Background()) },
	func() *cobra.Command {
		o := agent.NewOptions()
		o.NewAgentHandler = agent.NewCredentialsHandler
		return agent.NewCommand(context.Background(), o)
	},
}

// cobraOwn are the subcommands cobra adds by itself; they are named, not documented.
var cobraOwn = map[string]bool{"help": true, "completion": true}

var (
	// A section of --help: "Generic flags:" (named flag sets), "Flags:", "Global Flags:".
	sectionLine = regexp.MustCompile(`^(\S.*?) [Ff]lags:$|^(Flags):$`)
	// A flag's first line; continuation lines are indented further.
	flagLine = regexp.MustCompile(`^(?:  -[^-], |      )--([^\s=]+)`)
)

type section struct {
	name  string
	flags []*pflag.Flag
}

// flagReference documents every command and subcommand with its flags in the sections of its
// --help, in the order --help lists them, with each flag's type, default and help.
func flagReference() ([]byte, error) {
	var buf, body bytes.Buffer
	buf.WriteString("# Flag reference\n\n" + generatedNote)
	buf.WriteString("Every command's flags, in the groups and the order `--help` shows them.\n\n")
	for _, newCommand := range commands {
		if err := document(&buf, &body, newCommand, nil); err != nil {
			return nil, err
		}
	}
	buf.WriteString("\n")
	buf.Write(body.Bytes())
	return append(bytes.TrimRight(buf.Bytes(), "\n"), '\n'), nil
}

// document writes the command at path below newCommand() and its subcommands.
func document(toc, body *bytes.Buffer, newCommand func() *cobra.Command, path []string) error {
	root := newCommand()
	var help bytes.Buffer
	root.SetOut(&help)
	root.SetErr(&help)
	root.SetArgs(append(append([]string{}, path...), "--help"))
	cmd, err := root.ExecuteC()
	if err != nil {
		return fmt.Errorf("%s --help: %w", strings.Join(append([]string{root.Name()}, path...), " "), err)
	}
	sections, err := parseHelp(cmd, help.String())
	if err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}

	name := cmd.CommandPath()
	fmt.Fprintf(toc, "%s- [%s](#%s)\n", strings.Repeat("  ", len(path)), name, anchor(name))
	fmt.Fprintf(body, "## %s\n\n%s\n\n", name, text(cmd.Short))
	fmt.Fprintf(body, "```text\n%s\n```\n\n", strings.TrimSpace(cmd.UseLine()))
	if cmd.Long != "" {
		fmt.Fprintf(body, "```text\n%s\n```\n\n", strings.TrimSpace(cmd.Long))
	}
	if cmd.Example != "" {
		fmt.Fprintf(body, "Example:\n\n```text\n%s\n```\n\n", strings.TrimRight(cmd.Example, "\n"))
	}
	var own []string
	for _, sub := range cmd.Commands() {
		if cobraOwn[sub.Name()] && sub.IsAvailableCommand() {
			own = append(own, "`"+sub.CommandPath()+"`")
		}
	}
	if len(own) > 0 {
		fmt.Fprintf(body, "Also %s, which cobra provides (shell completion scripts; see its `--help`).\n\n", strings.Join(own, ", "))
	}
	for _, s := range sections {
		heading := s.name + " flags"
		if s.name == "Flags" {
			heading = s.name
		}
		fmt.Fprintf(body, "### %s (%s)\n\n", heading, name)
		var rows [][]string
		for _, f := range s.flags {
			flagName := "`--" + f.Name + "`"
			if f.Shorthand != "" {
				flagName = "`-" + f.Shorthand + "`, " + flagName
			}
			varname, usage := pflag.UnquoteUsage(f)
			if varname == "" {
				varname = f.Value.Type() // bool, which --help leaves out
			}
			def := ""
			if !zeroDefault(f) {
				def = code(f.DefValue)
			}
			rows = append(rows, []string{flagName, code(varname), def, text(usage)})
		}
		table(body, []string{"Flag", "Type", "Default", "Description"}, rows)
	}

	for _, sub := range cmd.Commands() {
		if !sub.IsAvailableCommand() || cobraOwn[sub.Name()] {
			continue
		}
		if err := document(toc, body, newCommand, append(append([]string{}, path...), sub.Name())); err != nil {
			return err
		}
	}
	return nil
}

// parseHelp reads the sections of a command's --help and the flags each lists, and checks
// that every visible flag of the command is in one.
func parseHelp(cmd *cobra.Command, help string) ([]section, error) {
	var sections []section
	listed := map[string]bool{}
	for _, line := range strings.Split(help, "\n") {
		if m := sectionLine.FindStringSubmatch(line); m != nil {
			sections = append(sections, section{name: m[1] + m[2]})
			continue
		}
		m := flagLine.FindStringSubmatch(line)
		if m == nil || len(sections) == 0 {
			continue
		}
		f := cmd.Flags().Lookup(m[1])
		if f == nil {
			f = cmd.InheritedFlags().Lookup(m[1])
		}
		if f == nil {
			return nil, fmt.Errorf("--help lists --%s, which the command does not have", m[1])
		}
		if listed[f.Name] {
			return nil, fmt.Errorf("--help lists --%s twice", f.Name)
		}
		listed[f.Name] = true
		s := &sections[len(sections)-1]
		s.flags = append(s.flags, f)
	}
	var missing []string
	check := func(f *pflag.Flag) {
		if !f.Hidden && !listed[f.Name] {
			missing = append(missing, "--"+f.Name)
		}
	}
	cmd.Flags().VisitAll(check)
	if len(missing) > 0 {
		return nil, fmt.Errorf("--help lists no section with %s", strings.Join(missing, ", "))
	}
	// "Flags" with nothing but --help says nothing.
	var out []section
	for _, s := range sections {
		if len(s.flags) > 0 {
			out = append(out, s)
		}
	}
	return out, nil
}

// zeroDefault says whether a flag's default is its type's zero value, which --help leaves out
// too.
func zeroDefault(f *pflag.Flag) bool {
	switch f.DefValue {
	case "", "0", "0s", "false", "[]", "<nil>", "map[]":
		return true
	}
	return false
}
