package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	corev1alpha1 "github.com/kcp-dev/sdk/apis/core/v1alpha1"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// kcpFront stands in for kcp's front-proxy (kcp cannot be built here) in front of one workspace
// whose content is a real kube-apiserver. It serves what kcp serves for what this server does
// with workspaces, and refuses what kcp would refuse:
//   - GET /clusters/<parent>/apis/tenancy.kcp.io/v1alpha1/workspaces/<name>: the Workspace
//     object (SDK types) with spec.cluster, spec.URL and status.phase, to the provider; 404 for
//     workspaces that do not exist.
//   - /clusters/<logical cluster or path>/<rest> of the workspace: forwarded to the
//     kube-apiserver as /<rest> under the identity kcp authenticated. The provider (client
//     certificate of its CA) may impersonate, which kcp applies itself: here the
//     kube-apiserver's admin credentials carry the same Impersonate-* headers. Users (client
//     certificates of the mount-apiserver's CA, as kcp would trust an identity provider it
//     shares) go as themselves and may not impersonate; anonymous requests are 401, other
//     workspaces 404.
type kcpFront struct {
	*httptest.Server
	CA       *pki.CA
	provider *pki.CA
	users    atomic.Pointer[x509.Certificate]

	mu       sync.Mutex
	seen     []frontRequest
	kubeHost string
}

// frontRequest is what the stand-in saw: who called (provider or a user), the path, and the
// identity it sent on to the workspace.
type frontRequest struct {
	caller, path, as string
}

const (
	targetCluster = "t4rg3t"
	targetPath    = "root:org:team"
)

func startKcpFront(t testing.TB, kube *framework.KubeAPIServer) *kcpFront {
	t.Helper()
	f := &kcpFront{}
	var err error
	if f.CA, err = pki.NewCA("kcp-front-proxy-ca"); err != nil {
		t.Fatal(err)
	}
	if f.provider, err = pki.NewCA("kcp-provider-ca"); err != nil {
		t.Fatal(err)
	}
	cert, key, err := f.CA.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kcp-front-proxy"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	kubeTransport, err := rest.TransportFor(kube.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	f.kubeHost = strings.TrimPrefix(kube.URL, "https://")
	forward := &httputil.ReverseProxy{
		Transport: kubeTransport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", f.kubeHost
			pr.Out.URL.Path, pr.Out.URL.RawPath = pr.In.Context().Value(restPathKey{}).(string), ""
			pr.Out.Host = ""
		},
	}

	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, groups, isProvider, ok := f.authenticate(r)
		if !ok {
			writeFrontStatus(w, apierrors.NewUnauthorized("Unauthorized").Status())
			return
		}
		cluster, rest, found := strings.Cut(strings.TrimPrefix(r.URL.Path, "/clusters/"), "/")
		if !strings.HasPrefix(r.URL.Path, "/clusters/") || !found {
			writeFrontStatus(w, apierrors.NewNotFound(corev1.Resource("path"), r.URL.Path).Status())
			return
		}
		if parentAndName, ok := strings.CutPrefix(rest, "apis/tenancy.kcp.io/v1alpha1/workspaces/"); ok && r.Method == http.MethodGet {
			if !isProvider {
				writeFrontStatus(w, apierrors.NewForbidden(tenancyv1alpha1.Resource("workspaces"), parentAndName, nil).Status())
				return
			}
			f.record(frontRequest{caller: caller, path: r.URL.Path})
			ws := f.workspace(cluster + ":" + parentAndName)
			if ws == nil {
				writeFrontStatus(w, apierrors.NewNotFound(tenancyv1alpha1.Resource("workspaces"), parentAndName).Status())
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(ws)
			return
		}
		if cluster != targetCluster && cluster != targetPath {
			writeFrontStatus(w, apierrors.NewNotFound(corev1.Resource("workspaces"), cluster).Status())
			return
		}
		// The identity the workspace sees: a user is itself; the provider is itself unless it
		// impersonates, which it may.
		as, asGroups := caller, groups
		var extras http.Header = http.Header{}
		for name, values := range r.Header {
			if strings.HasPrefix(name, "Impersonate-") {
				if !isProvider {
					writeFrontStatus(w, apierrors.NewForbidden(corev1.Resource("users"), r.Header.Get("Impersonate-User"), nil).Status())
					return
				}
				if strings.HasPrefix(name, "Impersonate-Extra-") || name == "Impersonate-Uid" {
					extras[name] = values
				}
			}
		}
		if isProvider && r.Header.Get("Impersonate-User") != "" {
			as, asGroups = r.Header.Get("Impersonate-User"), r.Header.Values("Impersonate-Group")
		}
		f.record(frontRequest{caller: caller, path: r.URL.Path, as: as})
		out := r.Clone(context.WithValue(r.Context(), restPathKey{}, "/"+rest))
		for name := range out.Header {
			if strings.HasPrefix(name, "Impersonate-") || name == "Authorization" {
				out.Header.Del(name)
			}
		}
		out.Header.Set("Impersonate-User", as)
		for _, g := range asGroups {
			out.Header.Add("Impersonate-Group", g)
		}
		for name, values := range extras {
			out.Header[name] = values
		}
		forward.ServeHTTP(w, out)
	}))
	f.Server.TLS = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}},
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}
	// The users' CA is known once the mount-apiserver has made it.
	f.Server.TLS.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := f.Server.TLS.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = x509.NewCertPool()
		c.ClientCAs.AddCert(f.provider.Cert)
		if users := f.users.Load(); users != nil {
			c.ClientCAs.AddCert(users)
		}
		return c, nil
	}
	f.StartTLS()
	t.Cleanup(f.Close)
	return f
}

