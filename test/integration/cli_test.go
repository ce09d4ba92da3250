package integration

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestVersionWithKubectl: kubectl version against the server reports a Kubernetes version with
// the project's version as build metadata, as kcp does, and no skew; it warned of a skew
// between client 1.37 and server 0.0 on every call.
func TestVersionWithKubectl(t *testing.T) {
	s := framework.StartInProcess(t, "", apiOnly)
	r := runKubectlWith(context.Background(), kubectlBinary(t), t.TempDir(), s.Kubeconfig, "", time.Minute, "version")
	if r.exitCode != 0 || !regexpMatch(`(?m)^Server Version: v1\.37\.\d+\+mount-apiserver-v0\.0\.0-devel$`, r.out) || strings.Contains(r.out, "WARNING") {
		t.Errorf("kubectl version: exit %d\n%s", r.exitCode, r.out)
	}
}

// TestBinariesCLI runs the binaries as a user does: their versions, the agent's JSON logs (not
// registered: "--logging-format=json" failed), a group typo refused, errors as plain lines.
func TestBinariesCLI(t *testing.T) {
	server, agent := string(framework.BuildBinary(t)), framework.BuildAgent(t)
	run := func(bin string, args ...string) (string, int) {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	versionLine := regexp.MustCompile(`^(mount-apiserver|mount-agent) v0\.0\.0-devel\S* \(Kubernetes v1\.37\.\d+, .*\)\n$`)
	for _, c := range []struct {
		bin  string
		args []string
	}{{server, []string{"--version"}}, {server, []string{"version"}}, {agent, []string{"version"}}, {agent, []string{"--version"}}} {
		if out, code := run(c.bin, c.args...); code != 0 || !versionLine.MatchString(out) {
			t.Errorf("%s %v: exit %d %q", c.bin, c.args, code, out)
		}
	}
	// The agent starts with JSON logs and fails on the missing flags, not on the format.
	if out, code := run(agent, "--logging-format=json"); code != 1 || !strings.HasPrefix(out, "Error: --hub-kubeconfig is required\n") {
		t.Errorf("mount-agent --logging-format=json: exit %d %q", code, out)
	}
	root := t.TempDir()
	if out, code := run(server, "kubeconfig", "--root-directory", root, "--user", "alice", "--group", "mount-apiserver:admin"); code != 1 || !strings.HasPrefix(out, `Error: --group: "mount-apiserver:admin" is not a group of the standalone server`) {
		t.Errorf("kubeconfig with a group typo: exit %d %q", code, out)
	}
	if out, code := run(server, "--help"); code != 0 || !regexpMatch(`(?m)^Available Commands:$`, out) || !regexpMatch(`(?m)^  kubeconfig +Print a kubeconfig`, out) {
		t.Errorf("mount-apiserver --help: exit %d\n%s", code, out)
	}
	if out, code := run(server, "kubeconfig", "--help"); code != 0 || !strings.Contains(out, "mount-apiserver:agent:<name>") {
		t.Errorf("mount-apiserver kubeconfig --help: exit %d\n%s", code, out)
	}
	if out, code := run(server, "--secure-port", "-1"); code != 1 || !strings.HasPrefix(out, "Error: ") {
		t.Errorf("mount-apiserver --secure-port -1: exit %d %q", code, out)
	}
}
