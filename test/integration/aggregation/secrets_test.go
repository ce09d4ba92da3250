package aggregation

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
)

// TestIdleSecretsAreNoLongerWatched reads a Secret of the real host through the proxy's Secret
// source: it is watched while read, its watch ends once it was not read for the idle timeout,
// and reading it again watches it again, changes included.
func TestIdleSecretsAreNoLongerWatched(t *testing.T) {
	setupProxy(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	setSecretData(t, "idle-kubeconfig", []byte("first"))
	secrets := proxy.NewWatchedSecrets(ctx, kube.Client, 2*time.Second)
	changed := make(chan string, 10)
	secrets.OnChange(func(_, name string) { changed <- name })

	read := func(want string) {
		t.Helper()
		s, err := secrets.GetSecret(ctx, secretsNamespace, "idle-kubeconfig")
		if err != nil {
			t.Fatal(err)
		}
		if got := string(s.Data["kubeconfig"]); got != want {
			t.Errorf("read %q, want %q", got, want)
		}
	}
	read("first")
	if n := secrets.Watched(); n != 1 {
		t.Fatalf("%d Secrets watched after a read, want 1", n)
	}
	// Reads keep it watched past the timeout.
	for range 3 {
		time.Sleep(time.Second)
		read("first")
	}
	if n := secrets.Watched(); n != 1 {
		t.Fatalf("%d Secrets watched while read every second, want 1", n)
	}
	eventually(t, "the idle Secret is no longer watched", func() error {
		if n := secrets.Watched(); n != 0 {
			return fmt.Errorf("%d Secrets watched", n)
		}
		return nil
	})

	read("first")
	for len(changed) > 0 {
		<-changed
	}
	setSecretData(t, "idle-kubeconfig", []byte("second"))
	select {
	case name := <-changed:
		if name != "idle-kubeconfig" {
			t.Errorf("change of %q, want idle-kubeconfig", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no change seen through the new watch")
	}
	read("second")
}
