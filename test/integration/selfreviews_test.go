package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestSelfReviewsWithKubectl runs kubectl auth whoami, auth can-i and auth can-i --list with
// the real kubectl against the standalone server and against a logical cluster of kcp mode
// (addressed directly, as kcp's virtual storage forwards; kcp cannot be built here). They
// failed with "the server could not find the requested resource". A refusal names exactly
// the group that grants what was refused.
func TestSelfReviewsWithKubectl(t *testing.T) {
	bin := kubectlBinary(t)
	cache := t.TempDir()
	run := func(t *testing.T, kubeconfig string, args ...string) kubectlResult {
		t.Helper()
		return runKubectlWith(context.Background(), bin, cache, kubeconfig, "", time.Minute, args...)
	}
	userKubeconfig := func(t *testing.T, s *framework.Server, name string, groups ...string) string {
		t.Helper()
		return userKubeconfigFile(t, s, s.URL, name, groups...)
	}

	t.Run("standalone", func(t *testing.T) {
		s := framework.StartInProcess(t, "", apiOnly)
		edith := userKubeconfig(t, s, "edith", authorization.EditorsGroup)
		if r := run(t, s.Kubeconfig, "auth", "whoami"); r.exitCode != 0 || !regexpMatch(`Username\s+mount-admin`, r.out) || !regexpMatch(`Groups\s+\[mount-apiserver:admins system:authenticated\]`, r.out) {
			t.Errorf("admin's whoami: exit %d\n%s", r.exitCode, r.out)
		}
		if r := run(t, edith, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"); r.exitCode != 0 || r.out != `edith ["mount-apiserver:editors","system:authenticated"]` {
			t.Errorf("edith's whoami: exit %d %q", r.exitCode, r.out)
		}
		for _, c := range []struct {
			args []string
			yes  bool
		}{
			{[]string{"create", "mounts"}, true},
			{[]string{"create", "mounts", "--subresource=proxy"}, true},
			{[]string{"patch", "mounts", "--subresource=status"}, false},
			{[]string{"lend", "mounts"}, false},
			{[]string{"delete", "secrets", "-n", "prod"}, true},
			{[]string{"get", "/version"}, true},
			{[]string{"get", "/metrics"}, false},
		} {
			r := run(t, edith, append([]string{"auth", "can-i"}, c.args...)...)
			want := "no"
			if c.yes {
				want = "yes"
			}
			// kubectl warns first about cluster-scoped resources and verbs it does not know.
			if got := lastLine(r.out); !strings.HasPrefix(got, want) || (r.exitCode == 0) != c.yes {
				t.Errorf("edith can-i %v: exit %d %q, want %s", c.args, r.exitCode, r.out, want)
			}
		}
		r := run(t, edith, "auth", "can-i", "--list")
		if r.exitCode != 0 || !regexpMatch(`(?m)^mounts\.mounts\.kcp\.io\s+\[\]\s+\[\]\s+\[get list watch create update patch delete deletecollection\]`, r.out) ||
			!regexpMatch(`(?m)^mounts\.mounts\.kcp\.io/proxy\s+\[\]\s+\[\]\s+\[\*\]`, r.out) || !regexpMatch(`(?m)^selfsubjectaccessreviews\.authorization\.k8s\.io\s+\[\]\s+\[\]\s+\[create\]`, r.out) ||
			!regexpMatch(`(?m)^\s+\[/version\]\s+\[\]\s+\[get\]`, r.out) {
			t.Errorf("edith can-i --list: exit %d\n%s", r.exitCode, r.out)
		}
		// An editor may not lend: the refusal names the admins, not the editors.
		file := filepath.Join(t.TempDir(), "lend.yaml")
		if err := os.WriteFile(file, []byte("apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata: {name: lent}\nspec: {ref: {namespace: prod, name: creds}, identity: {mode: MountCredentials}}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r = run(t, edith, "create", "-f", file)
		if r.exitCode == 0 || !strings.Contains(r.out, `"lend" on mounts.mounts.kcp.io lent only to the group mount-apiserver:admins`) || strings.Contains(r.out, authorization.EditorsGroup) {
			t.Errorf("edith lends: exit %d\n%s", r.exitCode, r.out)
		}
	})

	t.Run("kcp logical cluster", func(t *testing.T) {
		s := framework.StartInProcess(t, "", kcpAPIOnly)
		ws := withServer(t, s.Kubeconfig, s.URL+"/clusters/ws-a")
		if r := run(t, ws, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); r.exitCode != 0 || r.out != "mount-admin" {
			t.Errorf("whoami in a logical cluster: exit %d %q", r.exitCode, r.out)
		}
		if r := run(t, ws, "auth", "can-i", "create", "mounts"); r.exitCode != 0 || lastLine(r.out) != "yes" {
			t.Errorf("can-i create mounts in a logical cluster: exit %d %q", r.exitCode, r.out)
		}
		// Secrets and Events are never served in a logical cluster, whoever asks.
		if r := run(t, ws, "auth", "can-i", "list", "secrets"); r.exitCode == 0 || lastLine(r.out) != "no - list secrets is not served in logical clusters" {
			t.Errorf("can-i list secrets in a logical cluster: exit %d %q", r.exitCode, r.out)
		}
		r := run(t, ws, "auth", "can-i", "--list")
		if r.exitCode != 0 || !strings.Contains(r.out, "kcp's RBAC decides") {
			t.Errorf("can-i --list in a logical cluster: exit %d\n%s", r.exitCode, r.out)
		}
		// Discovery there stays whole: every group it lists is served.
		if r := run(t, ws, "api-resources"); r.exitCode != 0 || strings.Contains(r.out, "unable to retrieve") || !strings.Contains(r.out, "selfsubjectaccessreviews") || !strings.Contains(r.out, "mounts") {
			t.Errorf("api-resources in a logical cluster: exit %d\n%s", r.exitCode, r.out)
		}
	})
}
