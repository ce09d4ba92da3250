package aggregation

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// mount is a Workspace mount: it references no Secret, so any user with mounts-edit may
// create it (URL mounts also need read access to their Secret, see TestSecretReference...).
func mount(name string) *v1alpha1.Mount {
	return &v1alpha1.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.MountSpec{Type: v1alpha1.MountTypeWorkspace, Ref: v1alpha1.ObjectReference{Name: "root:" + name}},
	}
}

func mountsClient(t *testing.T, cfg *rest.Config) clientset.Interface {
	t.Helper()
	c, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubectl runs the real kubectl v1.37.1 against the host kube-apiserver.
func kubectl(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	bin, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

func mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectl(t, kube.AdminKubeconfig, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func user(t *testing.T, name string, groups ...string) *rest.Config {
	t.Helper()
	cfg, err := kube.UserConfig(name, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func bind(t *testing.T, userName, clusterRole string) {
	t.Helper()
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: userName + "-" + clusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: userName}},
	}
	if _, err := kube.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The servers outlive the test; the next run of it (go test -count=2) starts unbound.
	t.Cleanup(func() {
		_ = kube.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	// The host's RBAC sees the binding a moment later, and mount-apiserver caches a denial
	// for seconds: a request sent at once was refused for all the test (seen in CI). Wait
	// until the host allows the role's first rule.
	role, err := kube.Client.RbacV1().ClusterRoles().Get(context.Background(), clusterRole, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ClusterRole %s: %v", clusterRole, err)
	}
	if len(role.Rules) == 0 || len(role.Rules[0].Verbs) == 0 || len(role.Rules[0].APIGroups) == 0 || len(role.Rules[0].Resources) == 0 {
		t.Fatalf("ClusterRole %s has no resource rule first to wait for", clusterRole)
	}
	rule := role.Rules[0]
	attrs := &authorizationv1.ResourceAttributes{Verb: rule.Verbs[0], Group: rule.APIGroups[0], Resource: rule.Resources[0]}
	if resource, sub, ok := strings.Cut(attrs.Resource, "/"); ok {
		attrs.Resource, attrs.Subresource = resource, sub
	}
	if len(rule.ResourceNames) > 0 {
		attrs.Name = rule.ResourceNames[0]
	}
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		review, err := kube.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: userName, ResourceAttributes: attrs},
		}, metav1.CreateOptions{})
		return err == nil && review.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("the host never allowed %s what %s grants: %v", userName, clusterRole, err)
	}
}

// deleteMountsAtEnd deletes Mounts of the shared server when the test ends, so that its next
// run in this process (go test -count=2) can create them again.
func deleteMountsAtEnd(t *testing.T, names ...string) {
	t.Helper()
	mounts := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts()
	t.Cleanup(func() {
		for _, name := range names {
			if err := mounts.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting mount %s: %v", name, err)
			}
		}
	})
}

// eventually polls f for up to 30 s: RBAC changes reach the kube-apiserver's authorizer and
// mount-apiserver's SubjectAccessReview cache (10 s for denials) a little later.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = f()
		return last == nil, nil
	}); err != nil {
		t.Fatalf("%s: %v", what, last)
	}
}

