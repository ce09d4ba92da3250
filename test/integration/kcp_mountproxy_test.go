package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// anonymousAt sends GET path to the harness without credentials, with header, as anybody who
// reaches kcp's shard can.
func anonymousAt(t *testing.T, k *framework.Kcp, path string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, k.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range header {
		req.Header[key] = v
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(k.CA.CertPEM)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body)
}

// TestKcpMain202608MountProxyForgery: kcp main of 2026-08 (dac74f5) forwards a mounted
// workspace's request before authenticating it, with its --mount-proxy-client-cert-file
// certificate (signed by the front-proxy's requestheader CA) and the caller's X-Remote-*
// unchanged (the harness does exactly that; kcp cannot be built here). A mounted workspace
// of a MountCredentials URL mount, whose status.URL points at mount-apiserver itself:
//   - with the trust docs/kcp.md recommends for that kcp (the front-proxy's name only), an
//     anonymous caller claiming alice, and eve claiming system:kcp:admin, get nothing from
//     the target (401/403), and nor does alice with her kcp token: mounted workspaces fail
//     closed there;
//   - trusting the mount-proxy certificate's name too, as README once suggested, the harness
//     reproduces the hole: the claimed alice is served with the mount's credentials. Even then
//     eve's claimed system:kcp:admin must not be accepted through X-Remote-Group (the
//     server's privileged groups).
func TestKcpMain202608MountProxyForgery(t *testing.T) {
	ctx := context.Background()
	e := &kcpEnv{kcp: framework.StartKcpWith(t, framework.KcpOptions{Version: framework.KcpMain202608, WorkspaceMounts: true})}
	kubes := startKubes(t, 3)
	e.root, e.a, e.remote = kubes[0], kubes[1], kubes[2]
	kcpRoot(t, e.kcp, e.root)
	e.kcp.AddWorkspace("root:ws-a", kcpClusterA, e.a, true)
	applyArtifacts(t, e.a, "consumer")
	e.kcp.AddUser("alice-token", framework.KcpUser{Name: "alice", Groups: []string{"team-a"}})
	grant(t, e.a, "alice", "mounts-editor", mountsEditor...)

	// mount-apiserver at an address known before it starts: status.URL points at it.
	rootDir := t.TempDir()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := listener.Addr().String()
	_, tctx := ktesting.NewTestContext(t)
	start := func(names []string) *framework.Server {
		t.Helper()
		l := listener
		if l == nil {
			if l, err = net.Listen("tcp", addr); err != nil {
				t.Fatal(err)
			}
		}
		listener = nil
		s, err := framework.StartServer(tctx, rootDir, l, func(o *options.Options) {
			if err := e.kcp.Configure(o); err != nil {
				t.Fatal(err)
			}
			o.Kcp.FrontProxyClientNames = names
			o.ExternalBaseURL = "https://" + addr + framework.KcpMountsMapping
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.kcp.ServeMounts(s.URL, s.CAData); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := e.kcp.FrontProxyClientNames(); len(got) != 1 || got[0] != framework.KcpFrontProxyClientName {
		t.Fatalf("recommended names for kcp main 2026-08: %v", got)
	}
	s := start(e.kcp.FrontProxyClientNames())
	e.server = s

	// alice's URL mount with its own credentials (she holds lend), through kcp, which names her.
	e.remoteSecretOfAlice(t)
	e.mustKubectl(t, "alice-token", "root:ws-a", "create", "-f", writeFile(t, "creds.yaml", "apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata: {name: creds}\nspec: {type: URL, ref: {namespace: clusters, name: remote}, identity: {mode: MountCredentials}}\n"))
	mounts := mountsIn(t, s.Config, kcpClusterA)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := mounts.Get(ctx, "creds", metav1.GetOptions{})
		return err == nil && m.Status.Phase == v1alpha1.MountPhaseReady, nil
	}); err != nil {
		t.Fatal("the mount never became Ready")
	}
	e.kcp.AddMountedWorkspace("root:ws-a:creds", "7a7a7a7a", kcpClusterA, "creds")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return e.kcp.WorkspacePhase("root:ws-a:creds") == "Ready", nil
	}); err != nil {
		t.Fatalf("the mounted workspace is %s", e.kcp.WorkspacePhase("root:ws-a:creds"))
	}
	const target = "/clusters/root:ws-a:creds/api/v1/namespaces/kube-system"
	served := func(code int, body string) bool {
		return code == http.StatusOK || strings.Contains(body, `"kind":"Namespace"`)
	}
	forgedAlice := http.Header{"X-Remote-User": {"alice"}, "X-Remote-Group": {"team-a", "system:authenticated"}}
	forgedAdmin := http.Header{"X-Remote-User": {"eve"}, "X-Remote-Group": {framework.KcpAdminGroup, "system:authenticated"}}

	for name, h := range map[string]http.Header{"claiming alice": forgedAlice, "claiming system:kcp:admin": forgedAdmin} {
		if code, body := anonymousAt(t, e.kcp, target, h); served(code, body) || code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("recommended trust: an anonymous caller %s: %d %.300s", name, code, body)
		}
	}
	if code, body := kcpRaw(t, e.kcp, "alice-token", http.MethodGet, target, nil, nil); served(code, body) {
		t.Errorf("recommended trust: alice's kcp token reached the target: %d %.300s", code, body)
	}
	// What reached the server came with the mount-proxy certificate and the forged headers.
	sawForged := false
	for _, f := range e.kcp.Forwarded() {
		if f.Cert == framework.KcpMountProxyClientName && f.Header.Get("X-Remote-User") == "alice" {
			sawForged = true
		}
	}
	if !sawForged {
		t.Error("the harness did not forward the forged X-Remote-User with the mount-proxy certificate, as kcp main 2026-08 does")
	}

	// Trusting the mount-proxy certificate's name: the harness reproduces the hole.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	s = start([]string{framework.KcpFrontProxyClientName, framework.KcpMountProxyClientName})
	t.Cleanup(func() { _ = s.Stop() })
	if code, body := anonymousAt(t, e.kcp, target, forgedAlice); !served(code, body) {
		t.Errorf("trusting the mount-proxy certificate, the forged alice was not served (the harness does not reproduce kcp main 2026-08): %d %.300s", code, body)
	}
	if code, body := anonymousAt(t, e.kcp, target, forgedAdmin); served(code, body) {
		t.Errorf("a caller who claimed system:kcp:admin through X-Remote-Group got the mount's credentials: %d %.300s", code, body)
	}
}

