package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestKcpHarnessRefuses checks the harness itself: like kcp, it refuses a virtual storage
// endpoint whose serving certificate its CA does not verify, offers no mounts.kcp.io where
// the wildcard discovery does not answer, and serves no caller it cannot authenticate.
// Without these refusals the other kcp tests would prove less than they claim.
func TestKcpHarnessRefuses(t *testing.T) {
	ctx := context.Background()
	k := framework.StartKcp(t, framework.KcpV0323)
	kube, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	k.AddWorkspace("root:ws-a", kcpClusterA, kube, true)
	k.AddUser("alice-token", framework.KcpUser{Name: "alice"})
	grant(t, kube, "alice", "mounts-editor", mountsEditor...)
	s := framework.StartInProcess(t, "", func(o *options.Options) {
		if err := k.Configure(o); err != nil {
			t.Fatal(err)
		}
		apiOnly(o)
	})
	e := &kcpEnv{kcp: k, server: s}

	// No endpoint yet: no group, as kcp without a slice URL.
	if out, _ := e.kubectl(t, "alice-token", "root:ws-a", "api-resources", "--api-group", "mounts.kcp.io"); strings.Contains(out, "Mount") {
		t.Errorf("mounts.kcp.io offered without an endpoint:\n%s", out)
	}
	// An endpoint whose certificate the harness's CA for it does not verify.
	other, err := pki.NewCA("not-the-servers-ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.ServeMounts(s.URL, other.CertPEM); err != nil {
		t.Fatal(err)
	}
	if out, _ := e.kubectl(t, "alice-token", "root:ws-a", "api-resources", "--api-group", "mounts.kcp.io"); strings.Contains(out, "Mount") {
		t.Errorf("mounts.kcp.io offered from an endpoint with an unverified certificate:\n%s", out)
	}
	if out, err := e.kubectl(t, "alice-token", "root:ws-a", "get", "mounts"); err == nil {
		t.Errorf("mounts served through an unverified endpoint:\n%s", out)
	}
	// An endpoint that is not mount-apiserver's: its discovery does not answer.
	if err := k.ServeMounts(kube.URL, kube.ClientCA.CertPEM); err != nil {
		t.Fatal(err)
	}
	if out, _ := e.kubectl(t, "alice-token", "root:ws-a", "api-resources", "--api-group", "mounts.kcp.io"); strings.Contains(out, "Mount") {
		t.Errorf("mounts.kcp.io offered without its discovery:\n%s", out)
	}
	// The right one.
	if err := k.ServeMounts(s.URL, s.CAData); err != nil {
		t.Fatal(err)
	}
	if out := e.mustKubectl(t, "alice-token", "root:ws-a", "api-resources", "--api-group", "mounts.kcp.io"); !strings.Contains(out, "Mount") {
		t.Errorf("mounts.kcp.io not offered:\n%s", out)
	}
	// No caller identity: kcp answers 401, and forwards nothing.
	before := len(k.Forwarded())
	if out, err := e.kubectl(t, "no-such-token", "root:ws-a", "get", "mounts"); err == nil || !strings.Contains(out, "Unauthorized") {
		t.Errorf("an unknown token: %v\n%s", err, out)
	}
	if after := len(k.Forwarded()); after != before {
		t.Errorf("an unauthenticated request was forwarded (%d forwards)", after-before)
	}
}
