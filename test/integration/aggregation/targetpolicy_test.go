package aggregation

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// policyRefusal is what every refusal of the target policy says; the rest of the message
// names the rule class, never what answered.
const policyRefusal = "is not allowed by the server's target policy"

// tenant returns a host user as the security review sees one: mounts-edit, read access to
// the named Secrets only, and mounts/proxy.
func tenant(t *testing.T, name string, secrets ...string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	bind(t, name, "mounts-edit")
	_, err := kube.Client.RbacV1().Roles(secretsNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-secrets"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: secrets, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = kube.Client.RbacV1().RoleBindings(secretsNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-secrets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name + "-secrets"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: name}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return proxyUser(t, name)
}

// tenantCreates creates a URL mount of secret as the tenant.
func tenantCreates(t *testing.T, cfg *rest.Config, name, secret string) {
	t.Helper()
	mounts := mountsClient(t, cfg).MountsV1alpha1().Mounts()
	eventually(t, "tenant creates mount "+name, func() error {
		_, err := mounts.Create(context.Background(), urlMountOf(name, secret), metav1.CreateOptions{})
		return err
	})
}

// tenantIsRefused expects admission to refuse the tenant's URL mount of secret for its target.
func tenantIsRefused(t *testing.T, cfg *rest.Config, name, secret, class string) {
	t.Helper()
	mounts := mountsClient(t, cfg).MountsV1alpha1().Mounts()
	eventually(t, "admission refuses mount "+name+" for its target", func() error {
		_, err := mounts.Create(context.Background(), urlMountOf(name, secret), metav1.CreateOptions{})
		if apierrors.IsInvalid(err) && strings.Contains(err.Error(), "spec.ref") && strings.Contains(err.Error(), policyRefusal) && strings.Contains(err.Error(), class) {
			return nil
		}
		return fmt.Errorf("got %v", err)
	})
}

// TestTargetPolicyRefusesPlainHTTPMetadata: a tenant aims a mount at a plain-http
// "metadata service" on loopback. Admission refuses the mount while its Secret names that
// target; a mount admitted before its Secret named it is refused by the proxy: the caller
// gets a policy refusal, the metadata server sees no request, its answer never reaches the
// caller, and the Mount's status says why.
func TestTargetPolicyRefusesPlainHTTPMetadata(t *testing.T) {
	// Names of this run: the servers outlive it (go test -count=2).
	n := runNames()
	setupProxy(t)
	var hits atomic.Int32
	metadata := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, `{"AccessKeyId":"metadata-secret-do-not-leak"}`)
	}))
	defer metadata.Close()
	data, err := framework.KubeconfigBytes(&rest.Config{Host: metadata.URL, BearerToken: "mount-token"})
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, n("metadata-first"), data)
	mallory := tenant(t, n("mallory"), n("metadata-first"), n("metadata"))
	tenantIsRefused(t, mallory, n("metadata-first"), n("metadata-first"), "plain http")
	tenantCreates(t, mallory, n("metadata"), n("metadata"))
	setSecretData(t, n("metadata"), data)

	code, _, body := proxyGet(t, mallory, n("metadata"), "/latest/meta-data/iam/security-credentials/node")
	if code != http.StatusForbidden || !strings.Contains(body, policyRefusal) || !strings.Contains(body, "plain http") {
		t.Errorf("plain http target through the proxy: %d %s; want 403 refused by the target policy (plain http)", code, body)
	}
	if strings.Contains(body, "metadata-secret") {
		t.Errorf("the metadata server's answer reached the caller: %s", body)
	}
	// The mount was first probed without its Secret: wait for the refusal.
	m := waitCondition(t, n("metadata"), v1alpha1.ConditionCredentialsResolved, func(c metav1.Condition) bool {
		return c.Status == metav1.ConditionFalse && c.Reason == "TargetNotAllowed"
	})
	if c := condition(m, v1alpha1.ConditionCredentialsResolved); c.Reason != "TargetNotAllowed" || !strings.Contains(c.Message, policyRefusal) {
		t.Errorf("CredentialsResolved of a refused target: %+v", c)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the metadata server saw %d requests (proxied or probes)", n)
	}
}

