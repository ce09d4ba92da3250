package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/peers"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// workspaceOwner is what the owner of a kcp workspace holds there: everything, non-resource
// URLs included (kcp's workspace admin).
var workspaceOwner = []rbacv1.PolicyRule{
	{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
	{NonResourceURLs: []string{"*"}, Verbs: []string{"*"}},
}

// kcpRaw sends method path (below the harness's URL) with token, as kcp's front-proxy receives
// it from a tenant.
func kcpRaw(t *testing.T, k *framework.Kcp, token, method, path string, body io.Reader, header http.Header) (int, string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(k.CA.CertPEM)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequest(method, k.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return res.StatusCode, string(data)
}

// TestKcpWorkspaceOwnerReachesOnlyMounts: the owner of a kcp workspace (every right there) who
// sends requests through kcp's front-proxy mapping of this server (/services/mounts, the
// mapping's requestheader certificate and X-Remote-*, as kcp's front-proxy sends them; kcp
// cannot be built here, the harness does what it does) reaches the mounts group of its own
// logical cluster and nothing else: not the server's own Secrets (the operator's kubeconfigs,
// read or written), not /metrics, /debug/pprof or /debug/flags/v. Each answers 404, and a
// Secret it tried to plant never reaches the default cluster.
func TestKcpWorkspaceOwnerReachesOnlyMounts(t *testing.T) {
	e := startKcpEnv(t, kcpEnvOptions{version: framework.KcpMain})
	ctx := context.Background()
	e.kcp.AddUser("owner-token", framework.KcpUser{Name: "owner"})
	grant(t, e.a, "owner", "workspace-owner", workspaceOwner...)

	// The operator's Secret in the server's own (default) cluster.
	admin, err := kubernetes.NewForConfig(e.server.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets("ops").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-kubeconfig"}, Data: map[string][]byte{"kubeconfig": []byte("operator-secret-bytes")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	under := framework.KcpMountsMapping + "/clusters/" + kcpClusterA
	// The owner's own Mounts are served.
	if code, body := kcpRaw(t, e.kcp, "owner-token", http.MethodGet, under+"/apis/mounts.kcp.io/v1alpha1/mounts", nil, nil); code != http.StatusOK {
		t.Errorf("the owner lists its Mounts: %d %s", code, body)
	}
	planted := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"planted","namespace":"ops"},"data":{"kubeconfig":"eA=="}}`
	for _, c := range []struct {
		method, path, body string
	}{
		{http.MethodGet, "/api/v1/secrets", ""},
		{http.MethodGet, "/api/v1/namespaces/ops/secrets/prod-kubeconfig", ""},
		{http.MethodGet, "/api/v1/namespaces/ops/secrets", ""},
		{http.MethodPost, "/api/v1/namespaces/ops/secrets", planted},
		{http.MethodGet, "/api/v1/watch/secrets", ""},
		{http.MethodGet, "/api", ""},
		{http.MethodGet, "/metrics", ""},
		{http.MethodGet, "/debug/pprof/", ""},
		{http.MethodGet, "/debug/pprof/heap", ""},
		{http.MethodPut, "/debug/flags/v", "9"},
		{http.MethodGet, "/apis/mounts.kcp.io/../../api/v1/secrets", ""},
		{http.MethodGet, "/tunnel-relay", ""},
	} {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		code, got := kcpRaw(t, e.kcp, "owner-token", c.method, under+c.path, body, nil)
		if code != http.StatusNotFound || strings.Contains(got, "operator-secret-bytes") || strings.Contains(got, "b3BlcmF0b3It") {
			t.Errorf("%s %s through the mapping: %d %.300s, want 404", c.method, c.path, code, got)
		}
	}
	if _, err := admin.CoreV1().Secrets("ops").Get(ctx, "planted", metav1.GetOptions{}); err == nil {
		t.Error("the workspace owner planted a Secret in the server's default cluster")
	}
	// Through kcp's APIExport virtual storage (the shard's certificate) the same paths are
	// not forwarded by kcp at all; the server refuses them there too.
	if out, err := e.kubectl(t, "owner-token", "root:ws-a", "get", "mounts"); err != nil {
		t.Errorf("the owner lists Mounts through kcp: %v %s", err, out)
	}
}

// TestTunnelRelayRefusesKcpCallers: replicas of an aggregated server in kcp mode hop into
// each other's tunnel sessions at /tunnel-relay. A kcp user named like the replicas'
// ServiceAccount (any workspace owner can create that ServiceAccount in its own workspace),
// with every right in its workspace, sends hops through kcp's front-proxy mapping (the
// mapping's certificate and X-Remote-*, as the front-proxy sends them; the harness does what
// kcp does): under /clusters/<own>/ the relay does not exist (404), and at the server's own
// path it is refused for want of the replicas' host token (401). Only the replicas' own token,
// reviewed by the host, passes.
func TestTunnelRelayRefusesKcpCallers(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	host, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	workspace, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(workspace.Stop)
	k := framework.StartKcp(t, framework.KcpMain)
	k.AddWorkspace("root:ws-a", kcpClusterA, workspace, true)
	impostor := "system:serviceaccount:" + framework.Namespace + ":" + framework.ServiceAccount
	k.AddUser("impostor-token", framework.KcpUser{Name: impostor})
	grant(t, workspace, impostor, "workspace-owner", workspaceOwner...)
	applyArtifacts(t, workspace, "consumer")
	provider, err := k.Kubeconfig(framework.KcpProviderToken, "")
	if err != nil {
		t.Fatal(err)
	}
	replicas := framework.StartReplicas(ctx, t, host, framework.BuildBinary(t), 1,
		"--kcp-mode", "--kcp-front-proxy-client-ca-file", k.Dir+"/front-proxy-ca.crt", "--kcp-front-proxy-client-names", framework.KcpFrontProxyClientName,
		"--kcp-kubeconfig", provider, "--path-prefix", framework.KcpMountsMapping, "--external-base-url", k.URL+framework.KcpMountsMapping)
	r := replicas.Procs[0]
	if err := k.ServeMounts(r.URL, r.CAData); err != nil {
		t.Fatal(err)
	}

	// The hop is sent without its Upgrade header (the harness forwards over HTTP/2, which has
	// no upgrades; kcp's front-proxy passed the real one through): the relay checks the
	// caller before the header, so a 400 asking for the header means the caller passed.
	query := "?key=" + tunnel.SessionKey("_default", "no-such-uid") + "&address=" + tunnel.AddressTarget
	for path, want := range map[string]int{
		framework.KcpMountsMapping + "/clusters/" + kcpClusterA + peers.RelayPath: http.StatusNotFound,
		framework.KcpMountsMapping + peers.RelayPath:                              0,
	} {
		code, body := kcpRaw(t, k, "impostor-token", http.MethodGet, path+query, nil, nil)
		if code == http.StatusSwitchingProtocols || strings.Contains(body, "holds no session") || strings.Contains(body, "with Upgrade") || (want != 0 && code != want) || code < 400 {
			t.Errorf("a kcp user named %s hops through %s: %d %s", impostor, path, code, body)
		}
	}
}

// TestKcpDirectCallerAndAudit: a caller who reaches the server directly (a client certificate
// of its CA) in a logical cluster is reviewed by kcp's RBAC there with the groups a Kubernetes
// authenticator gives it, system:authenticated included, so what kcp grants to all
// (discovery) works for it: real kubectl lists the workspace's Mounts. (Before, the review
// carried no groups: "Error from server (Forbidden): unknown", kcp's audit saying cannot get
// path "/api".) The audit event of each request under /clusters/<lc>/ names the logical
// cluster, whose prefix its requestURI does not show.
func TestKcpDirectCallerAndAudit(t *testing.T) {
	auditLog := filepath.Join(t.TempDir(), "audit.log")
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startKcpEnv(t, kcpEnvOptions{modify: func(o *options.Options) {
		o.Audit.LogOptions.Path = auditLog
		o.Audit.PolicyFile = policy
	}})
	grant(t, e.a, "dave", "mounts-viewer", rbacv1.PolicyRule{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{NonResourceURLs: []string{"/"}, Verbs: []string{"access"}})
	cfg, err := pkiUserKubeconfig(t, e.server, "dave")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = e.server.URL + "/clusters/" + kcpClusterA
	data, err := framework.KubeconfigBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeFile(t, "dave.kubeconfig", string(data))
	if out, err := runKubectl(kubeconfig, "get", "mounts"); err != nil || !strings.Contains(out, "No resources found") {
		t.Fatalf("a direct caller lists the Mounts of %s: %v\n%s", kcpClusterA, err, out)
	}

	var found bool
	deadline := time.Now().Add(30 * time.Second)
	for !found && time.Now().Before(deadline) {
		data, _ := os.ReadFile(auditLog)
		for line := range strings.SplitSeq(string(data), "\n") {
			var ev struct {
				RequestURI  string                    `json:"requestURI"`
				User        struct{ Username string } `json:"user"`
				Annotations map[string]string         `json:"annotations"`
			}
			if json.Unmarshal([]byte(line), &ev) != nil || ev.User.Username != "dave" || !strings.HasPrefix(ev.RequestURI, "/apis/mounts.kcp.io/v1alpha1/mounts") {
				continue
			}
			if ev.Annotations[kcp.AuditAnnotationLogicalCluster] != kcpClusterA {
				t.Errorf("audit event of %s names no logical cluster: %v", ev.RequestURI, ev.Annotations)
			}
			found = true
		}
		if !found {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !found {
		t.Error("no audit event of dave's list of Mounts")
	}
}
