package integration

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestSecretsNeverLeak runs a full scenario on a real setup and collects every byte
// mount-apiserver emits, then looks for the credentials of the Mounts' Secrets in all of it.
//
// Setup (delegated mode, the one that writes events): a host kube-apiserver with mount-apiserver registered through the APIService of
// artifacts/apiservice (delegated mode: Secrets, events and leases live on the host), the
// server running as its own process at -v=10 with an audit log at level RequestResponse, and
// a second kube-apiserver as the target. The mount "leak" lends a kubeconfig with a bearer
// token and a client certificate and key; the mount "refused" one with a token the target
// does not know.
//
// Sources: every response (status line, headers, body) the test's clients got from
// mount-apiserver, directly or through the host's aggregator, including the Mounts' statuses;
// the Events, Leases and the APIService the server wrote on the host; the server's standard
// output and error; its audit log; /metrics. In delegated mode the server serves no Secrets,
// so no response is excused: the test writes the Secrets to the host directly.
//
// Needles: the token, the unknown token, the client key (its DER in base64, as the PEM body
// holds it, and in binary), the kubeconfig's client-key-data, and the Secrets' data as the
// Secrets API returns it (base64 of the kubeconfig); each also as hex, spaced hex (hex dumps)
// and decimal bytes (Go's %v of a []byte). A needle is found when any 20-byte window of it
// appears; windows that a second, unrelated set of credentials of the same shape shares (PEM
// and YAML structure, a JWT's header and issuer, the public parts of the kubeconfig) are not
// credentials and are left out.
func TestSecretsNeverLeak(t *testing.T) {
	start := time.Now()
	ctx := klog.NewContext(context.Background(), klog.Background())
	// The server's Secret informers LIST, as they do when the cluster does not stream initial
	// events (an older kube-apiserver, or one with WatchList off): a LIST has a body, which
	// client-go logs at -v=8 and above. The server process inherits the variable.
	t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	var host, remote *framework.KubeAPIServer
	var hostErr error
	started := make(chan struct{})
	hostDir := t.TempDir()
	go func() {
		defer close(started)
		host, hostErr = framework.StartKubeAPIServer(ctx, hostDir)
	}()
	t.Cleanup(func() {
		<-started
		if host != nil {
			host.Stop()
		}
	})
	bin := framework.BuildBinary(t)
	remote = leakStartKube(ctx, t)
	<-started
	if hostErr != nil {
		t.Fatal(hostErr)
	}
	agg, proc := framework.StartAggregatedBinary(ctx, t, host, bin, "RequestResponse", "-v=10", "--status-probe-interval=1s")
	t.Logf("set-up ready after %v", time.Since(start).Round(time.Millisecond))

	// The credentials on the target: a client certificate and a service-account token, both
	// allowed to impersonate; the caller alice may read namespaces there.
	lender, err := remote.UserConfig("mount-lender")
	if err != nil {
		t.Fatal(err)
	}
	leakMust(t, leakErr(remote.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "lender"}}, metav1.CreateOptions{})))
	tr, err := remote.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "lender", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lender.BearerToken = tr.Status.Token
	// A token of the same shape (a JWT of the same issuer and key) that lends nothing: what
	// it shares with the real one (header, issuer, audience) is no credential.
	leakMust(t, leakErr(remote.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "decoy"}}, metav1.CreateOptions{})))
	decoy, err := remote.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "decoy", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leakGrant(ctx, t, remote.Client, "impersonator", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
	}, rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "mount-lender"},
		rbacv1.Subject{Kind: "ServiceAccount", Namespace: "default", Name: "lender"})
	leakGrant(ctx, t, remote.Client, "namespace-reader", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}},
		rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"})

	kubeconfig, err := framework.KubeconfigBytes(lender)
	if err != nil {
		t.Fatal(err)
	}
	unknownToken := "unknown-" + rand.String(40)
	refusedKubeconfig, err := framework.KubeconfigBytes(&rest.Config{Host: remote.URL, BearerToken: unknownToken, TLSClientConfig: rest.TLSClientConfig{CAData: remote.ClientCA.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	leakMust(t, leakErr(host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{})))
	for name, data := range map[string][]byte{"leak": kubeconfig, "refused": refusedKubeconfig} {
		leakMust(t, leakErr(host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"kubeconfig": data}}, metav1.CreateOptions{})))
	}

	// A caller with a bearer token of the host (a service account), reviewed by TokenReview,
	// and a decoy token of the same shape.
	callerTokens := map[string]string{}
	for _, name := range []string{"caller", "caller-decoy"} {
		leakMust(t, leakErr(host.Client.CoreV1().ServiceAccounts("clusters").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})))
		tr, err := host.Client.CoreV1().ServiceAccounts("clusters").CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		callerTokens[name] = tr.Status.Token
	}
	leakGrant(ctx, t, host.Client, "mounts-reader", []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts"}, Verbs: []string{"get", "list"}}},
		rbacv1.Subject{Kind: "ServiceAccount", Namespace: "clusters", Name: "caller"})

	// Every response from mount-apiserver to the test's clients is recorded from here on.
	responses := &leakRecorder{}
	admin := leakMountsClient(t, responses.config(host.AdminConfig))
	for _, name := range []string{"leak", "refused"} {
		m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: name}}}
		if _, err := admin.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	leakGrant(ctx, t, host.Client, "mounts-proxy", []rbacv1.PolicyRule{
		{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts", "mounts/status"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"get", "create"}},
	}, rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"})

	// Status probes: the good mount becomes Ready, the refused one says why it is not.
	leakWaitMount(ctx, t, admin, "leak", func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady })
	leakWaitMount(ctx, t, admin, "refused", func(m *v1alpha1.Mount) bool {
		for _, c := range m.Status.Conditions {
			if c.Type == "TargetReachable" && c.Status == metav1.ConditionFalse {
				return true
			}
		}
		return false
	})

	// Proxied requests as alice, through the host's aggregator.
	aliceCfg, err := host.UserConfig("alice")
	if err != nil {
		t.Fatal(err)
	}
	through := func(cfg *rest.Config, mount string) kubernetes.Interface {
		cfg = responses.config(cfg)
		cfg.Host += "/apis/mounts.kcp.io/v1alpha1/mounts/" + mount + "/proxy"
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice := through(aliceCfg, "leak")
	if _, err := alice.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("GET through the mount: %v", err)
	}
	if _, err := alice.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("LIST through the mount: %v", err)
	}
	watchCtx, cancelWatch := context.WithTimeout(ctx, time.Minute)
	w, err := alice.CoreV1().Namespaces().Watch(watchCtx, metav1.ListOptions{FieldSelector: "metadata.name=watched"})
	if err != nil {
		t.Fatalf("WATCH through the mount: %v", err)
	}
	leakMust(t, leakErr(remote.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{})))
	if ev, ok := <-w.ResultChan(); !ok || ev.Object.(*corev1.Namespace).Name != "watched" {
		t.Fatalf("watch through the mount: got %v", ev)
	}
	w.Stop()
	cancelWatch()
	if _, err := alice.CoreV1().Namespaces().Get(ctx, "does-not-exist", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("GET of a missing namespace: %v, want NotFound", err)
	}
	if _, err := alice.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("LIST of Secrets the target forbids: %v, want Forbidden", err)
	}
	if _, err := through(aliceCfg, "refused").CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Errorf("LIST through the mount whose token the target refuses succeeded")
	}
	mallory, err := host.UserConfig("mallory")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := through(mallory, "leak").CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("LIST by a user without mounts/proxy: %v, want Forbidden", err)
	}
	// The same requests directly to mount-apiserver, and its view of the Mounts.
	direct := through(agg.DirectConfig(aliceCfg), "leak")
	if _, err := direct.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("LIST directly at mount-apiserver: %v", err)
	}
	if _, err := admin.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := leakMountsClient(t, responses.config(agg.DirectConfig(host.AdminConfig))).MountsV1alpha1().Mounts().Get(ctx, "refused", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}

	// The caller with a token, directly at mount-apiserver: its token is reviewed there.
	caller := leakMountsClient(t, responses.config(agg.DirectConfig(&rest.Config{Host: host.URL, BearerToken: callerTokens["caller"]})))
	if _, err := caller.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("LIST of mounts with a bearer token: %v", err)
	}

	t.Logf("scenario done after %v", time.Since(start).Round(time.Millisecond))

	// Events of the phase changes, and what else the server keeps on the host.
	var written bytes.Buffer
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := host.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "Mount" {
				n++
			}
		}
		written.Reset()
		return n >= 2, json.NewEncoder(&written).Encode(events)
	}); err != nil {
		t.Fatalf("waiting for the events of both mounts: %v", err)
	}
	leases, err := host.Client.CoordinationV1().Leases(framework.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiservice, err := host.Client.Discovery().RESTClient().Get().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices/" + framework.APIServiceName).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewEncoder(&written).Encode(leases); err != nil {
		t.Fatal(err)
	}
	written.Write(apiservice)

	// The host counted the LISTs of Secrets: the logging path of bodies was exercised.
	series, err := framework.MetricSeries(host.AdminConfig, `resource="secrets"`)
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, s := range series {
		listed = listed || (strings.HasPrefix(s, "apiserver_request_total{") && strings.Contains(s, `verb="LIST"`))
	}
	if !listed {
		t.Errorf("the host saw no LIST of Secrets; series: %v", series)
	}

	metricsResp := &leakRecorder{}
	if _, err := framework.MetricSeries(metricsResp.config(agg.DirectConfig(host.AdminConfig)), "mount_"); err != nil {
		t.Fatal(err)
	}

	// Stop the server so that its log and audit log are complete, shutdown included.
	if err := proc.Stop(); err != nil {
		t.Logf("mount-apiserver exited with %v", err)
	}
	serverLog, err := os.ReadFile(proc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	auditLog, err := os.ReadFile(agg.AuditLog)
	if err != nil {
		t.Fatal(err)
	}

	sources := []struct {
		name string
		data []byte
		// must is a string the source holds if it was collected as intended.
		must string
	}{
		{"responses to clients (statuses, proxied GET/LIST/watch, errors)", responses.bytes(), `"phase":"Ready"`},
		{"events, leases, APIService on the host", written.Bytes(), `"kind":"Mount"`},
		{"server log at -v=10", serverLog, "Response Body"},
		{"audit log (RequestResponse)", auditLog, `"subresource":"proxy"`},
		{"/metrics", metricsResp.bytes(), "mount_"},
	}
	// The server reviewed the caller's token, and said so in its log.
	if !bytes.Contains(serverLog, []byte("/apis/authentication.k8s.io/v1/tokenreviews")) {
		t.Error("the server's log names no TokenReview: the caller's token was not reviewed as intended")
	}
	needles := leakWindows(t, lender, kubeconfig, unknownToken, refusedKubeconfig, decoy.Status.Token)
	// The caller's own token (not a Mount's credential, but a credential all the same), less
	// what it shares with the decoy's.
	for i := 0; i+leakWindowSize <= len(callerTokens["caller"]); i++ {
		needles[callerTokens["caller"][i:i+leakWindowSize]] = "the caller's bearer token"
	}
	for i := 0; i+leakWindowSize <= len(callerTokens["caller-decoy"]); i++ {
		delete(needles, callerTokens["caller-decoy"][i:i+leakWindowSize])
	}
	total := 0
	for _, s := range sources {
		if !bytes.Contains(s.data, []byte(s.must)) {
			t.Errorf("%s: %d bytes without %q; the source was not collected as intended", s.name, len(s.data), s.must)
		}
		total += len(s.data)
		found := leakScan(s.data, needles)
		t.Logf("%s: %d bytes scanned, %d credential windows found", s.name, len(s.data), len(found))
		for _, f := range found {
			t.Errorf("%s leaks %s at byte %d: ...%s...", s.name, f.needle, f.offset, leakExcerpt(s.data, f.offset))
		}
	}
	t.Logf("%d bytes scanned for %d credential windows; scenario and leakScan took %v", total, len(needles), time.Since(start).Round(time.Millisecond))
}