// TestTargetPolicyRefusesThisServer: a tenant aims mounts at mount-apiserver itself, with
// its published CA: once at its own address and port, once through a TCP relay on another
// port (as a Service or a NAT would route back to it), where only its certificate tells.
func TestTargetPolicyRefusesThisServer(t *testing.T) {
	// Names of this run: the servers outlive it (go test -count=2).
	n := runNames()
	setupProxy(t)
	oscar := tenant(t, n("oscar"), n("self-port"), n("self-relay"))
	self := func(host string) []byte {
		data, err := framework.KubeconfigBytes(&rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{
			CAData: agg.Mount.CAData, CertData: oscar.CertData, KeyData: oscar.KeyData}})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	relayed := relay(t, strings.TrimPrefix(agg.Mount.URL, "https://"))
	// Admitted before their Secrets name this server; the proxy refuses them.
	tenantCreates(t, oscar, n("self-port"), n("self-port"))
	tenantCreates(t, oscar, n("self-relay"), n("self-relay"))
	setSecretData(t, n("self-port"), self(agg.Mount.URL))
	setSecretData(t, n("self-relay"), self("https://"+relayed.addr))
	// With the Secret in place, admission refuses this server's own address at once.
	tenantIsRefused(t, oscar, n("self-port-again"), n("self-port"), "own endpoints")

	for mount, class := range map[string]string{n("self-port"): "own endpoints", n("self-relay"): "own serving certificate"} {
		code, _, body := proxyGet(t, oscar, mount, "/version")
		if code != http.StatusForbidden || !strings.Contains(body, policyRefusal) || !strings.Contains(body, class) {
			t.Errorf("mount %s of this server: %d %s; want 403 refused by the target policy (%s)", mount, code, body, class)
		}
	}
	if relayed.conns.Load() == 0 {
		t.Error("the relay saw no connection: the certificate check was not what refused it")
	}
}

// tcpRelay forwards connections to another address, as a Service's virtual IP would.
type tcpRelay struct {
	addr  string
	conns atomic.Int32
}

// relay starts a tcpRelay to to on 127.0.0.1; the test's cleanup closes it and every
// connection it carries (the proxy keeps idle connections open).
func relay(t *testing.T, to string) *tcpRelay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &tcpRelay{addr: l.Addr().String()}
	var mu sync.Mutex
	var open []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			r.conns.Add(1)
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			open = append(open, in, out)
			mu.Unlock()
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	return r
}

// waitCondition waits until the mount's condition satisfies ok and returns the mount.
func waitCondition(t *testing.T, name, conditionType string, ok func(metav1.Condition) bool) *v1alpha1.Mount {
	t.Helper()
	var m *v1alpha1.Mount
	eventually(t, "mount "+name+" condition "+conditionType, func() error {
		var err error
		m, err = mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := condition(m, conditionType); !ok(c) {
			return fmt.Errorf("%s: %+v", conditionType, c)
		}
		return nil
	})
	return m
}

// rootCauses are texts that tell what answered rather than what failed; no message a tenant
// sees carries them.
var loopbackAddress = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

var rootCauses = []string{"connection refused", "connect:", "tls:", "first record", "HTTP", "x509", "answered 404", "404", "EOF"}

