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
