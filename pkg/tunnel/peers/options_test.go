package peers

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

func TestParsePeerURL(t *testing.T) {
	for _, ok := range []string{"https://10.0.0.1:6443", "https://127.0.0.1:443/", "https://[fd00::1]:6443", "https://replica-0.mount-apiserver.svc"} {
		if _, err := ParsePeerURL(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "http://10.0.0.1:6443", "https://", "https://u:p@10.0.0.1", "https://10.0.0.1/path", "https://10.0.0.1?x=1", "10.0.0.1:6443", "https://10.0.0.1#f"} {
		if _, err := ParsePeerURL(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestLeaseName(t *testing.T) {
	long := tunnel.SessionKey(clusters.Name(strings.Repeat("x", 300)), "2f5c0e0e-8a9c-4c9e-9f0b-000000000000")
	for _, key := range []string{tunnel.SessionKey(clusters.DefaultCluster, "uid"), long, "a/b%c"} {
		name := LeaseName(key)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("LeaseName(%q) = %q: %v", key, name, errs)
		}
	}
	if LeaseName("a") == LeaseName("b") {
		t.Error("two keys, one name")
	}
}

func TestOptionsValidate(t *testing.T) {
	o := &Options{PeerURL: "http://x", PeerCAFile: "/does/not/exist"}
	if errs := o.Validate(); len(errs) != 2 {
		t.Errorf("got %v, want two errors", errs)
	}
	for name, want := range map[string]int{"mount-apiserver.mount-apiserver.svc": 0, "10.0.0.1": 0, "Not_A_Name": 1} {
		if errs := (&Options{PeerServerName: name}).Validate(); len(errs) != want {
			t.Errorf("--tunnel-peer-server-name %q: %v", name, errs)
		}
	}
	if errs := NewOptions().Validate(); len(errs) != 0 {
		t.Errorf("defaults: %v", errs)
	}
}