func leakStartKube(ctx context.Context, t *testing.T) *framework.KubeAPIServer {
	t.Helper()
	k, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

func leakMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// leakErr drops a created object, keeping the error.
func leakErr[T any](_ T, err error) error { return err }

// leakGrant creates a ClusterRole with rules and binds it to subjects.
func leakGrant(ctx context.Context, t *testing.T, client kubernetes.Interface, name string, rules []rbacv1.PolicyRule, subjects ...rbacv1.Subject) {
	t.Helper()
	leakMust(t, leakErr(client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})))
	leakMust(t, leakErr(client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   subjects,
	}, metav1.CreateOptions{})))
}

func leakMountsClient(t *testing.T, cfg *rest.Config) clientset.Interface {
	t.Helper()
	c, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func leakWaitMount(ctx context.Context, t *testing.T, c clientset.Interface, name string, done func(*v1alpha1.Mount) bool) {
	t.Helper()
	var last *v1alpha1.Mount
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := c.MountsV1alpha1().Mounts().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // the aggregator may not route yet
		}
		last = m
		return done(m), nil
	})
	if err != nil {
		t.Fatalf("waiting for mount %s: %v; last status %+v", name, err, last)
	}
}

// leakRecorder keeps the status line, headers and body of every response its clients receive.
type leakRecorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *leakRecorder) config(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return leakRoundTripper(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				return resp, err
			}
			r.mu.Lock()
			fmt.Fprintf(&r.buf, "%s %s -> %s\n", req.Method, req.URL, resp.Status)
			_ = resp.Header.Write(&r.buf)
			r.mu.Unlock()
			resp.Body = &leakTeeBody{ReadCloser: resp.Body, r: r}
			return resp, nil
		})
	})
	return cfg
}