func TestKubectlThroughTheHost(t *testing.T) {
	ctx := context.Background()
	out := mustKubectl(t, "api-resources", "--api-group", "mounts.kcp.io")
	if !regexp.MustCompile(`mounts\s+mnt\s+mounts.kcp.io/v1alpha1\s+false\s+Mount`).MatchString(out) {
		t.Errorf("api-resources:\n%s", out)
	}
	// The host aggregates the server's OpenAPI shortly after the APIService became Available.
	eventually(t, "kubectl explain through the host", func() error {
		out, err := kubectl(t, kube.AdminKubeconfig, "explain", "mount.spec.type")
		if err != nil || !strings.Contains(out, "FIELD: type <string>") || !strings.Contains(out, "Workspace") {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})

	// A watch through the aggregator sees what kubectl and the clientset do.
	bin, _ := framework.KubeBinDir()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	watch := exec.CommandContext(wctx, filepath.Join(bin, "kubectl"), "--kubeconfig", kube.AdminKubeconfig, "get", "mounts", "--watch-only", "--output-watch-events",
		"-o", "custom-columns=EVENT:.type,NAME:.object.metadata.name", "--no-headers")
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()
	events := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			events <- strings.Join(strings.Fields(s.Text()), " ")
		}
		close(events)
	}()

	host := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts()
	// kubectl --watch-only establishes its watch asynchronously: create until it reports one.
	eventually(t, "kubectl watch through the host", func() error {
		m := mount(fmt.Sprintf("watched-%d", time.Now().UnixNano()))
		m.Labels = map[string]string{"test": "kubectl-through-the-host"}
		if _, err := host.Create(ctx, m, metav1.CreateOptions{}); err != nil {
			return err
		}
		select {
		case e := <-events:
			if !strings.HasPrefix(e, "ADDED watched-") {
				return fmt.Errorf("unexpected event %q", e)
			}
			return nil
		case <-time.After(2 * time.Second):
			return fmt.Errorf("no watch event yet")
		}
	})

	out = mustKubectl(t, "apply", "-f", filepath.Join(framework.RepoRoot(), "artifacts", "examples", "mount-url.yaml"))
	if !strings.Contains(out, "mount.mounts.kcp.io/prod created") {
		t.Errorf("apply: %s", out)
	}
	out = mustKubectl(t, "get", "mounts", "prod")
	if !regexp.MustCompile(`(?m)^NAME\s+TYPE\s+PHASE\s+READY\s+REASON\s+AGE\n^prod\s+URL\s+`).MatchString(out) {
		t.Errorf("kubectl get mounts through the host:\n%s", out)
	}
	mustKubectl(t, "apply", "--server-side", "-f", filepath.Join(framework.RepoRoot(), "artifacts", "examples", "mount-url.yaml"))
	if _, err := host.Patch(ctx, "prod", types.MergePatchType, []byte(`{"metadata":{"labels":{"via":"host"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	out = mustKubectl(t, "get", "mounts", "-l", "via=host", "-o", "name")
	if strings.TrimSpace(out) != "mount.mounts.kcp.io/prod" {
		t.Errorf("label selector after patch: %q", out)
	}
	mustKubectl(t, "delete", "mount", "prod")
	// Only this test's: the mounts of other tests (setupProxy's "remote", made once per
	// process) must survive the next run (go test -count=2).
	if err := host.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "test=kubectl-through-the-host"}); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Get(ctx, "prod", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after delete: %v", err)
	}
}

func TestRBACThroughTheAggregatedRoles(t *testing.T) {
	ctx := context.Background()
	bob := mountsClient(t, user(t, "bob")).MountsV1alpha1().Mounts()
	deleteMountsAtEnd(t, "bob-1")

	if _, err := bob.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob without roles lists mounts: %v", err)
	}
	if _, err := bob.Create(ctx, mount("bob-1"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob without roles creates mounts: %v", err)
	}

	bind(t, "bob", "mounts-view")
	eventually(t, "bob lists with mounts-view", func() error {
		_, err := bob.List(ctx, metav1.ListOptions{})
		return err
	})
	if _, err := bob.Create(ctx, mount("bob-1"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob with mounts-view creates mounts: %v", err)
	}

	bind(t, "bob", "mounts-edit")
	eventually(t, "bob creates with mounts-edit", func() error {
		_, err := bob.Create(ctx, mount("bob-1"), metav1.CreateOptions{})
		return err
	})
	m, err := bob.Get(ctx, "bob-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Status.Phase = v1alpha1.MountPhaseReady
	if _, err := bob.UpdateStatus(ctx, m, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("mounts-edit may write status: %v", err)
	}

	// The roles carry the labels by which kube-controller-manager (not running here)
	// aggregates them into the built-in view, edit and admin roles.
	for role, label := range map[string]string{"mounts-view": "aggregate-to-view", "mounts-edit": "aggregate-to-edit", "mounts-admin": "aggregate-to-admin"} {
		cr, err := kube.Client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cr.Labels["rbac.authorization.k8s.io/"+label] != "true" {
			t.Errorf("%s lacks label rbac.authorization.k8s.io/%s: %v", role, label, cr.Labels)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestRealUserReachesMountAPIServer checks in mount-apiserver's own audit log that a request
// through the aggregator arrives as the caller (name and groups), not as the aggregator.
func TestRealUserReachesMountAPIServer(t *testing.T) {
	ctx := context.Background()
	bind(t, "alice", "mounts-edit")
	alice := mountsClient(t, user(t, "alice", "team-a")).MountsV1alpha1().Mounts()
	// A name of this run: the audit log holds the events of earlier ones.
	name := "alice-mount-" + rand.String(5)
	deleteMountsAtEnd(t, name)
	eventually(t, "alice creates", func() error {
		_, err := alice.Create(ctx, mount(name), metav1.CreateOptions{})
		return err
	})

	eventually(t, "audit event of alice's create", func() error {
		f, err := os.Open(agg.AuditLog)
		if err != nil {
			return err
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			var ev struct {
				Verb  string `json:"verb"`
				Stage string `json:"stage"`
				User  struct {
					Username string   `json:"username"`
					Groups   []string `json:"groups"`
				} `json:"user"`
				ObjectRef struct {
					Name string `json:"name"`
				} `json:"objectRef"`
				ResponseStatus struct {
					Code int `json:"code"`
				} `json:"responseStatus"`
			}
			if json.Unmarshal(s.Bytes(), &ev) != nil || ev.Verb != "create" || ev.ObjectRef.Name != name || ev.Stage != "ResponseComplete" || ev.ResponseStatus.Code != http.StatusCreated {
				continue
			}
			if ev.User.Username != "alice" || !contains(ev.User.Groups, "team-a") {
				return fmt.Errorf("mount-apiserver saw user %q groups %v, want alice in team-a", ev.User.Username, ev.User.Groups)
			}
			return nil
		}
		return fmt.Errorf("no audit event for alice's create yet")
	})
}

// TestBypassingTheHostIsRefused talks to mount-apiserver directly. X-Remote-* headers count
// only on connections with a client certificate of the front-proxy CA, which only the
// kube-apiserver holds.
func TestBypassingTheHostIsRefused(t *testing.T) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(agg.Mount.CAData)
	var getAs func(t *testing.T, cert *tls.Certificate, user, group string) (int, string)
	get := func(t *testing.T, cert *tls.Certificate) (int, string) {
		t.Helper()
		return getAs(t, cert, "kube-admin", "system:masters")
	}
	getAs = func(t *testing.T, cert *tls.Certificate, user, group string) (int, string) {
		t.Helper()
		cfg := &tls.Config{RootCAs: pool}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		req, err := http.NewRequest(http.MethodGet, agg.Mount.URL+"/apis/mounts.kcp.io/v1alpha1/mounts", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Remote-User", user)
		req.Header.Add("X-Remote-Group", group)
		resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}).Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	keyPair := func(t *testing.T, certPEM, keyPEM []byte) *tls.Certificate {
		t.Helper()
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	clientCert := func(t *testing.T, ca interface {
		IssuePEM(*x509.Certificate) ([]byte, []byte, error)
	}, cn string) *tls.Certificate {
		t.Helper()
		certPEM, keyPEM, err := ca.IssuePEM(&x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if err != nil {
			t.Fatal(err)
		}
		return keyPair(t, certPEM, keyPEM)
	}

	t.Run("no client certificate", func(t *testing.T) {
		if code, body := get(t, nil); code != http.StatusForbidden || !strings.Contains(body, `User \"system:anonymous\"`) {
			t.Errorf("got %d %s, want 403 for system:anonymous", code, body)
		}
	})
	t.Run("front-proxy name from the wrong CA", func(t *testing.T) {
		// Valid for the cluster's client CA, so it authenticates, but as itself, not as the
		// headers say.
		if code, body := get(t, clientCert(t, kube.ClientCA, "front-proxy-client")); code != http.StatusForbidden || !strings.Contains(body, `User \"front-proxy-client\"`) {
			t.Errorf("got %d %s, want 403 for front-proxy-client", code, body)
		}
	})
	t.Run("certificate of an unknown CA", func(t *testing.T) {
		rogue, err := newRogueCA()
		if err != nil {
			t.Fatal(err)
		}
		// The certificate does not verify, so the request is anonymous.
		if code, body := get(t, clientCert(t, rogue, "front-proxy-client")); code != http.StatusForbidden || !strings.Contains(body, `User \"system:anonymous\"`) {
			t.Errorf("got %d %s, want 403 for system:anonymous", code, body)
		}
	})
	frontProxy := func(t *testing.T) *tls.Certificate {
		certPEM, err := os.ReadFile(filepath.Join(kube.Dir, "front-proxy-client.crt"))
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, err := os.ReadFile(filepath.Join(kube.Dir, "front-proxy-client.key"))
		if err != nil {
			t.Fatal(err)
		}
		return keyPair(t, certPEM, keyPEM)
	}
	t.Run("control: the real front-proxy certificate", func(t *testing.T) {
		// With the kube-apiserver's own proxy client certificate the headers are honoured:
		// the refusals above are down to the certificate, nothing else.
		if code, body := get(t, frontProxy(t)); code != http.StatusOK {
			t.Errorf("got %d %s, want 200", code, body)
		}
	})
	t.Run("delegated authorization of a header identity", func(t *testing.T) {
		// mount-apiserver asks the host (SubjectAccessReview) about the user the headers name.
		if code, body := getAs(t, frontProxy(t), "nobody", "nobodies"); code != http.StatusForbidden || !strings.Contains(body, `User \"nobody\"`) {
			t.Errorf("got %d %s, want 403 for nobody", code, body)
		}
	})
}

