package aggregation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

const secretsNamespace = "clusters"

var proxySetup sync.Once

// setupProxy prepares, once per package: on the remote, a user "mount-proxy" that may
// impersonate (the mount's credentials); on the host, the Secret with its kubeconfig, the Mount
// "remote", and a ClusterRole "mounts-proxy" with every verb on mounts/proxy.
func setupProxy(t *testing.T) {
	t.Helper()
	proxySetup.Do(func() {
		ctx := context.Background()
		must := func(err error) {
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		_, err := remote.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "impersonator"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
				// RBAC has no "userextras/*": extras (every x509 caller carries
				// authentication.kubernetes.io/credential-id) need "*" or their exact keys.
				{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}}},
		}, metav1.CreateOptions{})
		must(err)
		_, err = remote.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "mount-proxy-impersonator"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "impersonator"},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "mount-proxy"}},
		}, metav1.CreateOptions{})
		must(err)
		// "view" is aggregated by kube-controller-manager, which does not run here.
		_, err = remote.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "namespace-reader"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}},
		}, metav1.CreateOptions{})
		must(err)
		_, err = kube.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: secretsNamespace}}, metav1.CreateOptions{})
		must(err)
		proxyUser, err := remote.UserConfig("mount-proxy")
		must(err)
		setSecret(t, "remote-kubeconfig", proxyUser)
		_, err = mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts().Create(ctx, urlMountOf("remote", "remote-kubeconfig"), metav1.CreateOptions{})
		must(err)
		_, err = kube.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "mounts-proxy"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"get", "create", "update", "patch", "delete"}},
				{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts"}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{})
		must(err)
	})
}

func urlMountOf(name, secret string) *v1alpha1.Mount {
	return &v1alpha1.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: secretsNamespace, Name: secret}},
	}
}

// setSecret creates or updates the host Secret name with a kubeconfig for cfg.
func setSecret(t *testing.T, name string, cfg *rest.Config) {
	t.Helper()
	data, err := framework.KubeconfigBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, name, data)
}

func setSecretData(t *testing.T, name string, kubeconfig []byte) {
	t.Helper()
	ctx := context.Background()
	secrets := kube.Client.CoreV1().Secrets(secretsNamespace)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"kubeconfig": kubeconfig}}
	if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
}

// proxyUser returns a host user that may use mounts/proxy.
func proxyUser(t *testing.T, name string, groups ...string) *rest.Config {
	t.Helper()
	bind(t, name, "mounts-proxy")
	return user(t, name, groups...)
}

// remoteBind gives a user a ClusterRole on the remote.
func remoteBind(t *testing.T, userName, role string) {
	t.Helper()
	_, err := remote.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: userName + "-" + role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: userName}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = remote.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), userName+"-"+role, metav1.DeleteOptions{})
	})
}

func proxyPath(mount string) string { return "/apis/mounts.kcp.io/v1alpha1/mounts/" + mount + "/proxy" }

// throughProxy returns cfg aimed at a mount's proxy on the host.
func throughProxy(cfg *rest.Config, mount string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = cfg.Host + proxyPath(mount)
	return c
}

