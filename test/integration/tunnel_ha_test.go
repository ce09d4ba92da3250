package integration

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/peers"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// hopAs dials replica's relay as cfg's user, as another replica would: the tenant's view of
// the hop between replicas.
func hopAs(ctx context.Context, t *testing.T, cfg *rest.Config, replica *framework.Process, key, address string) error {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(replica.CAData)
	hop, err := peers.NewHop(cfg, pool, "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := hop.Dial(ctx, peers.Peer{URL: replica.URL}, key, address)
	if err == nil {
		_ = conn.Close()
	}
	return err
}

// TestTunnelHARelay: the hop between replicas lets in only the replicas' own identity, proved
// by their host token (reviewed by the host). A tenant with a valid host identity (a client
// certificate: 401; a token of its own: 403), and an anonymous caller, are refused before any session
// is looked at; the replicas' own identity asking for an address other than the two an agent
// maps is refused too (it would end the agent's whole session); asking for a session nobody
// holds is 503. A Lease whose owner does not answer, or whose peer URL leads to a server
// the replicas' CA did not sign, gets 503 and never a hang or the hop's credentials.
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
	// A client certificate of the host is not what replicas prove themselves with: 401.
	if err := hopAs(ctx, t, tenant, r2, key, tunnel.AddressTarget); err == nil || !strings.Contains(err.Error(), "(401)") || errors.Is(err, tunnel.ErrNoSession) {
		t.Errorf("a tenant with a client certificate: got %v, want 401", err)
	}
	// A token the host reviews, of another ServiceAccount: 403.
	leakMust(t, leakErr(host.Client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{})))
	tr, err := host.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "tenant", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tenantToken := &rest.Config{Host: host.URL, BearerToken: tr.Status.Token}
	if err := hopAs(ctx, t, tenantToken, r2, key, tunnel.AddressTarget); err == nil || !strings.Contains(err.Error(), "(403)") || errors.Is(err, tunnel.ErrNoSession) {
		t.Errorf("a tenant with a ServiceAccount token: got %v, want 403", err)
	}
	anonymous := &rest.Config{Host: host.URL}
	if err := hopAs(ctx, t, anonymous, r2, key, tunnel.AddressTarget); err == nil || !(strings.Contains(err.Error(), "(403)") || strings.Contains(err.Error(), "(401)")) {
		t.Errorf("anonymous: got %v, want 401 or 403", err)
	}

	// A Lease naming an owner that does not answer (dead with its Lease left behind, or a
	// peer URL leading nowhere), then one whose peer URL leads to a server that the replicas'
	// CA did not sign: requests get 503, and the impostor never sees a request (the hop's
	// credentials go only where TLS verified the peer).
	kubeconfig, err := framework.KubeconfigBytes(host.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	leakMust(t, leakErr(host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{})))
	leakMust(t, leakErr(host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ghost"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{})))
	ghost, err := leakMountsClient(t, host.AdminConfig).MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "ghost"}, Spec: v1alpha1.MountSpec{
		Type:   v1alpha1.MountTypeURL,
		Ref:    v1alpha1.ObjectReference{Namespace: "clusters", Name: "ghost"},
		Tunnel: &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leakGrant(ctx, t, host.Client, "ghost-user", []rbacv1.PolicyRule{{
		APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"get"}, ResourceNames: []string{"ghost"},
	}}, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "ghost-user"})
	caller, err := host.UserConfig("ghost-user")
	if err != nil {
		t.Fatal(err)
	}
	caller.Host, caller.CAData = r2.URL, r2.CAData
	adminR2 := rest.CopyConfig(host.AdminConfig)
	adminR2.Host, adminR2.CAData = r2.URL, r2.CAData

	blackHole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blackHole.Close() })
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := blackHole.Accept()
			if err != nil {
				return
			}
			held <- c // accepted, never answered
		}
	}()
	t.Cleanup(func() {
		for {
			select {
			case c := <-held:
				_ = c.Close()
			default:
				return
			}
		}
	})
	var impostorRequests atomic.Int32
	impostor := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		impostorRequests.Add(1)
		w.WriteHeader(http.StatusSwitchingProtocols)
	}))
	t.Cleanup(impostor.Close)

	ghostKey := tunnel.SessionKey(clusters.DefaultCluster, ghost.UID)
	leases := host.Client.CoordinationV1().Leases(framework.Namespace)
	for i, peerURL := range []string{"https://" + blackHole.Addr().String(), impostor.URL} {
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: peers.LeaseName(ghostKey), Namespace: framework.Namespace,
				Labels:      map[string]string{peers.LabelSession: "true"},
				Annotations: map[string]string{peers.AnnotationPeerURL: peerURL, peers.AnnotationSessionKey: ghostKey, peers.AnnotationSessionID: "ghost"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost-replica"), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))},
		}
		if i == 0 {
			leakMust(t, leakErr(leases.Create(ctx, lease, metav1.CreateOptions{})))
		} else {
			current, err := leases.Get(ctx, lease.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lease.ResourceVersion = current.ResourceVersion
			leakMust(t, leakErr(leases.Update(ctx, lease, metav1.UpdateOptions{})))
		}
		// Until replica 2 has seen the Lease, it finds no owner: 503 as well.
		want := float64(i + 1)
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			code, body := haProxyGet(t, caller, "ghost", "/version")
			if code != http.StatusServiceUnavailable {
				t.Errorf("owner at %s: %d %s, want 503", peerURL, code, body)
			}
			return metricValue(t, adminR2, `mount_tunnel_peer_hops_total{result="unreachable"}`) >= want, nil
		}); err != nil {
			t.Fatalf("replica 2 never tried the owner at %s: %v", peerURL, err)
		}
	}
	if n := impostorRequests.Load(); n != 0 {
		t.Errorf("the impostor peer got %d requests", n)
	}
}

