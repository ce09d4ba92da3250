package options

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// The secure port is bound before the embedded etcd takes ports from the kernel: otherwise
// etcd may be handed the very port the server was told to serve on (seen in CI: "bind:
// address already in use" for --secure-port, held by etcd's client listener). A port that
// is already taken therefore fails the start before etcd has written anything.
func TestSecurePortIsBoundBeforeEmbeddedEtcdStarts(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	o := NewOptions()
	o.RootDirectory = t.TempDir()
	o.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	o.SecureServing.BindPort = busy.Addr().(*net.TCPAddr).Port
	completed, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if err := completed.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := completed.Config(ctx)
	if err == nil {
		cfg.Close()
		t.Fatal("Config succeeded on a secure port another listener holds")
	}
	if !strings.Contains(err.Error(), "applying serving options") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error = %v, want the serving options to fail on the busy port", err)
	}
	if _, statErr := os.Stat(filepath.Join(o.RootDirectory, etcdDir)); !os.IsNotExist(statErr) {
		t.Fatalf("the embedded etcd was started before the secure port was bound (stat of its directory: %v)", statErr)
	}
}

// A configuration that was never served releases its secure listener when closed.
func TestConfigCloseReleasesTheSecureListener(t *testing.T) {
	cfg, o := config(t, nil)
	addr := o.SecureServing.Listener.Addr().String()
	cfg.Close()
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("secure port %s still held after Close: %v", addr, err)
	}
	again.Close()
}
