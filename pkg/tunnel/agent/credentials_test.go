package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// agentTarget is a real kube-apiserver with the test kubelet and a running pod default/app,
// the agent's ServiceAccount allowed to impersonate, and group "devs" admin of "default".
type agentTarget struct {
	kube      *framework.KubeAPIServer
	agentCfg  *rest.Config
	kubectl   string
	podServer string // the port-forward target's port on 127.0.0.1
}

func startAgentTarget(t *testing.T) *agentTarget {
	t.Helper()
	ctx := klog.NewContext(context.Background(), klog.Background())
	bin, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	kube, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	kubelet, err := framework.StartKubelet(ctx, kube, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "default", "app"); err != nil {
		t.Fatal(err)
	}
	c := kube.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mount-agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ServiceAccounts("mount-agent").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "mount-agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "mount-agent-impersonator"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"users", "groups"}, Verbs: []string{"impersonate"}},
			// RBAC has no "userextras/*": "*" covers uids and every userextras/<key>.
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mount-agent-impersonator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mount-agent-impersonator"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "mount-agent", Name: "mount-agent"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Not the built-in "admin": without kube-controller-manager aggregated roles stay empty.
	if _, err := c.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "devs"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Verbs: []string{"*"},
			Resources: []string{"pods", "pods/exec", "pods/log", "pods/portforward", "pods/attach", "configmaps"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "devs"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "devs"},
		Subjects:   []rbacv1.Subject{{Kind: "Group", Name: "devs"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.CoreV1().ServiceAccounts("mount-agent").CreateToken(ctx, "mount-agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A bearer token, as in-cluster: upgrades need it added to the upgrade request, which a
	// client certificate (in the TLS configuration) would not show.
	agentCfg := &rest.Config{Host: kube.URL, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: kube.ClientCA.CertPEM}}

	// What port-forwards reach: a server on the pod's address (the kubelet's 127.0.0.1).
	podLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	podSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "from the pod") }), ReadHeaderTimeout: time.Minute}
	go func() { _ = podSrv.Serve(podLn) }()
	t.Cleanup(func() { _ = podSrv.Close() })
	_, port, _ := net.SplitHostPort(podLn.Addr().String())
	return &agentTarget{kube: kube, agentCfg: agentCfg, kubectl: filepath.Join(bin, "kubectl"), podServer: port}
}

