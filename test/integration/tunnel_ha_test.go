package integration

import (
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/peers"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// hopAs dials replica's relay as cfg's user, as another replica would: the tenant's view of
// the hop between replicas.
func hopAs(ctx context.Context, t *testing.T, cfg *rest.Config, replica *framework.Process, key, address string) error {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(replica.CAData)
	hop, err := peers.NewHop(cfg, pool, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := hop.Dial(ctx, peers.Peer{URL: replica.URL}, key, address)
	if err == nil {
		_ = conn.Close()
	}
	return err
}

// TestTunnelHARelay: the hop between replicas lets in only the replicas' own identity. A
// tenant with a valid host identity, and an anonymous caller, are refused before any session
// is looked at; the replicas' own identity asking for an address other than the two an agent
// maps is refused too (it would end the agent's whole session); asking for a session nobody
// holds is 503.
func TestTunnelHARelay(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	host, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	replicas := framework.StartReplicas(ctx, t, host, framework.BuildBinary(t), 2)
	r2 := replicas.Procs[1]
	self, err := clientcmd.BuildConfigFromFlags("", replicas.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := host.UserConfig("tenant", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	key := tunnel.SessionKey("_default", "no-such-uid")

	// The replica learns its identity after it started serving.
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = hopAs(ctx, t, self, r2, key, tunnel.AddressTarget)
		return last != nil && strings.Contains(last.Error(), "has none"), nil
	}); err != nil {
		t.Fatalf("the replicas' own identity asking for a session nobody holds: %v", last)
	}
	if !errors.Is(last, tunnel.ErrNoSession) {
		t.Errorf("no session: %v does not wrap ErrNoSession", last)
	}
	if err := hopAs(ctx, t, self, r2, key, "127.0.0.1:22"); err == nil || !strings.Contains(err.Error(), "(400)") {
		t.Errorf("an address an agent does not map: got %v, want 400", err)
	}
	if err := hopAs(ctx, t, tenant, r2, key, tunnel.AddressTarget); err == nil || !strings.Contains(err.Error(), "(403)") || errors.Is(err, tunnel.ErrNoSession) {
		t.Errorf("a tenant: got %v, want 403", err)
	}
	anonymous := &rest.Config{Host: host.URL}
	if err := hopAs(ctx, t, anonymous, r2, key, tunnel.AddressTarget); err == nil || !(strings.Contains(err.Error(), "(403)") || strings.Contains(err.Error(), "(401)")) {
		t.Errorf("anonymous: got %v, want 401 or 403", err)
	}
}