// TestKcpMainMountProxy: newer kcp main's mount proxy (kcp-dev/kcp pkg/server/mountproxy.go,
// read from source; the harness does what it does) in front of a workspace mounted on alice's
// URL mount, whose status.URL points at mount-apiserver directly and which trusts the
// mount-proxy certificate's name, as docs/kcp.md recommends for that kcp: alice reaches the
// target as herself, named by X-Remote-* over the mount-proxy certificate with neither her
// token nor a UID; kcp refuses anonymous callers whatever they claim, callers without "get"
// on the Workspace in its parent, impersonation, and a 3rd hop (508).
func TestKcpMainMountProxy(t *testing.T) {
	ctx := context.Background()
	e := &kcpEnv{kcp: framework.StartKcpWith(t, framework.KcpOptions{Version: framework.KcpMain, WorkspaceMounts: true})}
	kubes := startKubes(t, 3)
	e.root, e.a, e.remote = kubes[0], kubes[1], kubes[2]
	kcpRoot(t, e.kcp, e.root)
	e.kcp.AddWorkspace("root:ws-a", kcpClusterA, e.a, true)
	applyArtifacts(t, e.a, "consumer")
	e.kcp.AddUser("alice-token", framework.KcpUser{Name: "alice", Groups: []string{"team-a"}})
	e.kcp.AddUser("bob-token", framework.KcpUser{Name: "bob"})
	grant(t, e.a, "alice", "mounts-editor", mountsEditor...)
	grant(t, e.a, "bob", "mounts-editor", mountsEditor...)
	grant(t, e.a, "alice", "workspace-reader", rbacv1.PolicyRule{APIGroups: []string{"tenancy.kcp.io"}, Resources: []string{"workspaces"}, Verbs: []string{"get"}})
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, tctx := ktesting.NewTestContext(t)
	s, err := framework.StartServer(tctx, t.TempDir(), listener, func(o *options.Options) {
		if err := e.kcp.Configure(o); err != nil {
			t.Fatal(err)
		}
		o.ExternalBaseURL = "https://" + listener.Addr().String() + framework.KcpMountsMapping
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	if err := e.kcp.ServeMounts(s.URL, s.CAData); err != nil {
		t.Fatal(err)
	}
	e.server = s
	e.remoteSecretOfAlice(t)
	e.mustKubectl(t, "alice-token", "root:ws-a", "create", "-f", writeFile(t, "prod.yaml", "apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata: {name: prod}\nspec: {type: URL, ref: {namespace: clusters, name: remote}}\n"))
	mounts := mountsIn(t, s.Config, kcpClusterA)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := mounts.Get(ctx, "prod", metav1.GetOptions{})
		return err == nil && m.Status.Phase == v1alpha1.MountPhaseReady, nil
	}); err != nil {
		t.Fatal("the mount never became Ready")
	}
	e.kcp.AddMountedWorkspace("root:ws-a:prod", "8b8b8b8b", kcpClusterA, "prod")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return e.kcp.WorkspacePhase("root:ws-a:prod") == "Ready", nil
	}); err != nil {
		t.Fatalf("the mounted workspace is %s", e.kcp.WorkspacePhase("root:ws-a:prod"))
	}

	before := len(e.kcp.Forwarded())
	if out := e.mustKubectl(t, "alice-token", "root:ws-a:prod", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); out != "alice" {
		t.Errorf("through the mounted workspace alice is %q at the target", out)
	}
	var sent *framework.KcpForwarded
	for _, f := range e.kcp.Forwarded()[before:] {
		if f.Cert == framework.KcpMountProxyClientName {
			sent = &f
		}
	}
	if sent == nil {
		t.Fatalf("nothing reached mount-apiserver with the mount-proxy certificate: %+v", e.kcp.Forwarded()[before:])
	}
	if sent.Header.Get("X-Remote-User") != "alice" || sent.Header.Get("Authorization") != "" || sent.Header.Get("X-Remote-Uid") != "" || sent.Header.Get("X-Kcp-Mount-Hops") != "1" {
		t.Errorf("the mount proxy sent %v", sent.Header)
	}
	const path = "/clusters/root:ws-a:prod/api"
	if code, body := anonymousAt(t, e.kcp, path, http.Header{"X-Remote-User": {"alice"}}); code != http.StatusUnauthorized {
		t.Errorf("an anonymous caller claiming alice: %d %.200s", code, body)
	}
	if code, body := kcpRaw(t, e.kcp, "bob-token", http.MethodGet, path, nil, nil); code != http.StatusForbidden {
		t.Errorf("bob, who may not get the Workspace: %d %.200s", code, body)
	}
	if code, body := kcpRaw(t, e.kcp, "alice-token", http.MethodGet, path, nil, http.Header{"Impersonate-User": {"bob"}}); code != http.StatusForbidden {
		t.Errorf("impersonation in a mounted workspace: %d %.200s", code, body)
	}
	if code, body := kcpRaw(t, e.kcp, "alice-token", http.MethodGet, path, nil, http.Header{"X-Kcp-Mount-Hops": {"3"}}); code != http.StatusLoopDetected {
		t.Errorf("a 4th hop: %d %.200s", code, body)
	}
}
