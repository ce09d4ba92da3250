package options

import (
	"strings"
	"testing"
	"time"
)

func TestKcpUnboundGCFlag(t *testing.T) {
	o := NewOptions()
	if o.Kcp.UnboundGCInterval != time.Minute {
		t.Errorf("default --kcp-unbound-gc-interval %v, want 1m", o.Kcp.UnboundGCInterval)
	}
	fss := o.Flags()
	if err := fss.FlagSet("kcp").Set("kcp-unbound-gc-interval", "0"); err != nil || o.Kcp.UnboundGCInterval != 0 {
		t.Errorf("--kcp-unbound-gc-interval=0: %v, %v", err, o.Kcp.UnboundGCInterval)
	}
	o.Kcp.UnboundGCInterval = -time.Second
	o.Kcp.APIExportURL = "https://shard.example/services/apiexport/root/mounts"
	var msgs []string
	for _, err := range o.Kcp.Validate(true) {
		msgs = append(msgs, err.Error())
	}
	if got := strings.Join(msgs, "; "); !strings.Contains(got, "must not be negative") || !strings.Contains(got, "--kcp-kubeconfig") {
		t.Errorf("validation: %s", got)
	}
}

// TestKcpValidation: kcp mode needs a status.URL base that is not the server itself, and names
// for every CA whose certificates may name callers in X-Remote-*.
func TestKcpValidation(t *testing.T) {
	for name, c := range map[string]struct {
		modify func(*Options)
		want   string
	}{
		"no external base URL": {func(o *Options) { o.ExternalBaseURL = "" }, "--kcp-mode needs --external-base-url"},
		"shard CA, no names":   {func(o *Options) { o.Kcp.ShardClientCAFile = "ca.crt" }, "--kcp-shard-client-ca-file needs --kcp-shard-client-names"},
		"front-proxy CA, no names": {func(o *Options) { o.Kcp.FrontProxyClientCAFile = "ca.crt" },
			"--kcp-front-proxy-client-ca-file needs --kcp-front-proxy-client-names"},
		"export CA, no export": {func(o *Options) { o.Kcp.APIExportCAFile = "ca.crt" }, "--kcp-apiexport-ca-file needs --kcp-apiexport-url"},
	} {
		o := NewOptions()
		o.KcpMode = true
		o.ExternalBaseURL = "https://kcp.example.com/services/mounts"
		c.modify(o)
		completed, err := o.Complete()
		if err != nil {
			t.Fatal(err)
		}
		if err := completed.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