// haProxyGet GETs path through mount name's proxy at cfg.Host.
func haProxyGet(t *testing.T, cfg *rest.Config, name, path string) (int, string) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client.Timeout = 30 * time.Second
	resp, err := client.Get(cfg.Host + "/apis/mounts.kcp.io/v1alpha1/mounts/" + name + "/proxy" + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body)
}

// tunnelHA is two replicas of one aggregated server with a tunnel mount whose agent is
// attached to replica 1 (see TestTunnelHA).
type tunnelHA struct {
	ctx         context.Context
	host        *framework.KubeAPIServer
	target      *framework.KubeAPIServer
	r1, r2      *framework.Process
	admin       clientset.Interface
	leases      coordinationv1client.LeaseInterface
	leaseName   string
	user        *rest.Config
	stopAgent   func()
	agentDone   chan struct{}
	waitHolder  func(prefix, peerURL string) time.Time
	connectedTo func(replica string) func(*v1alpha1.Mount) bool
}

// startTunnelHA starts a tunnelHA and waits until replica 1 holds the agent's session.
func startTunnelHA(t *testing.T) *tunnelHA {
	start := time.Now()
	ctx := klog.NewContext(context.Background(), klog.Background())
	host, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	target, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Stop)
	// The replicas verify each other by the Service name their shared certificate covers, as
	// replicas of a Deployment dialing pod IPs would.
	replicas := framework.StartReplicas(ctx, t, host, framework.BuildBinary(t), 2, "--tunnel-peer-server-name="+options.DefaultServingCertHosts[0])
	r1, r2 := replicas.Procs[0], replicas.Procs[1]
	t.Logf("set-up ready after %v", time.Since(start).Round(time.Millisecond))

	// A tunnel mount with Server credentials: the hub holds the target's kubeconfig.
	kubeconfig, err := framework.KubeconfigBytes(target.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	leakMust(t, leakErr(host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{})))
	leakMust(t, leakErr(host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{})))
	admin := leakMountsClient(t, host.AdminConfig)
	mount, err := admin.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1alpha1.MountSpec{
		Type:   v1alpha1.MountTypeURL,
		Ref:    v1alpha1.ObjectReference{Namespace: "clusters", Name: "edge"},
		Tunnel: &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leakGrant(ctx, t, host.Client, "edge-agent", []rbacv1.PolicyRule{{
		APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/attach"}, Verbs: []string{"get", "create"}, ResourceNames: []string{"edge"},
	}}, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "edge-agent"})

	// The agent's way to the hub: the first live replica.
	hub, err := framework.StartForwarder()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	hub.SetFailover(true)
	hub.SetBackends(strings.TrimPrefix(r1.URL, "https://"), strings.TrimPrefix(r2.URL, "https://"))
	agentHub, err := host.UserConfig("edge-agent")
	if err != nil {
		t.Fatal(err)
	}
	agentHub.Host, agentHub.CAData = "https://"+hub.Addr(), r1.CAData
	attachURL, err := agent.AttachURL(agentHub.Host, "", "edge")
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(&agent.Config{Hub: agentHub, AttachURL: attachURL, Mount: "edge", Target: strings.TrimPrefix(target.URL, "https://"), MaxBackoff: agent.DefaultMaxBackoff})
	if err != nil {
		t.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		_ = ag.Run(agentCtx)
	}()
	t.Cleanup(func() { stopAgent(); <-agentDone })

	leases := host.Client.CoordinationV1().Leases(framework.Namespace)
	leaseName := peers.LeaseName(tunnel.SessionKey(clusters.DefaultCluster, mount.UID))
	waitHolder := func(prefix, peerURL string) time.Time {
		t.Helper()
		var last string
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			lease, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			holder := ptr.Deref(lease.Spec.HolderIdentity, "")
			last = holder + " at " + lease.Annotations[peers.AnnotationPeerURL]
			return strings.HasPrefix(holder, prefix) && lease.Annotations[peers.AnnotationPeerURL] == peerURL, nil
		}); err != nil {
			t.Fatalf("Lease %s/%s: want holder %s* at %s, last %s", framework.Namespace, leaseName, prefix, peerURL, last)
		}
		return time.Now()
	}
	attached := waitHolder("replica-1_", r1.URL)
	connectedTo := func(replica string) func(*v1alpha1.Mount) bool {
		return func(m *v1alpha1.Mount) bool {
			c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionAgentConnected)
			return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, `"`+replica+`"`)
		}
	}
	leakWaitMount(ctx, t, admin, "edge", connectedTo("replica-1"))
	t.Logf("AgentConnected names replica 1 %v after its Lease did", time.Since(attached).Round(time.Millisecond))

	// A caller of the mount (the mount impersonates its callers on the target).
	leakGrant(ctx, t, host.Client, "edge-user", []rbacv1.PolicyRule{{
		APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/proxy"}, Verbs: []string{"get"}, ResourceNames: []string{"edge"},
	}}, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "edge-user"})
	user, err := host.UserConfig("edge-user")
	if err != nil {
		t.Fatal(err)
	}
	return &tunnelHA{ctx: ctx, host: host, target: target, r1: r1, r2: r2, admin: admin, leases: leases, leaseName: leaseName,
		user: user, stopAgent: stopAgent, agentDone: agentDone, waitHolder: waitHolder, connectedTo: connectedTo}
}