func (r *leakRecorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

type leakRoundTripper func(*http.Request) (*http.Response, error)

func (f leakRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type leakTeeBody struct {
	io.ReadCloser
	r *leakRecorder
}

func (b *leakTeeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.r.mu.Lock()
	b.r.buf.Write(p[:n])
	b.r.mu.Unlock()
	return n, err
}

// leakWindowSize is long enough that a window of random credential bytes in any of the encodings
// is unique, and short enough to fit a hex dump's half line (8 bytes, 23 characters).
const leakWindowSize = 20

// leakWindows returns every window of every encoding of the credentials, mapped to a
// description, minus the windows that credentials of the same shape share with them.
func leakWindows(t *testing.T, lender *rest.Config, kubeconfig []byte, unknownToken string, refusedKubeconfig []byte, decoyToken string) map[string]string {
	t.Helper()
	windows := map[string]string{}
	leakForms(t, lender, kubeconfig, unknownToken, refusedKubeconfig, func(name string, data []byte) {
		for i := 0; i+leakWindowSize <= len(data); i++ {
			windows[string(data[i:i+leakWindowSize])] = name
		}
	})
	// The same shape with other secrets: a fresh key, the decoy token and another unknown
	// token, the same target, CA and certificate.
	ca, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := ca.IssuePEM(&x509.Certificate{Subject: pkix.Name{CommonName: "other"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	other := rest.CopyConfig(lender)
	other.KeyData, other.BearerToken = otherKey, decoyToken
	otherKubeconfig, err := framework.KubeconfigBytes(other)
	if err != nil {
		t.Fatal(err)
	}
	otherRefused := bytes.Replace(refusedKubeconfig, []byte(unknownToken), []byte(strings.Repeat("y", len(unknownToken))), 1)
	leakForms(t, other, otherKubeconfig, strings.Repeat("y", len(unknownToken)), otherRefused, func(_ string, data []byte) {
		for i := 0; i+leakWindowSize <= len(data); i++ {
			delete(windows, string(data[i:i+leakWindowSize]))
		}
	})
	return windows
}

// leakForms calls f with every encoding of every credential.
func leakForms(t *testing.T, lender *rest.Config, kubeconfig []byte, unknownToken string, refusedKubeconfig []byte, f func(name string, data []byte)) {
	t.Helper()
	block, _ := pem.Decode(lender.KeyData)
	if block == nil {
		t.Fatal("the client key is not PEM")
	}
	b64 := base64.StdEncoding.EncodeToString
	for name, data := range map[string][]byte{
		"the bearer token":                        []byte(lender.BearerToken),
		"the token the target refuses":            []byte(unknownToken),
		"the client key (DER)":                    block.Bytes,
		"the client key (PEM body, base64 DER)":   []byte(b64(block.Bytes)),
		"the kubeconfig's client-key-data":        []byte(b64(lender.KeyData)),
		"the Secret's data (base64 kubeconfig)":   []byte(b64(kubeconfig)),
		"the refused Secret's data":               []byte(b64(refusedKubeconfig)),
		"the refused kubeconfig's token (base64)": []byte(b64([]byte(unknownToken))),
		"the bearer token (base64)":               []byte(b64([]byte(lender.BearerToken))),
	} {
		if name != "the client key (DER)" {
			f(name, data)
		}
		f(name+" as hex", []byte(hex.EncodeToString(data)))
		var sb strings.Builder
		for i, c := range data {
			if i > 0 {
				sb.WriteByte(' ')
			}
			fmt.Fprintf(&sb, "%02x", c)
		}
		f(name+" as spaced hex", []byte(sb.String()))
		f(name+" as decimal bytes", []byte(strings.Trim(fmt.Sprint(data), "[]")))
	}
}

type leakFinding struct {
	needle string
	offset int
}

// leakScan returns the first window found per needle in data.
func leakScan(data []byte, windows map[string]string) []leakFinding {
	seen := map[string]bool{}
	var found []leakFinding
	for i := 0; i+leakWindowSize <= len(data); i++ {
		if name, ok := windows[string(data[i:i+leakWindowSize])]; ok && !seen[name] {
			seen[name] = true
			found = append(found, leakFinding{name, i})
		}
	}
	return found
}

func leakExcerpt(data []byte, offset int) string {
	from, to := max(0, offset-80), min(len(data), offset+120)
	return fmt.Sprintf("%q", data[from:to])
}
