package options

import (
	"strings"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/fanout"
)

// TestFanOutMemberTimeoutFlag: --fanout-member-timeout defaults to the fan-out's default and
// must be positive.
func TestFanOutMemberTimeoutFlag(t *testing.T) {
	o := NewOptions()
	if o.FanOutMemberTimeout != fanout.DefaultMemberTimeout {
		t.Errorf("default %v, want %v", o.FanOutMemberTimeout, fanout.DefaultMemberTimeout)
	}
	fss := o.Flags()
	if err := fss.FlagSet("mount-apiserver").Set("fanout-member-timeout", "0s"); err != nil {
		t.Fatal(err)
	}
	o.RootDirectory = t.TempDir()
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--fanout-member-timeout must be positive") {
		t.Errorf("--fanout-member-timeout=0s: %v", err)
	}
}