func TestAPIServiceTrustsThePublishedCA(t *testing.T) {
	raw, err := kube.Client.Discovery().RESTClient().Get().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices/" + framework.APIServiceName).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var svc struct {
		Spec struct {
			CABundle              []byte `json:"caBundle"`
			InsecureSkipTLSVerify bool   `json:"insecureSkipTLSVerify"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &svc); err != nil {
		t.Fatal(err)
	}
	if string(svc.Spec.CABundle) != string(agg.Mount.CAData) || svc.Spec.InsecureSkipTLSVerify {
		t.Errorf("APIService caBundle is not the server's CA (insecureSkipTLSVerify=%v)", svc.Spec.InsecureSkipTLSVerify)
	}
}

// TestRestartWhileRegistered stops the shared server, sees the host answer 503, and waits for
// the APIService to become Available again with the data intact; later tests use the
// restarted server.
func TestRestartWhileRegistered(t *testing.T) {
	ctx := context.Background()
	host := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts()
	deleteMountsAtEnd(t, "survivor")
	if _, err := host.Create(ctx, mount("survivor"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := agg.Mount.Stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "host reports the API unavailable", func() error {
		_, err := host.Get(ctx, "survivor", metav1.GetOptions{})
		if apierrors.IsServiceUnavailable(err) {
			return nil
		}
		return fmt.Errorf("got %v, want 503", err)
	})
	start := time.Now()
	if err := agg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("APIService Available again %v after restart", time.Since(start).Round(time.Millisecond))
	eventually(t, "survivor through the host", func() error {
		_, err := host.Get(ctx, "survivor", metav1.GetOptions{})
		return err
	})
}
