package integration

import (
	"strings"
	"testing"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestReadmeTour runs the README's blocks as a new user would: the server binary on its
// embedded default in a fresh directory (as `go run ./cmd/mount-apiserver` there), then the
// tour's shell blocks (marked run: standalone) in one shell session with the real kubectl,
// against a real remote kube-apiserver as the cluster to mount, in a directory holding a copy
// of the repository's artifacts. The tour stores the target's kubeconfig as a Secret of the
// standalone server, creates the example Mount, waits for Ready, and lists the target's
// namespaces through the mount as the standalone admin, impersonated on the target; the
// blocks after it use that mount.
func TestReadmeTour(t *testing.T) {
	blocks, problems, err := parseDocBlocks(framework.RepoRoot(), "README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("README.md: %q", problems)
	}
	var run []shellBlock
	tour := false
	for _, b := range blocks {
		if b.Mode == "" {
			continue
		}
		if b.Mode != "standalone" {
			t.Fatalf("%s: the README's blocks run standalone, not %s", b, b.Mode)
		}
		for _, c := range b.Comments {
			tour = tour || c == "tour"
		}
		run = append(run, b)
	}
	if !tour {
		t.Fatal("README.md has no block marked <!-- tour -->")
	}
	out := runDocBlocks(t, "standalone", run)
	for _, want := range []string{
		"secret/remote-kubeconfig created",
		"mount.mounts.kcp.io/prod created",
		"mount.mounts.kcp.io/prod condition met",
		"clusterrolebinding.rbac.authorization.k8s.io/hub-mount-admin created",
		"kube-system", // a namespace of the target, listed through the mount
		"Requests through the mount reach its target.",
		"mount.mounts.kcp.io/prod serverside-applied",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the tour's output lacks %q", want)
		}
	}
}