type restPathKey struct{}

// authenticate names the caller by its verified client certificate.
func (f *kcpFront) authenticate(r *http.Request) (name string, groups []string, provider, ok bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return "", nil, false, false
	}
	chain := r.TLS.VerifiedChains[0]
	leaf, root := chain[0], chain[len(chain)-1]
	return leaf.Subject.CommonName, leaf.Subject.Organization, root.Equal(f.provider.Cert), true
}

func (f *kcpFront) workspace(path string) *tenancyv1alpha1.Workspace {
	if path != targetPath {
		return nil
	}
	return &tenancyv1alpha1.Workspace{
		TypeMeta:   metav1.TypeMeta{Kind: "Workspace", APIVersion: tenancyv1alpha1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: "team", Annotations: map[string]string{"kcp.io/cluster": "0rg"}},
		Spec:       tenancyv1alpha1.WorkspaceSpec{Cluster: targetCluster, URL: f.URL + "/clusters/" + targetPath},
		Status:     tenancyv1alpha1.WorkspaceStatus{Phase: corev1alpha1.LogicalClusterPhaseReady},
	}
}

func (f *kcpFront) record(r frontRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, r)
}

func (f *kcpFront) requests() []frontRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]frontRequest(nil), f.seen...)
}

// providerKubeconfig is --kcp-kubeconfig: kcp's base URL and the provider's certificate.
func (f *kcpFront) providerKubeconfig(t testing.TB) string {
	certPEM, keyPEM, err := f.provider.IssuePEM(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "mount-provider"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := framework.KubeconfigBytes(&rest.Config{Host: f.URL, TLSClientConfig: rest.TLSClientConfig{CAData: f.CA.CertPEM, CertData: certPEM, KeyData: keyPEM}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kcp.kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeFrontStatus(w http.ResponseWriter, s metav1.Status) {
	s.Kind, s.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(s.Code))
	_ = json.NewEncoder(w).Encode(s)
}

// TestWorkspaceMounts: in kcp mode, a Workspace mount in logical cluster ws-a reaches the
// workspace root:org:team through kcp under the caller's identity (the provider's credentials
// impersonating the caller; the workspace's RBAC decides), a Redirect mount answers 307 to the
// workspace's URL and kubectl follows it with its own credentials, paths cannot escape the
// workspace, and a workspace that does not exist answers 503.
func TestWorkspaceMounts(t *testing.T) {
	ctx := context.Background()
	kube, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	front := startKcpFront(t, kube)
	s := framework.StartInProcess(t, "", func(o *options.Options) {
		o.KcpMode = true
		apiOnly(o)
		o.Kcp.Kubeconfig = front.providerKubeconfig(t)
	})
	serverCA, err := pki.Load(filepath.Join(s.RootDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(serverCA.CACertPEM)
	if block == nil {
		t.Fatal("the server's CA does not decode")
	}
	users, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	front.users.Store(users)

	// In the workspace, the admin of the mount-apiserver may read namespaces; bob may not.
	if _, err := kube.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "namespace-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "namespace-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "namespace-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: pki.AdminUser}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	at := func(cfg *rest.Config, path string) *rest.Config {
		c := rest.CopyConfig(cfg)
		c.Host = s.URL + path
		return c
	}
	mountsClient, err := clientset.NewForConfig(at(s.Config, "/clusters/ws-a"))
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]struct {
		typ v1alpha1.MountType
		ref string
	}{
		"team":    {v1alpha1.MountTypeWorkspace, targetPath},
		"to-team": {v1alpha1.MountTypeRedirect, targetPath},
		"nowhere": {v1alpha1.MountTypeWorkspace, "root:org:nope"},
	} {
		if _, err := mountsClient.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.MountSpec{Type: m.typ, Ref: v1alpha1.ObjectReference{Kind: "Workspace", Name: m.ref}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating mount %s: %v", name, err)
		}
	}
	const proxyOf = "/clusters/ws-a/apis/mounts.kcp.io/v1alpha1/mounts/"

	// kubectl through the Workspace mount: the workspace sees the caller.
	out := mustKubectl(t, s, "--server="+s.URL+proxyOf+"team/proxy", "auth", "whoami", "-o", "json")
	var review struct {
		Status struct {
			UserInfo struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &review); err != nil {
		t.Fatalf("whoami: %v\n%s", err, out)
	}
	if u := review.Status.UserInfo; u.Username != pki.AdminUser || !slices.Contains(u.Groups, authorization.AdminsGroup) {
		t.Errorf("the workspace saw %+v, want the caller %s in %s", u, pki.AdminUser, authorization.AdminsGroup)
	}
	var forwarded []frontRequest
	for _, r := range front.requests() {
		if strings.HasPrefix(r.path, "/clusters/"+targetCluster+"/") {
			forwarded = append(forwarded, r)
		}
	}
	if len(forwarded) == 0 {
		t.Fatalf("kcp saw no request for /clusters/%s: %+v", targetCluster, front.requests())
	}
	for _, r := range forwarded {
		if r.caller != "mount-provider" || r.as != pki.AdminUser {
			t.Errorf("kcp saw %+v, want the provider impersonating %s", r, pki.AdminUser)
		}
	}

	// The workspace's RBAC decides: the admin may list namespaces, bob may not.
	admin, err := kubernetes.NewForConfig(at(s.Config, proxyOf+"team/proxy"))
	if err != nil {
		t.Fatal(err)
	}
	if list, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil || !hasNamespace(list.Items, "default") {
		t.Errorf("the admin lists namespaces of the workspace: %v", err)
	}
	bobConfig, err := pkiUserKubeconfig(t, s, "bob", authorization.AdminsGroup)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := kubernetes.NewForConfig(at(bobConfig, proxyOf+"team/proxy"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "bob"`) {
		t.Errorf("bob lists namespaces of the workspace: %v, want the workspace's Forbidden for bob", err)
	}

	// An upgrade through the workspace: kubectl exec reaches a pod of the workspace as the
	// caller (pods/exec is granted to the admin in the workspace).
	kubelet, err := framework.StartKubelet(ctx, kube, "ws-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "apps", "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Client.RbacV1().Roles("apps").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "exec"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Client.RbacV1().RoleBindings("apps").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "exec"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "exec"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: pki.AdminUser}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := mustKubectl(t, s, "--server="+s.URL+proxyOf+"team/proxy", "-n", "apps", "exec", "app", "--", "echo", "through kcp"); out != "through kcp\n" {
		t.Errorf("kubectl exec through the Workspace mount: %q", out)
	}
	execSeen := false
	for _, r := range front.requests() {
		if strings.HasPrefix(r.path, "/clusters/"+targetCluster+"/api/v1/namespaces/apps/pods/app/exec") {
			execSeen = true
			if r.caller != "mount-provider" || r.as != pki.AdminUser {
				t.Errorf("kcp saw the exec as %+v, want the provider impersonating %s", r, pki.AdminUser)
			}
		}
	}
	if !execSeen {
		t.Errorf("kcp saw no exec request: %+v", front.requests())
	}

	// Redirect: 307 to the workspace's URL with path and query, not proxied.
	httpClient, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	noFollow := *httpClient
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Get(s.URL + proxyOf + "to-team/proxy/api/v1/namespaces/default?pretty=true")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if want := front.URL + "/clusters/" + targetPath + "/api/v1/namespaces/default?pretty=true"; resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
		t.Errorf("redirect: %d Location %q, want 307 to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	// kubectl follows it with its own credentials (trusting kcp's CA as a kcp user does).
	before := len(front.requests())
	out = mustKubectl(t, withCA(t, s, front.CA.CertPEM), "get", "--raw", proxyOf+"to-team/proxy/api/v1/namespaces/default")
	if !strings.Contains(out, `"name":"default"`) {
		t.Errorf("kubectl get --raw through the redirect:\n%s", out)
	}
	if after := front.requests()[before:]; len(after) != 1 || after[0].caller != pki.AdminUser || after[0].path != "/clusters/"+targetPath+"/api/v1/namespaces/default" {
		t.Errorf("kcp saw %+v after the redirect, want the admin itself at the workspace's path", after)
	}

	// Escapes into another workspace: refused, nothing reaches kcp.
	before = len(front.requests())
	for _, inner := range []string{"../../other/api", "..%2F..%2Fother/api", "%2e%2e/%2e%2e/other/api", "api%2F..%2F..%2F..%2Fother", "..%5C..%5Cother"} {
		resp, err := httpClient.Get(s.URL + proxyOf + "team/proxy/" + inner)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("inner path %q: %d %s, want 400", inner, resp.StatusCode, body)
		}
	}
	if after := front.requests()[before:]; len(after) != 0 {
		t.Errorf("escaping paths reached kcp: %+v", after)
	}

	// A workspace that does not exist: 503 that says so.
	resp, err = httpClient.Get(s.URL + proxyOf + "nowhere/proxy/api")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "workspace root:org:nope does not exist") {
		t.Errorf("mount of a missing workspace: %d %s", resp.StatusCode, body)
	}
}

func hasNamespace(items []corev1.Namespace, name string) bool {
	for _, ns := range items {
		if ns.Name == name {
			return true
		}
	}
	return false
}

// withCA returns s with an admin kubeconfig that also trusts ca.
func withCA(t *testing.T, s *framework.Server, ca []byte) *framework.Server {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(s.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.CertificateAuthorityData = append(append([]byte{}, c.CertificateAuthorityData...), ca...)
	}
	path := filepath.Join(t.TempDir(), "admin-and-kcp.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	copied := *s
	copied.Kubeconfig = path
	return &copied
}

// BenchmarkWorkspaceMount: GET /version of a workspace straight from kcp (the stand-in, as the
// provider) and through a Workspace mount (resolution cached, the provider impersonating the
// caller), both over kept-alive connections. Run with:
//
//	go test ./test/integration -run '^$' -bench BenchmarkWorkspaceMount -benchtime 2000x
func BenchmarkWorkspaceMount(b *testing.B) {
	ctx := context.Background()
	kube, err := framework.StartKubeAPIServer(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kube.Stop)
	front := startKcpFront(b, kube)
	kubeconfig := front.providerKubeconfig(b)
	s := framework.StartInProcess(b, "", func(o *options.Options) {
		o.KcpMode = true
		apiOnly(o)
		o.Kcp.Kubeconfig = kubeconfig
	})
	mountsClient, err := clientset.NewForConfig(func() *rest.Config { c := rest.CopyConfig(s.Config); c.Host += "/clusters/ws-a"; return c }())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := mountsClient.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec:       v1alpha1.MountSpec{Type: v1alpha1.MountTypeWorkspace, Ref: v1alpha1.ObjectReference{Kind: "Workspace", Name: targetPath}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	provider, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	get := func(b *testing.B, cfg *rest.Config, url string) {
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			resp, err := client.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("%s: %d", url, resp.StatusCode)
			}
		}
	}
	b.Run("kcp-direct", func(b *testing.B) { get(b, provider, front.URL+"/clusters/"+targetCluster+"/version") })
	b.Run("workspace-mount", func(b *testing.B) {
		get(b, s.Config, s.URL+"/clusters/ws-a/apis/mounts.kcp.io/v1alpha1/mounts/team/proxy/version")
	})
}
