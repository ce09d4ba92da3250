package options

import (
	"strconv"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// TestMetricsPerMount: --metrics-per-mount (true by default) reaches the proxy and the tunnel
// sessions, both of which label the mounts' series.
func TestMetricsPerMount(t *testing.T) {
	fss := NewOptions().Flags()
	fs := fss.FlagSet("mount-apiserver")
	if f := fs.Lookup("metrics-per-mount"); f == nil || f.DefValue != "true" {
		t.Fatalf("flag %v", f)
	}
	for _, perMount := range []bool{true, false} {
		cfg, _ := config(t, func(o *Options) { o.MetricsPerMount = perMount })
		sessions, ok := cfg.Extra.Proxier.Tunnels.(*tunnel.Sessions)
		if !ok {
			t.Fatalf("the proxy's tunnels are %T", cfg.Extra.Proxier.Tunnels)
		}
		if cfg.Extra.Proxier.MetricsWithoutMounts == perMount || sessions.MetricsWithoutMounts == perMount {
			t.Errorf("--metrics-per-mount=%s: the proxy without mounts %v, the sessions %v", strconv.FormatBool(perMount), cfg.Extra.Proxier.MetricsWithoutMounts, sessions.MetricsWithoutMounts)
		}
		cfg.Close()
	}
}