// direct is cfg's user at replica p.
func direct(cfg *rest.Config, p *framework.Process) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Host, out.CAData = p.URL, p.CAData
	return out
}

// TestTunnelHA runs two replicas of one aggregated server (one external etcd, one serving
// CA, a forwarder standing in for the Service the host's aggregator dials) and a real target
// kube-apiserver on loopback reached only through an agent. The agent reaches the hub through
// a forwarder that sends it to the first live replica: replica 1. Then:
//   - replica 1 records that it holds the session (a Lease naming it and its peer URL);
//   - requests through replica 2, which holds no session, reach the target through the hop to
//     replica 1; so do requests through the host's aggregator, whichever replica it picks;
//   - replica 1 is killed (SIGKILL, its Lease left behind): requests get only 503 (never a
//     hang into the dead owner), the agent reconnects to replica 2, which takes the Lease
//     over, and requests work again; the test reports how long that took;
//   - a watch through replica 2 relayed to replica 1 ends when replica 1 dies (at most an
//     ERROR event with a Status), and a RetryWatcher through replica 2 resumes after the
//     failover;
//   - the agent stops: replica 2 releases the Lease.
func TestTunnelHA(t *testing.T) {
	ha := startTunnelHA(t)
	ctx, host, target, r1, r2, admin := ha.ctx, ha.host, ha.target, ha.r1, ha.r2, ha.admin
	leases, leaseName, user, stopAgent, agentDone := ha.leases, ha.leaseName, ha.user, ha.stopAgent, ha.agentDone
	waitHolder, connectedTo := ha.waitHolder, ha.connectedTo
	direct := func(p *framework.Process) *rest.Config {
		cfg := rest.CopyConfig(user)
		cfg.Host, cfg.CAData = p.URL, p.CAData
		return cfg
	}
	adminOf := func(p *framework.Process) *rest.Config {
		cfg := rest.CopyConfig(host.AdminConfig)
		cfg.Host, cfg.CAData = p.URL, p.CAData
		return cfg
	}
	get := func(cfg *rest.Config) (int, string) {
		t.Helper()
		return haProxyGet(t, cfg, "edge", "/version")
	}
	mustServe := func(what string, cfg *rest.Config) {
		t.Helper()
		code, body := get(cfg)
		if code != http.StatusOK || !strings.Contains(body, `"gitVersion"`) {
			t.Fatalf("%s: %d %s", what, code, body)
		}
	}
	mustServe("replica 1 (holds the session)", direct(r1))
	for i := range 5 {
		mustServe(fmt.Sprintf("replica 2 (hop to replica 1), request %d", i), direct(r2))
	}
	for i := range 4 {
		mustServe(fmt.Sprintf("the host's aggregator, request %d", i), user)
	}
	// A hop is a connection: the proxy's transport keeps it for the requests that follow.
	hops := metricValue(t, adminOf(r2), `mount_tunnel_peer_hops_total{result="ok"}`)
	relays := metricValue(t, adminOf(r1), `mount_tunnel_peer_relays_total{result="ok"}`)
	if hops < 1 || relays < hops {
		t.Errorf("replica 2 counted %v hops, replica 1 %v relays; want at least one, and a relay for each hop", hops, relays)
	}

	// What the hop costs: small GETs through the replica that holds the session and through
	// the other one, each over one kept connection (figures only).
	latencies := func(cfg *rest.Config) (p50, p99 time.Duration) {
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		const n = 300
		d := make([]time.Duration, 0, n)
		for range n {
			begin := time.Now()
			resp, err := client.Get(cfg.Host + "/apis/mounts.kcp.io/v1alpha1/mounts/edge/proxy/version")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /version: %d", resp.StatusCode)
			}
			d = append(d, time.Since(begin))
		}
		slices.Sort(d)
		return d[n/2], d[n*99/100]
	}
	local50, local99 := latencies(direct(r1))
	hop50, hop99 := latencies(direct(r2))
	t.Logf("GET /version through the mount, 300 each: on the owner p50 %v p99 %v; through the other replica (hop) p50 %v p99 %v (p50 %.2fx)",
		local50.Round(time.Microsecond), local99.Round(time.Microsecond), hop50.Round(time.Microsecond), hop99.Round(time.Microsecond), float64(hop50)/float64(local50))

	// Long-running requests through replica 2, relayed to replica 1 which holds the session:
	// a watch, and a RetryWatcher from the same resourceVersion.
	// The mount impersonates edge-user on the target, who may watch ConfigMaps there.
	leakGrant(ctx, t, target.Client, "edge-user-configmaps", []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"},
	}}, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "edge-user"})
	watched := direct(r2)
	watched.Host += "/apis/mounts.kcp.io/v1alpha1/mounts/edge/proxy"
	remote, err := kubernetes.NewForConfig(watched)
	if err != nil {
		t.Fatal(err)
	}
	configMaps := remote.CoreV1().ConfigMaps("default")
	list, err := configMaps.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := configMaps.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	retryCtx, stopRetry := context.WithCancel(ctx)
	defer stopRetry()
	retrying, err := watchtools.NewRetryWatcherWithContext(retryCtx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return configMaps.Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer retrying.Stop()
	leakMust(t, leakErr(target.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-failover"}}, metav1.CreateOptions{})))
	for _, w := range []watch.Interface{plain, retrying} {
		if ev := nextEvent(t, w); ev.Type != watch.Added || cmName(ev.Object) != "before-failover" {
			t.Fatalf("first event through the hop: %s %s", ev.Type, cmName(ev.Object))
		}
	}
	plainEnded := make(chan []watch.Event, 1)
	go func() {
		var events []watch.Event
		for ev := range plain.ResultChan() {
			events = append(events, ev)
		}
		plainEnded <- events
	}()

	// Replica 1 dies holding the session and the Lease.
	killed := time.Now()
	if err := r1.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r1.Exited()
	codes := map[int]int{}
	var firstOK time.Time
	var slowest time.Duration
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		begin := time.Now()
		code, body := get(direct(r2))
		slowest = max(slowest, time.Since(begin))
		codes[code]++
		switch code {
		case http.StatusOK:
			firstOK = time.Now()
			return true, nil
		case http.StatusServiceUnavailable:
			if !strings.Contains(body, "edge") {
				t.Errorf("a 503 that does not name the mount: %s", body)
			}
			return false, nil
		default:
			t.Errorf("while the agent moves: %d %s", code, body)
			return false, nil
		}
	}); err != nil {
		t.Fatalf("requests through replica 2 never worked again: %v (codes %v)", err, codes)
	}
	tookOver := waitHolder("replica-2_", r2.URL)
	leakWaitMount(ctx, t, admin, "edge", connectedTo("replica-2"))
	t.Logf("AgentConnected names replica 2 %v after replica 1 was killed", time.Since(killed).Round(time.Millisecond))
	mustServe("the host's aggregator after the failover", user)
	t.Logf("replica 1 killed: requests through replica 2 work again after %v (answers meanwhile %v, slowest %v); replica 2 holds the Lease after %v",
		firstOK.Sub(killed).Round(time.Millisecond), codes, slowest.Round(time.Millisecond), tookOver.Sub(killed).Round(time.Millisecond))

	// The watch relayed to replica 1 ended; the RetryWatcher resumed through the new owner.
	select {
	case events := <-plainEnded:
		for _, ev := range events {
			status, ok := ev.Object.(*metav1.Status)
			if ev.Type != watch.Error || !ok {
				t.Errorf("the relayed watch ended with %s %T, want nothing or an ERROR event with a Status", ev.Type, ev.Object)
				continue
			}
			t.Logf("the relayed watch ended with an ERROR event: %d %s", status.Code, status.Message)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the watch relayed to the killed replica did not end")
	}
	leakMust(t, leakErr(target.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-failover"}}, metav1.CreateOptions{})))
	if ev := nextEvent(t, retrying); ev.Type != watch.Added || cmName(ev.Object) != "after-failover" {
		t.Fatalf("the RetryWatcher after the failover: %s %s, want ADDED after-failover", ev.Type, cmName(ev.Object))
	}

	// The session ends: its owner releases the Lease.
	stopAgent()
	<-agentDone
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("the Lease outlived the session: %v", err)
	}
	if code, body := get(direct(r2)); code != http.StatusServiceUnavailable {
		t.Errorf("no agent anywhere: %d %s, want 503", code, body)
	}
}

// metricValue reads one sample of the server's /metrics (0 if absent).
func metricValue(t *testing.T, cfg *rest.Config, series string) float64 {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(cfg.Host + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}
