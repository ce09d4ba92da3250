package options

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/util/flowcontrol"
)

// TestTunnelAuthorizationQPS: --tunnel-authorization-qps (20 by default) becomes the limiter
// every session's re-check waits on; zero or a negative rate is refused.
func TestTunnelAuthorizationQPS(t *testing.T) {
	fss := NewOptions().Flags()
	fs := fss.FlagSet("tunnel")
	if f := fs.Lookup("tunnel-authorization-qps"); f == nil || f.DefValue != "20" {
		t.Fatalf("flag %v", f)
	}
	cfg, _ := config(t, func(o *Options) { o.Tunnel.AuthorizationQPS = 7 })
	l, ok := cfg.Extra.Tunnel.AuthorizationLimiter.(flowcontrol.RateLimiter)
	if !ok || l.QPS() != 7 {
		t.Fatalf("limiter %#v", cfg.Extra.Tunnel.AuthorizationLimiter)
	}
	cfg.Close()
	for _, qps := range []float32{0, -1} {
		o := NewOptions()
		o.Tunnel.AuthorizationQPS = qps
		completed, err := o.Complete()
		if err != nil {
			t.Fatal(err)
		}
		if err := completed.Validate(); err == nil || !strings.Contains(err.Error(), "--tunnel-authorization-qps must be positive") {
			t.Fatalf("%v: %v", qps, err)
		}
	}
}

// TestTunnelMaxAttaching: --tunnel-max-attaching (64 by default) reaches the server's
// configuration; less than 1 is refused.
func TestTunnelMaxAttaching(t *testing.T) {
	fss := NewOptions().Flags()
	if f := fss.FlagSet("tunnel").Lookup("tunnel-max-attaching"); f == nil || f.DefValue != "64" {
		t.Fatalf("flag %v", f)
	}
	cfg, _ := config(t, func(o *Options) { o.Tunnel.MaxAttaching = 5 })
	if cfg.Extra.Tunnel.MaxAttaching != 5 {
		t.Fatalf("MaxAttaching %d", cfg.Extra.Tunnel.MaxAttaching)
	}
	cfg.Close()
	o := NewOptions()
	o.Tunnel.MaxAttaching = 0
	completed, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if err := completed.Validate(); err == nil || !strings.Contains(err.Error(), "--tunnel-max-attaching must be at least 1") {
		t.Fatalf("%v", err)
	}
}

// TestKubeAPIQPS: --kube-api-qps and --kube-api-burst (100 and 200 by default) become the
// host client's rate, which paces a fleet's reconnect storm; zero or less is refused.
func TestKubeAPIQPS(t *testing.T) {
	fss := NewOptions().Flags()
	fs := fss.FlagSet("mount-apiserver")
	if f := fs.Lookup("kube-api-qps"); f == nil || f.DefValue != "100" {
		t.Fatalf("flag %v", f)
	}
	if f := fs.Lookup("kube-api-burst"); f == nil || f.DefValue != "200" {
		t.Fatalf("flag %v", f)
	}
	kubeconfig := filepath.Join(t.TempDir(), "host.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: host, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: host, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	parsed := o.Flags()
	if err := parsed.FlagSet("mount-apiserver").Parse([]string{"--kubeconfig", kubeconfig, "--kube-api-qps", "400", "--kube-api-burst", "800"}); err != nil {
		t.Fatal(err)
	}
	completed, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	c, err := completed.hostConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.QPS != 400 || c.Burst != 800 {
		t.Fatalf("host client QPS %v, burst %d", c.QPS, c.Burst)
	}
	for _, tc := range []struct {
		qps   float32
		burst int
		want  string
	}{{0, 200, "--kube-api-qps must be positive"}, {-1, 200, "--kube-api-qps must be positive"}, {100, 0, "--kube-api-burst must be at least 1"}} {
		o := NewOptions()
		o.KubeAPIQPS, o.KubeAPIBurst = tc.qps, tc.burst
		completed, err := o.Complete()
		if err != nil {
			t.Fatal(err)
		}
		if err := completed.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v/%d: %v", tc.qps, tc.burst, err)
		}
	}
}