// TestTargetStatusSaysWhatFailed: a closed port, an open port that does not speak TLS and a
// TLS server that is no Kubernetes API each get a message of the fixed vocabulary, without
// root causes, in the Mount's status and in the proxy's answer, with the codes the design
// requires.
func TestTargetStatusSaysWhatFailed(t *testing.T) {
	// Names of this run: the servers outlive it (go test -count=2).
	n := runNames()
	setupProxy(t)
	ca, err := newRogueCA()
	if err != nil {
		t.Fatal(err)
	}
	closed, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	notKube, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer notKube.Close()
	notKube.Handler = http.NotFoundHandler().ServeHTTP
	notKubeConfig, err := notKube.Kubeconfig("t")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigOf := func(host string) []byte {
		data, err := framework.KubeconfigBytes(&rest.Config{Host: host, BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM}})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	cases := []struct {
		mount      string
		kubeconfig []byte
		message    string
		code       int // of a proxied GET; 0 when the target's own answer passes through
	}{
		{n("closed-port"), kubeconfigOf(fmt.Sprintf("https://127.0.0.1:%d", closed)), "cannot connect to the mount's target", http.StatusServiceUnavailable},
		{n("plain-port"), kubeconfigOf("https://" + plain.Listener.Addr().String()), "did not answer as a Kubernetes API server over TLS", http.StatusBadGateway},
		{n("not-kube"), notKubeConfig, "did not answer as a Kubernetes API server", 0},
	}
	admin := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts()
	for _, c := range cases {
		setSecretData(t, c.mount, c.kubeconfig)
		if _, err := admin.Create(context.Background(), urlMountOf(c.mount, c.mount), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gina := proxyUser(t, n("gina-status"))
	for _, c := range cases {
		m := waitCondition(t, c.mount, v1alpha1.ConditionTargetReachable, func(cond metav1.Condition) bool { return cond.Status == metav1.ConditionFalse })
		msg := condition(m, v1alpha1.ConditionTargetReachable).Message
		if !strings.Contains(msg, c.message) {
			t.Errorf("%s: TargetReachable %q, want %q", c.mount, msg, c.message)
		}
		// The target's address may contain digits like "404"; look at the rest.
		rest := loopbackAddress.ReplaceAllString(msg, "")
		for _, cause := range rootCauses {
			if strings.Contains(rest, cause) {
				t.Errorf("%s: TargetReachable %q carries the root cause %q", c.mount, msg, cause)
			}
		}
		if c.code == 0 {
			continue
		}
		code, header, body := proxyGet(t, gina, c.mount, "/version")
		if code != c.code || !strings.Contains(body, c.message) {
			t.Errorf("%s through the proxy: %d %s; want %d %q", c.mount, code, body, c.code, c.message)
		}
		if header.Get("Retry-After") != "" {
			t.Errorf("%s: a failure of the hop with Retry-After, which client-go obeys ten times", c.mount)
		}
		bodyRest := loopbackAddress.ReplaceAllString(body, "")
		for _, cause := range rootCauses {
			if strings.Contains(bodyRest, cause) {
				t.Errorf("%s: proxy answer %s carries the root cause %q", c.mount, body, cause)
			}
		}
	}
}

// TestTargetPolicyLists runs a standalone server (Secrets from the host) that allows only the
// remote kube-apiserver's address and port and denies the name "localhost": the remote is
// reachable; another server on loopback is outside the allow list; the remote by the name
// "localhost" is denied, although its address is allowed, as deny wins.
func TestTargetPolicyLists(t *testing.T) {
	// Names of this run: the servers outlive it (go test -count=2).
	n := runNames()
	setupProxy(t)
	ctx := context.Background()
	remoteBind(t, n("policy-creds"), "namespace-reader")
	creds, err := remote.UserConfig(n("policy-creds"))
	if err != nil {
		t.Fatal(err)
	}
	remoteAddr := strings.TrimPrefix(remote.URL, "https://")
	_, remotePort, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		t.Fatal(err)
	}
	setSecret(t, n("policy-allowed"), creds)
	byName := rest.CopyConfig(creds)
	byName.Host = "https://localhost:" + remotePort
	outside, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	data, err := outside.Kubeconfig("t")
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{n("policy-allowed"), n("policy-denied"), n("policy-outside")} {
		allowSecretRead(t, pki.AdminUser, secret)
	}

	s := framework.StartInProcess(t, "", func(o *options.Options) {
		o.SecretsKubeconfig = kube.AdminKubeconfig
		o.ProxyAllowedTargets = []string{remoteAddr}
		o.ProxyDeniedTargets = []string{"localhost"}
	})
	mounts := s.Client.MountsV1alpha1().Mounts()
	// Admitted before the Secrets of the refused targets exist; the proxy refuses them.
	for _, name := range []string{n("policy-allowed"), n("policy-denied"), n("policy-outside")} {
		m := urlMountOf(name, name)
		m.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
		eventually(t, "the admin creates mount "+name, func() error {
			_, err := mounts.Create(ctx, m, metav1.CreateOptions{})
			return err
		})
	}
	setSecret(t, n("policy-denied"), byName)
	setSecretData(t, n("policy-outside"), data)
	// Now that they name their targets, admission refuses new mounts of them.
	for secret, class := range map[string]string{n("policy-outside"): "not on the server's list of allowed targets", n("policy-denied"): "on the server's list of denied targets"} {
		m := urlMountOf(secret+"-again", secret)
		m.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
		// Admission reads the Secret through the server's watch of it, which sees the new
		// Secret a moment later; the proxy's own checks do not depend on that.
		eventually(t, "admission refuses a mount of "+secret, func() error {
			if _, err := mounts.Create(ctx, m, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), class) {
				return fmt.Errorf("got %v, want 422 %q", err, class)
			}
			return nil
		})
	}
	if code, _, body := proxyGet(t, s.Config, n("policy-allowed"), "/api/v1/namespaces"); code != http.StatusOK || !strings.Contains(body, "kube-system") {
		t.Errorf("allowed target: %d %s", code, body)
	}
	for mount, class := range map[string]string{
		n("policy-outside"): "it is not on the server's list of allowed targets",
		n("policy-denied"):  "it is on the server's list of denied targets",
	} {
		code, _, body := proxyGet(t, s.Config, mount, "/api/v1/namespaces")
		if code != http.StatusForbidden || !strings.Contains(body, policyRefusal) || !strings.Contains(body, class) {
			t.Errorf("%s: %d %s; want 403 %q", mount, code, body, class)
		}
		eventually(t, mount+" status", func() error {
			m, err := mounts.Get(ctx, mount, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if c := condition(m, v1alpha1.ConditionCredentialsResolved); c.Reason != "TargetNotAllowed" || !strings.Contains(c.Message, class) {
				return fmt.Errorf("CredentialsResolved: %+v", c)
			}
			return nil
		})
	}
	if n := len(outside.Requests()); n != 0 {
		t.Errorf("the server outside the allow list saw %d requests", n)
	}
}

// runNames returns a function that gives a name of this test run: a test's objects on the
// package's shared servers do not collide with those of its earlier runs.
func runNames() func(string) string {
	run := rand.String(5)
	return func(name string) string { return name + "-" + run }
}
