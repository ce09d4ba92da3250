package options

import (
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
