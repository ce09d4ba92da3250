package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// readmeTour returns the shell block of README.md between <!-- tour --> and <!-- /tour -->.
func readmeTour(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- tour -->")
	block, _, ok2 := strings.Cut(rest, "<!-- /tour -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- tour --> ... <!-- /tour --> block")
	}
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```sh")
	block = strings.TrimSuffix(block, "```")
	return block
}

// TestReadmeTour runs the README's tour as a new user would: the server binary on its
// embedded default in a fresh directory (as `go run ./cmd/mount-apiserver` there), then the
// tour's shell block with the real kubectl, against a real remote kube-apiserver as the
// cluster to mount. The tour stores the target's kubeconfig as a Secret of the standalone
// server, creates the example Mount, waits for Ready, and lists the target's namespaces
// through the mount as the standalone admin, impersonated on the target.
func TestReadmeTour(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	target, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Stop)

	// The user's working directory: the server's default root directory in it, and the
	// repository's artifacts as in a clone.
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(framework.RepoRoot(), "artifacts"), filepath.Join(work, "artifacts")); err != nil {
		t.Fatal(err)
	}
	framework.BuildBinary(t).Start(t, filepath.Join(work, ".mount-apiserver"))

	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", readmeTour(t))
	cmd.Dir = work
	cmd.Env = append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"TARGET_KUBECONFIG="+target.AdminKubeconfig,
		"KUBECONFIG=", // the tour sets its own
	)
	out, err := cmd.CombinedOutput()
	t.Logf("tour output:\n%s", out)
	if err != nil {
		t.Fatalf("the README tour failed: %v", err)
	}
	for _, want := range []string{
		"secret/remote-kubeconfig created",
		"mount.mounts.kcp.io/prod created",
		"mount.mounts.kcp.io/prod condition met",
		"clusterrolebinding.rbac.authorization.k8s.io/hub-mount-admin created",
		"kube-system", // a namespace of the target, listed through the mount
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the tour's output lacks %q", want)
		}
	}
}
