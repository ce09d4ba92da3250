package server

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

// TestHelp reads mount-apiserver --help as a user does.
func TestHelp(t *testing.T) {
	cmd := NewCommand(context.Background())
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	help := out.String()

	// Every flag is listed once.
	seen := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?(--[\w-]+)`).FindAllStringSubmatch(help, -1) {
		seen[m[1]]++
	}
	for flag, n := range seen {
		if n != 1 {
			t.Errorf("%s is listed %d times", flag, n)
		}
	}
	for _, flag := range []string{"--v", "--vmodule", "--log-flush-frequency", "--logging-format", "--help", "--cert-dir", "--root-directory"} {
		if seen[flag] == 0 {
			t.Errorf("%s is not listed", flag)
		}
	}

	for _, c := range []struct{ what, pattern string }{
		{"--cert-dir's real default", `--cert-dir string +.*Defaults to <root-directory>/pki\.\n`},
		{"the JSON log format", `--logging-format string +Sets the log format. Permitted formats: "json"`},
		{"that the webhook cache TTL also bounds the client certificate cache", `--authentication-token-webhook-cache-ttl duration +.*client certificate.*0 turns both caches off`},
		{"a feature gate example of this server", `--feature-gates 'ListFromCacheSnapshot=true`},
		{"an emulated version example of this server", `'--emulated-version=kube=1\.36'`},
	} {
		if !regexp.MustCompile(c.pattern).MatchString(help) {
			t.Errorf("--help does not show %s (%s)", c.what, c.pattern)
		}
	}
	// The subcommands are listed (they were not).
	for _, sub := range []string{"kubeconfig", "ca", "version"} {
		if !regexp.MustCompile(`(?m)^Available Commands:\n(?:  .*\n)*  ` + sub + ` +\S`).MatchString(help) {
			t.Errorf("--help does not list the subcommand %s", sub)
		}
	}
	for _, wrong := range []string{"wardle", "apiserver.local.config", "self-signed"} {
		if strings.Contains(help, wrong) {
			t.Errorf("--help mentions %q", wrong)
		}
	}
}

// TestSubcommandHelp: each subcommand's --help lists its own flags and no flag of the server
// (the server's grouped help func is inherited unless a subcommand sets its own).
func TestSubcommandHelp(t *testing.T) {
	for _, sub := range NewCommand(context.Background()).Commands() {
		t.Run(sub.Name(), func(t *testing.T) {
			cmd := NewCommand(context.Background())
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs([]string{sub.Name(), "--help"})
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, m := range regexp.MustCompile(`(?m)^(?:  -\w, |      )--([\w-]+)`).FindAllStringSubmatch(out.String(), -1) {
				listed = append(listed, m[1])
			}
			var own []string
			sub.Flags().VisitAll(func(f *pflag.Flag) { own = append(own, f.Name) })
			own = append(own, "help")
			slices.Sort(listed)
			slices.Sort(own)
			if !slices.Equal(listed, own) {
				t.Errorf("%s --help lists %v, the command has %v", sub.Name(), listed, own)
			}
		})
	}
}

// TestCACommand: "mount-apiserver ca" creates the generated PKI of a root directory once and
// prints its CA; a later run (and the server) keeps it.
func TestCACommand(t *testing.T) {
	root := t.TempDir()
	run := func() string {
		cmd := NewCommand(context.Background())
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"ca", "--root-directory", root, "--serving-cert-hosts", "mounts.example.com"})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return out.String()
	}
	first := run()
	if !strings.HasPrefix(first, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("not a PEM certificate: %q", first)
	}
	if second := run(); second != first {
		t.Error("a second run made another CA")
	}
	ca, err := pki.Load(filepath.Join(root, "pki"))
	if err != nil || string(ca.CACertPEM) != first {
		t.Errorf("the PKI under the root directory: %v", err)
	}
	serving, err := os.ReadFile(filepath.Join(root, "pki", pki.ServingCertFile))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(serving)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !slices.Contains(cert.DNSNames, "mounts.example.com") {
		t.Errorf("the serving certificate's names: %v %v", cert.DNSNames, err)
	}
}

// TestKubeconfigCommand: kubeconfig --help names every group, the agent's too, and a group of
// the server's prefix that it does not know (a typo) is refused before anything is signed.
func TestKubeconfigCommand(t *testing.T) {
	run := func(args ...string) (string, error) {
		cmd := NewCommand(context.Background())
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"kubeconfig"}, args...))
		err := cmd.Execute()
		return out.String(), err
	}
	help, err := run("--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, group := range []string{"mount-apiserver:admins", "mount-apiserver:editors", "mount-apiserver:viewers", "mount-apiserver:agent:<name>"} {
		if !strings.Contains(help, group) {
			t.Errorf("kubeconfig --help does not name %s:\n%s", group, help)
		}
	}
	// The root directory does not exist: a group refused is refused first.
	root := filepath.Join(t.TempDir(), "none")
	for _, group := range []string{"mount-apiserver:admin", "mount-apiserver:agent:Edge", "system:masters"} {
		if _, err := run("--root-directory", root, "--user", "alice", "--group", "team-a,"+group); err == nil || !strings.HasPrefix(err.Error(), "--group: \""+group+"\"") {
			t.Errorf("--group %s: %v", group, err)
		}
	}
	if _, err := run("--root-directory", root, "--user", "alice", "--group", "team-a,mount-apiserver:agent:edge"); err == nil || !strings.Contains(err.Error(), "reading the admin kubeconfig") {
		t.Errorf("valid groups: %v", err)
	}
}