func TestProxyKubectlAndClients(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	carol := proxyUser(t, "carol")
	remoteBind(t, "carol", "cluster-admin")
	// A namespace of this run: without a namespace controller on the remote, a deleted one
	// would stay Terminating.
	ns := "through-proxy-" + rand.String(5)

	kubeconfig, err := kube.WriteKubeconfig(carol, "carol")
	if err != nil {
		t.Fatal(err)
	}
	server := "--server=" + kube.URL + proxyPath("remote")
	run := func(args ...string) string {
		t.Helper()
		out, err := kubectl(t, kubeconfig, append([]string{server}, args...)...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	if out := run("get", "namespaces", "-o", "name"); !strings.Contains(out, "namespace/kube-system") {
		t.Errorf("namespaces of the remote:\n%s", out)
	}
	run("create", "namespace", ns)
	if _, err := remote.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Errorf("namespace created through the proxy is not on the remote: %v", err)
	}
	if _, err := kube.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace created through the proxy landed on the host: %v", err)
	}
	cm := filepath.Join(t.TempDir(), "cm.yaml")
	if err := os.WriteFile(cm, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied, namespace: "+ns+"}\ndata: {a: b}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run("apply", "-f", cm)
	run("apply", "--server-side", "-f", cm)
	if out := run("get", "configmap", "applied", "-n", ns, "-o", "jsonpath={.data.a}"); out != "b" {
		t.Errorf("configmap through the proxy: %q", out)
	}
	run("delete", "configmap", "applied", "-n", ns)

	// A watch through the proxy sees a change made on the remote directly.
	client, err := kubernetes.NewForConfig(throughProxy(carol, "remote"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := remote.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if cm, ok := ev.Object.(*corev1.ConfigMap); !ok || cm.Name != "watched" {
			t.Errorf("watch event: %v %#v", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Error("no watch event through the proxy")
	}

	// get --raw, through the host aggregator and directly at mount-apiserver.
	for name, cfgFile := range map[string]string{"host": kubeconfig, "direct": directKubeconfig(t, carol, "carol-direct")} {
		out, err := kubectl(t, cfgFile, "get", "--raw", proxyPath("remote")+"/api/v1/namespaces/"+ns)
		if err != nil || !strings.Contains(out, `"name":"`+ns+`"`) {
			t.Errorf("get --raw %s: %v\n%s", name, err, out)
		}
	}
}

// directKubeconfig writes a kubeconfig with cfg's credentials aimed at mount-apiserver itself.
func directKubeconfig(t *testing.T, cfg *rest.Config, name string) string {
	t.Helper()
	path, err := kube.WriteKubeconfig(agg.DirectConfig(cfg), name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func TestProxyImpersonatesTheCaller(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	dave, err := kubernetes.NewForConfig(throughProxy(proxyUser(t, "dave", "dave-team"), "remote"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = dave.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "dave"`) {
		t.Fatalf("dave without rights on the remote: got %v, want the remote's 403 naming dave", err)
	}
	remoteBind(t, "dave", "namespace-reader")
	eventually(t, "dave lists namespaces after a binding on the remote", func() error {
		_, err := dave.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err
	})

	// system:masters on the host is never impersonated on the remote.
	admin, err := kubernetes.NewForConfig(throughProxy(kube.AdminConfig, "remote"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:masters") {
		t.Errorf("system:masters through the proxy: got %v, want 403 naming system:masters", err)
	}

	// Without mounts/proxy rights on the host, nothing reaches the remote.
	erin, err := kubernetes.NewForConfig(throughProxy(user(t, "erin"), "remote"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := erin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "mounts/proxy") {
		t.Errorf("erin without mounts/proxy: %v", err)
	}
}

// TestProxyHeaders sends identity and credential headers of its own through the proxy to a
// recording target: only the mount's token and the impersonation of the real caller arrive.
func TestProxyHeaders(t *testing.T) {
	setupProxy(t)
	// Names of this run: the proxy's metrics count by mount as long as the server runs.
	suffix := rand.String(5)
	name, tokenCaller := "recording-"+suffix, "token-caller-"+suffix
	target, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	data, err := target.Kubeconfig("mount-token")
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, name, data)
	m := urlMountOf(name, name)
	m.Spec.Identity.UserPrefix = "hub:"
	// Service account callers carry system:serviceaccounts: a mount carries such reserved
	// groups only under a prefix (main's 010a045).
	m.Spec.Identity.GroupPrefix = "hub:"
	deleteMountsAtEnd(t, name)
	if _, err := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts().Create(context.Background(), m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	frank := proxyUser(t, "frank", "frank-team")

	// Directly at mount-apiserver, so the test controls every header the proxy receives.
	direct := agg.DirectConfig(frank)
	tlsConfig, err := rest.TLSConfigFor(direct)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, direct.Host+proxyPath(name)+"/api/v1/namespaces?limit=5", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Cookie", "session=stolen")
	req.Header.Set("X-Remote-User", "system:admin")
	req.Header.Set("X-Remote-Group", "system:masters")
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	// Hop-by-hop: Go's reverse proxy would pass this one on.
	req.Header.Set("Te", "trailers")
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("through the proxy: %d %s", resp.StatusCode, body)
	}
	got := target.LastCall()
	if got == nil {
		t.Fatal("nothing reached the target")
	}
	if got.URL.Path != "/api/v1/namespaces" || got.URL.RawQuery != "limit=5" {
		t.Errorf("target saw %s?%s", got.URL.Path, got.URL.RawQuery)
	}
	if a := got.Header.Get("Authorization"); a != "Bearer mount-token" {
		t.Errorf("Authorization at the target = %q, want the mount's token", a)
	}
	if u := got.Header.Get("Impersonate-User"); u != "hub:frank" {
		t.Errorf("Impersonate-User = %q, want hub:frank", u)
	}
	if g := got.Header.Values("Impersonate-Group"); !contains(g, "hub:frank-team") || contains(g, "system:masters") {
		t.Errorf("Impersonate-Group = %v", g)
	}
	for _, h := range []string{"Cookie", "X-Remote-User", "X-Remote-Group", "Proxy-Authorization", "Te"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("%s reached the target: %q", h, v)
		}
	}

	// OPTIONS is authorized as get and forwarded.
	optionsReq, err := http.NewRequest(http.MethodOptions, direct.Host+proxyPath(name)+"/api", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}).Do(optionsReq)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if last := target.LastCall(); resp.StatusCode != http.StatusOK || last.Method != http.MethodOptions {
		t.Errorf("OPTIONS: %d, target saw %s", resp.StatusCode, last.Method)
	}

	// A caller authenticating with its own bearer token (a service account of the host): the
	// token stays here; the target sees the mount's token and the caller impersonated.
	ctx := context.Background()
	if _, err := kube.Client.CoreV1().ServiceAccounts(secretsNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tokenCaller}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: tokenCaller + "-mounts-proxy"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "mounts-proxy"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: secretsNamespace, Name: tokenCaller}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), tokenCaller+"-mounts-proxy", metav1.DeleteOptions{})
		_ = kube.Client.CoreV1().ServiceAccounts(secretsNamespace).Delete(context.Background(), tokenCaller, metav1.DeleteOptions{})
	})
	tr, err := kube.Client.CoreV1().ServiceAccounts(secretsNamespace).CreateToken(ctx, tokenCaller, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certPool(agg.Mount.CAData)}}}
	eventually(t, "the service account proxies with its token", func() error {
		req, err := http.NewRequest(http.MethodGet, agg.Mount.URL+proxyPath(name)+"/api/v1/pods", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		resp, err := tokenClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		return nil
	})
	got = target.LastCall()
	if a := got.Header.Get("Authorization"); a != "Bearer mount-token" {
		t.Errorf("the caller's token reached the target: Authorization %q", a)
	}
	if u := got.Header.Get("Impersonate-User"); u != "hub:system:serviceaccount:"+secretsNamespace+":"+tokenCaller {
		t.Errorf("Impersonate-User = %q", u)
	}

	// The proxy's metrics count these requests, by mount.
	admin := agg.DirectConfig(kube.AdminConfig)
	adminClient, err := rest.HTTPClientFor(admin)
	if err != nil {
		t.Fatal(err)
	}
	mresp, err := adminClient.Get(admin.Host + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`mount_proxy_requests_total{code="200",mount="` + name + `",verb="GET"}`,
		`mount_proxy_requests_total{code="200",mount="` + name + `",verb="OPTIONS"} 1`,
		`mount_proxy_upstream_connections_total{mount="` + name + `"}`,
		`mount_proxy_request_duration_seconds_count{mount="` + name + `",verb="GET"}`,
		`mount_proxy_response_bytes_total{mount="` + name + `"}`,
		`mount_proxy_inflight_requests{mount="` + name + `"} 0`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(metrics), "mount-token") || strings.Contains(string(metrics), tr.Status.Token) {
		t.Error("/metrics contains a credential")
	}
}

func certPool(pem []byte) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return pool
}

func TestProxyPathsAreConfined(t *testing.T) {
	setupProxy(t)
	carol := proxyUser(t, "carol2")
	direct := agg.DirectConfig(carol)
	tlsConfig, err := rest.TLSConfigFor(direct)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"/api/%2e%2e/%2e%2e/apis",
		"/api%2F..%2F..%2Fsecret",
		"/api/v1/..%2f..%2fnamespaces",
		"/api/v1/namespaces%5c..%5c",
	} {
		// Sent as written: Go's client does not clean an opaque path.
		u := direct.Host + proxyPath("remote") + path
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = strings.TrimPrefix(u, "https:")
		resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d %s, want 400 (or 404 from the router)", path, resp.StatusCode, body)
		}
	}
}

func TestProxyRotationDeletionAndOutage(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	gina := proxyUser(t, "gina")
	tlsConfig, err := rest.TLSConfigFor(gina)
	if err != nil {
		t.Fatal(err)
	}
	// A plain client, to see each answer as it is.
	httpClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	get := func() (int, http.Header, string) {
		resp, err := httpClient.Get(kube.URL + proxyPath("rotating") + "/version")
		if err != nil {
			return 0, nil, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(body)
	}

	// Start on a port with nothing listening: 503 without Retry-After (which client-go would
	// obey ten times), quickly.
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	down.Close()
	data, err := framework.KubeconfigBytes(&rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", port), BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{CAData: down.CA.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, "rotating", data)
	m := urlMountOf("rotating", "rotating")
	m.Spec.Timeouts = &v1alpha1.MountTimeouts{ConnectSeconds: ptr.To[int32](2)}
	deleteMountsAtEnd(t, "rotating")
	if _, err := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, header, body := get()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "unreachable") || header.Get("Retry-After") != "" {
		t.Errorf("target down: %d %v %s, want 503 unreachable without Retry-After", code, header, body)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("target down took %v to answer", elapsed)
	}

	// The target comes up on that port: the next request works, no restart.
	up, err := framework.StartRecordingServer(fmt.Sprintf("127.0.0.1:%d", port), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	data, err = up.Kubeconfig("first")
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, "rotating", data)
	eventually(t, "target back", func() error {
		if code, _, body := get(); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	// A target whose certificate does not verify against the kubeconfig's CA: 502.
	other, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	data, err = framework.KubeconfigBytes(&rest.Config{Host: up.URL, BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{CAData: other.CA.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, "rotating", data)
	eventually(t, "502 for an unverifiable target", func() error {
		if code, _, body := get(); code != http.StatusBadGateway || !strings.Contains(body, "does not verify") {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	// Rotating the Secret's token takes effect without restart.
	data, err = up.Kubeconfig("second")
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, "rotating", data)
	eventually(t, "rotated token used", func() error {
		if code, _, body := get(); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		// The GET is of /version, as the status controller's probes, which carry the same token.
		reqs := up.Requests()
		if a := reqs[len(reqs)-1].Header.Get("Authorization"); a != "Bearer second" {
			return fmt.Errorf("Authorization %q", a)
		}
		return nil
	})

	// A deleted Mount stops proxying as soon as the watch cache has seen the delete.
	if err := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts().Delete(ctx, "rotating", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for {
		code, _, body := get()
		if code == http.StatusNotFound {
			t.Logf("deleted mount answered 404 after %v", time.Since(deleted).Round(time.Millisecond))
			break
		}
		if time.Since(deleted) > time.Second {
			t.Fatalf("deleted mount still proxies after 1s: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Its metric series are gone with it: a server that serves many mounts over time does not
	// keep series of mounts that no longer exist.
	eventually(t, "no metric series of the deleted mount", func() error {
		series, err := framework.MetricSeries(agg.DirectConfig(kube.AdminConfig), `mount="rotating"`)
		if err != nil {
			return err
		}
		if len(series) > 0 {
			return fmt.Errorf("%d series of the deleted mount, e.g. %s", len(series), series[0])
		}
		return nil
	})
}

// TestSecretReferenceNeedsReadAccess: referencing a Secret in a Mount needs "get" on it,
// checked by SubjectAccessReview against the host at create and on reference changes.
func TestSecretReferenceNeedsReadAccess(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	bind(t, "henry", "mounts-edit")
	henry := mountsClient(t, user(t, "henry")).MountsV1alpha1().Mounts()
	deleteMountsAtEnd(t, "henrys")

	var err error
	eventually(t, "henry is refused for the Secret, not for mounts", func() error {
		_, err = henry.Create(ctx, urlMountOf("henrys", "remote-kubeconfig"), metav1.CreateOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "may not get Secret clusters/remote-kubeconfig") {
			return nil
		}
		return fmt.Errorf("got %v", err)
	})

	allowSecretRead(t, "henry", "remote-kubeconfig")
	eventually(t, "henry creates once he may read the Secret", func() error {
		_, err := henry.Create(ctx, urlMountOf("henrys", "remote-kubeconfig"), metav1.CreateOptions{})
		return err
	})

	// Labels change freely; pointing at a Secret henry may not read does not. The status
	// controller writes the same object, so updates retry on conflict as clients do.
	update := func(change func(*v1alpha1.Mount)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			m, err := henry.Get(ctx, "henrys", metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(m)
			_, err = henry.Update(ctx, m, metav1.UpdateOptions{})
			return err
		})
	}
	if err := update(func(m *v1alpha1.Mount) { m.Labels = map[string]string{"owner": "henry"} }); err != nil {
		t.Fatalf("label update: %v", err)
	}
	if err := update(func(m *v1alpha1.Mount) { m.Spec.Ref.Name = "recording" }); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "clusters/recording") {
		t.Errorf("reference change to an unreadable Secret: %v", err)
	}
}

// TestProxyTimeouts: a normal request is bound by the mount's request timeout and answers
// 504; a watch through the same mount outlives it.
func TestProxyTimeouts(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	target, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	target.Handler = func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Query().Get("watch") == "true" {
			w.Header().Set("Content-Type", "application/json")
			for i := range 3 {
				fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d"}}}`+"\n", i)
				w.(http.Flusher).Flush()
				select {
				case <-time.After(1500 * time.Millisecond):
				case <-req.Context().Done():
					return
				}
			}
			return
		}
		select {
		case <-time.After(10 * time.Second):
		case <-req.Context().Done():
		}
	}
	data, err := target.Kubeconfig("t")
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, "slow", data)
	m := urlMountOf("slow", "slow")
	m.Spec.Timeouts = &v1alpha1.MountTimeouts{RequestSeconds: ptr.To[int32](2)}
	deleteMountsAtEnd(t, "slow")
	if _, err := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ivy := proxyUser(t, "ivy")
	tlsConfig, err := rest.TLSConfigFor(ivy)
	if err != nil {
		t.Fatal(err)
	}
	httpClient := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tlsConfig}}

	start := time.Now()
	resp, err := httpClient.Get(kube.URL + proxyPath("slow") + "/api/v1/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if elapsed := time.Since(start); resp.StatusCode != http.StatusGatewayTimeout || elapsed > 8*time.Second {
		t.Errorf("slow GET: %d after %v: %s; want 504 after about 2s", resp.StatusCode, elapsed, body)
	}

	start = time.Now()
	resp, err = httpClient.Get(kube.URL + proxyPath("slow") + "/api/v1/configmaps?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if elapsed := time.Since(start); resp.StatusCode != http.StatusOK || elapsed < 4*time.Second || !strings.Contains(string(body), "cm-2") {
		t.Errorf("watch: %d after %v, body %q; want all three events over about 4.5s", resp.StatusCode, elapsed, body)
	}
}
