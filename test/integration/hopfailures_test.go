package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// hopFailureBound is how long kubectl may take to report a failure of the hop: a few seconds
// of work, with room for a loaded machine. client-go retried 503 with Retry-After: 5 ten times
// per request, and kubectl took 50 to 160 s.
const hopFailureBound = 15 * time.Second

// TestHopFailuresReachKubectl runs the real kubectl through mounts whose hop to the target
// fails: the target down, no agent for a tunnel mount, the target refusing the mount's
// credentials, a target certificate of another CA, a silent target, a Secret without the
// kubeconfig key and a missing Secret. Each time kubectl must end within a few seconds and
// print the server's reason, naming the mount and the cause, and nothing that blames the
// caller's own login ("You must be logged in", which may also start a credential plugin's
// login). The seconds kubectl took and what it printed are logged as the figures.
func TestHopFailuresReachKubectl(t *testing.T) {
	m := startMountedTarget(t)
	ctx := context.Background()
	core, err := kubernetes.NewForConfig(m.hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	secret := func(name string, data map[string][]byte) {
		t.Helper()
		if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig"}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfigOf := func(cfg *rest.Config) map[string][]byte {
		t.Helper()
		kc, err := framework.KubeconfigBytes(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{"kubeconfig": kc}
	}

	// down: nothing listens on the target's port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downURL := "https://" + ln.Addr().String()
	ln.Close()
	down := rest.CopyConfig(m.kube.AdminConfig)
	down.Host = downURL
	secret("down", kubeconfigOf(down))
	// refused: the target does not know the mount's token.
	secret("refused", kubeconfigOf(&rest.Config{Host: m.kube.URL, BearerToken: "not-a-token-of-the-target", TLSClientConfig: rest.TLSClientConfig{CAData: m.kube.ClientCA.CertPEM}}))
	// wrong-ca: the mount trusts another CA than the one that signed the target's certificate.
	other, err := pki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	wrongCA := rest.CopyConfig(m.kube.AdminConfig)
	wrongCA.CAData = other.CertPEM
	secret("wrong-ca", kubeconfigOf(wrongCA))
	// silent: accepts TCP and never speaks.
	silent := startHostileTarget(t, true, nil, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	secret("silent", map[string][]byte{"kubeconfig": silent.kubeconfig(t)})
	// no-key: a Secret without the key "kubeconfig".
	secret("no-key", map[string][]byte{"config": []byte("x")})
	// no-secret: the referenced Secret does not exist.

	for _, name := range []string{"down", "refused", "wrong-ca", "silent", "no-key", "no-secret"} {
		mount := urlMount(name)
		if name == "silent" {
			mount.Spec.Timeouts = &v1alpha1.MountTimeouts{ConnectSeconds: ptr.To[int32](2), RequestSeconds: ptr.To[int32](3)}
		}
		if _, err := m.hub.Client.MountsV1alpha1().Mounts().Create(ctx, mount, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// no-agent: a tunnel mount whose agent brings the credentials; none is attached.
	if _, err := m.hub.Client.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "no-agent"}, Spec: v1alpha1.MountSpec{
		Tunnel: &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsAgent},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		mount string
		// cause must be in what kubectl prints.
		cause string
	}{
		{"down", "unreachable"},
		{"no-agent", "no agent is connected"},
		{"refused", "did not accept the mount's credentials"},
		{"wrong-ca", "certificate that does not verify"},
		{"silent", "timed out"},
		{"no-key", `no key`},
		{"no-secret", "does not exist"},
	}
	results := make([]kubectlResult, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() {
			kubeconfig := withServer(t, m.viaMount, m.hub.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/"+c.mount+"/proxy")
			results[i] = runKubectlWith(ctx, m.kubectl, t.TempDir(), kubeconfig, "", 4*time.Minute, "get", "namespaces")
		})
	}
	wg.Wait()
	var table strings.Builder
	for i, c := range cases {
		r := results[i]
		fmt.Fprintf(&table, "\n%-10s exit %d after %5.1fs: %s", c.mount, r.exitCode, r.took.Seconds(), lastLine(r.out))
		t.Run(c.mount, func(t *testing.T) {
			if r.exitCode != 1 || r.took > hopFailureBound {
				t.Errorf("kubectl get namespaces: exit %d after %v, want 1 within %v\n%s", r.exitCode, r.took, hopFailureBound, r.out)
			}
			// With a cold discovery cache kubectl prints the text of /api (single quotes).
			named := strings.Contains(lastLine(r.out), fmt.Sprintf(`mount "%s"`, c.mount)) || strings.Contains(lastLine(r.out), fmt.Sprintf(`mount '%s'`, c.mount))
			if !named || !strings.Contains(lastLine(r.out), c.cause) {
				t.Errorf("kubectl's error does not name the mount and %q:\n%s", c.cause, r.out)
			}
			for _, blame := range []string{"You must be logged in", "Unauthorized", "context deadline exceeded"} {
				if strings.Contains(r.out, blame) {
					t.Errorf("kubectl says %q:\n%s", blame, r.out)
				}
			}
		})
	}
	t.Logf("kubectl get namespaces through failing mounts (load %s):%s", loadAverage(), table.String())
}

// lastLine is the last non-empty line of s: what kubectl printed as its error.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