// serveAgent serves a CredentialsProxy for cfg as the hub would reach it (plain HTTP) and
// returns a kubeconfig with no credentials at all for it.
func serveAgent(t *testing.T, cfg *rest.Config) (url, kubeconfig string) {
	t.Helper()
	p, err := NewCredentialsProxy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	kubeconfig = filepath.Join(t.TempDir(), "hub.kubeconfig")
	data, err := framework.KubeconfigBytes(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL, kubeconfig
}

func TestCredentialsProxyAgainstKubeAPIServer(t *testing.T) {
	target := startAgentTarget(t)
	url, kubeconfig := serveAgent(t, target.agentCfg)

	kubectl := func(t *testing.T, env []string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(target.kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	as := []string{"--as", "alice", "--as-group", "devs", "--as-uid", "alice-uid", "--as-user-extra", "reason=test"}

	t.Run("refuses a request without Impersonate-User", func(t *testing.T) {
		status := doRaw(t, url+"/api/v1/namespaces/default/pods", nil)
		if status.Code != http.StatusForbidden || !strings.Contains(status.Message, "Impersonate-User") {
			t.Fatalf("got %+v", status)
		}
		// kubectl without --as is refused too, not served with the agent's own rights
		// (its discovery client prints no message of a 403).
		if out, err := kubectl(t, nil, "get", "pods"); err == nil || !strings.Contains(out, "Forbidden") {
			t.Fatalf("kubectl without --as: %v: %s", err, out)
		}
	})
	t.Run("refuses to impersonate system:masters", func(t *testing.T) {
		status := doRaw(t, url+"/api/v1/namespaces/default/pods", http.Header{"Impersonate-User": {"alice"}, "Impersonate-Group": {"system:masters"}})
		if status.Code != http.StatusForbidden || !strings.Contains(status.Message, "system:masters") {
			t.Fatalf("got %+v", status)
		}
	})
	t.Run("the caller's identity, not the agent's", func(t *testing.T) {
		out, err := kubectl(t, nil, "auth", "whoami", "-o", "json", "--as", "alice", "--as-group", "devs", "--as-uid", "alice-uid", "--as-user-extra", "reason=test")
		if err != nil {
			t.Fatalf("whoami: %v: %s", err, out)
		}
		var review authenticationv1.SelfSubjectReview
		if err := json.Unmarshal([]byte(out), &review); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		u := review.Status.UserInfo
		if u.Username != "alice" || u.UID != "alice-uid" || !slices.Contains(u.Groups, "devs") || len(u.Extra["reason"]) != 1 || u.Extra["reason"][0] != "test" {
			t.Fatalf("the target saw %+v", u)
		}
		// Without the group, alice alone may not list pods: the agent's rights do not leak.
		if out, err := kubectl(t, nil, "get", "pods", "--as", "alice"); err == nil || !strings.Contains(out, `User "alice" cannot list resource "pods"`) {
			t.Fatalf("alice alone: %v: %s", err, out)
		}
	})
	t.Run("drops Authorization", func(t *testing.T) {
		// client-go's bearer round tripper keeps an Authorization it finds: had the agent
		// passed this one on, the target would answer 401.
		status, code := getWith(t, url+"/api/v1/namespaces/default/pods", http.Header{
			"Impersonate-User": {"alice"}, "Impersonate-Group": {"devs"}, "Authorization": {"Bearer not-a-token"}})
		if code != http.StatusOK {
			t.Fatalf("got %d: %s", code, status)
		}
	})
	t.Run("get, apply, watch", func(t *testing.T) {
		if out, err := kubectl(t, nil, append([]string{"get", "pods"}, as...)...); err != nil || !strings.Contains(out, "app") {
			t.Fatalf("get pods: %v: %s", err, out)
		}
		cmd := exec.Command(target.kubectl, append([]string{"--kubeconfig", kubeconfig, "get", "configmaps", "-w", "--output-watch-events"}, as...)...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		lines := bufio.NewScanner(stdout)
		apply := exec.Command(target.kubectl, append([]string{"--kubeconfig", kubeconfig, "apply", "-f", "-"}, as...)...)
		apply.Stdin = strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: b\n")
		if out, err := apply.CombinedOutput(); err != nil {
			t.Fatalf("apply: %v: %s", err, out)
		}
		for lines.Scan() {
			if strings.Contains(lines.Text(), "applied") {
				return
			}
		}
		t.Fatalf("the watch ended without the applied ConfigMap: %v", lines.Err())
	})
	t.Run("logs -f streams", func(t *testing.T) {
		cmd := exec.Command(target.kubectl, append([]string{"--kubeconfig", kubeconfig, "logs", "-f", "app"}, as...)...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		lines := bufio.NewScanner(stdout)
		for i := 0; i < 3; i++ {
			if !lines.Scan() {
				t.Fatalf("logs -f ended after %d lines: %v", i, lines.Err())
			}
		}
	})
	for _, proto := range []struct{ name, env string }{
		{"websocket", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"},
		{"spdy", "KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"},
	} {
		t.Run("exec over "+proto.name, func(t *testing.T) {
			out, err := kubectl(t, []string{proto.env}, append(append([]string{"exec", "app"}, as...), "--", "echo", "hello")...)
			if err != nil || out != "hello\n" {
				t.Fatalf("exec: %v: %q", err, out)
			}
			// The agent's identity alone may not exec; alice without her group may not either.
			if out, err := kubectl(t, []string{proto.env}, "exec", "app", "--as", "alice", "--", "echo", "hello"); err == nil || !strings.Contains(out, "forbidden") {
				t.Fatalf("exec as alice alone: %v: %s", err, out)
			}
		})
	}
	for _, proto := range []struct{ name, env string }{
		{"websocket", "KUBECTL_PORT_FORWARD_WEBSOCKETS=true"},
		{"spdy", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"},
	} {
		t.Run("port-forward over "+proto.name, func(t *testing.T) {
			cmd := exec.Command(target.kubectl, append(append([]string{"--kubeconfig", kubeconfig, "port-forward", "pod/app"}, as...), ":"+target.podServer)...)
			cmd.Env = append(os.Environ(), proto.env)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			f := strings.Fields(line)
			if err != nil || len(f) < 3 {
				t.Fatalf("port-forward: %v: %q", err, line)
			}
			resp, err := http.Get("http://" + f[2] + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "from the pod" {
				t.Fatalf("through port-forward: %q", body)
			}
		})
	}
}

// TestCredentialsProxyHeaders: what reaches the target, exactly.
func TestCredentialsProxyHeaders(t *testing.T) {
	rec, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	url, _ := serveAgent(t, &rest.Config{Host: rec.URL + "/base", BearerToken: "agent-token", TLSClientConfig: rest.TLSClientConfig{CAData: rec.CA.CertPEM}})
	_, code := getWith(t, url+"/api/v1/pods?limit=1", http.Header{
		"Impersonate-User":         {"alice"},
		"Impersonate-Group":        {"devs", "ops"},
		"Impersonate-Uid":          {"u1"},
		"Impersonate-Extra-Reason": {"r"},
		"Authorization":            {"Bearer caller"},
		"Cookie":                   {"session=caller"},
		"X-Remote-User":            {"mallory"},
		"Connection":               {"X-Drop-Me, Impersonate-User"},
		"X-Drop-Me":                {"1"},
		"X-Kept":                   {"1"},
	})
	if code != http.StatusOK {
		t.Fatalf("got %d", code)
	}
	reqs := rec.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests reached the target", len(reqs))
	}
	r := reqs[0]
	if r.URL.Path != "/base/api/v1/pods" || r.URL.RawQuery != "limit=1" {
		t.Errorf("path %s?%s", r.URL.Path, r.URL.RawQuery)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer agent-token" {
		t.Errorf("Authorization %q, want the agent's", got)
	}
	for _, h := range []string{"Cookie", "X-Remote-User", "X-Drop-Me"} {
		if v := r.Header.Values(h); len(v) > 0 {
			t.Errorf("%s reached the target: %q", h, v)
		}
	}
	if r.Header.Get("Impersonate-User") != "alice" || strings.Join(r.Header.Values("Impersonate-Group"), ",") != "devs,ops" ||
		r.Header.Get("Impersonate-Uid") != "u1" || r.Header.Get("Impersonate-Extra-Reason") != "r" || r.Header.Get("X-Kept") != "1" {
		t.Errorf("headers at the target: %v", r.Header)
	}
}

// TestCredentialsProxyTargetDown: a target that is not there is a 502 Status that says so
// without the root cause.
func TestCredentialsProxyTargetDown(t *testing.T) {
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url, _ := serveAgent(t, &rest.Config{Host: "https://127.0.0.1:" + strconv.Itoa(port), BearerToken: "agent-token"})
	status := doRaw(t, url+"/api", http.Header{"Impersonate-User": {"alice"}})
	if status.Code != http.StatusBadGateway || status.Reason != ReasonBadGateway || strings.Contains(status.Message, "refused") {
		t.Fatalf("got %+v", status)
	}
	if strings.Contains(status.Message, "agent-token") {
		t.Fatal("the token in a Status")
	}
}

func TestNewCredentialsProxyRefusesImpersonatingConfig(t *testing.T) {
	if _, err := NewCredentialsProxy(&rest.Config{Host: "https://127.0.0.1:1", Impersonate: rest.ImpersonationConfig{UserName: "bob"}}); err == nil {
		t.Fatal("a config that impersonates was accepted")
	}
	if _, err := NewCredentialsProxy(&rest.Config{Host: "127.0.0.1:1"}); err == nil {
		t.Fatal("a host without scheme was accepted")
	}
}

func doRaw(t *testing.T, url string, h http.Header) metav1.Status {
	t.Helper()
	body, code := getWith(t, url, h)
	var s metav1.Status
	if err := json.Unmarshal([]byte(body), &s); err != nil || s.Kind != "Status" || int(s.Code) != code {
		t.Fatalf("not a Status (%d): %v: %s", code, err, body)
	}
	return s
}

func getWith(t *testing.T, url string, h http.Header) (string, int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	if req.Header == nil {
		req.Header = http.Header{}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body), resp.StatusCode
}

// TestNewCredentialsHandler: the agent's credentials serve only its --target.
func TestNewCredentialsHandler(t *testing.T) {
	kubeconfig := func(server string) string {
		data, err := framework.KubeconfigBytes(&rest.Config{Host: server, BearerToken: "agent-token"})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name, kubeconfig, target string
		wantHandler, wantErr     bool
	}{
		{name: "no credentials outside a pod", target: "127.0.0.1:6443"},
		{name: "for the target", kubeconfig: kubeconfig("https://127.0.0.1:6443"), target: "127.0.0.1:6443", wantHandler: true},
		{name: "default port", kubeconfig: kubeconfig("https://target.example"), target: "target.example:443", wantHandler: true},
		{name: "for another address", kubeconfig: kubeconfig("https://127.0.0.1:6444"), target: "127.0.0.1:6443", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &CompletedOptions{Options: &Options{Kubeconfig: tc.kubeconfig, Target: tc.target}}
			h, err := NewCredentialsHandler(o)
			if (err != nil) != tc.wantErr || (h != nil) != tc.wantHandler {
				t.Fatalf("handler %v, error %v", h, err)
			}
			if err != nil && strings.Contains(err.Error(), "agent-token") {
				t.Fatalf("the token in an error: %v", err)
			}
		})
	}
}
