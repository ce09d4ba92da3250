package status_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/controller/status"
	mountsv1alpha1 "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned/typed/mounts/v1alpha1"
	informers "github.com/kcp-dev/mount-apiserver/pkg/generated/informers/externalversions"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// secretMap is a SecretSource over Secrets held in memory: the controller is under test here,
// not how Secrets are read from a cluster (test/integration covers that).
type secretMap map[string]*corev1.Secret

func (s secretMap) GetSecret(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	if secret, ok := s[namespace+"/"+name]; ok {
		return secret, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), namespace+"/"+name)
}

func (s secretMap) add(name string, kubeconfig []byte) {
	s["targets/"+name] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "targets", Name: name, ResourceVersion: "1"},
		Data: map[string][]byte{v1alpha1.SecretKeyKubeconfig: kubeconfig}}
}

// startTarget starts a recording target (of ca; a new CA when nil), closed when the test ends,
// and adds a kubeconfig for it to s as name.
func (s secretMap) startTarget(t *testing.T, name string, ca *pki.CA) *framework.RecordingServer {
	t.Helper()
	target, err := framework.StartRecordingServer("127.0.0.1:0", ca)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	kubeconfig, err := target.Kubeconfig("t")
	if err != nil {
		t.Fatal(err)
	}
	s.add(name, kubeconfig)
	return target
}

// hungListener accepts TCP connections on 127.0.0.1 and never answers on them, like a target
// whose process hangs; it closes them all when the test ends. accepted counts them.
func hungListener(t *testing.T) (addr string, accepted func() int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}

func mountOf(name, secret string, connectSeconds int32) *v1alpha1.Mount {
	m := &v1alpha1.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.MountSpec{Type: v1alpha1.MountTypeURL, Ref: v1alpha1.ObjectReference{Namespace: "targets", Name: secret}},
	}
	if connectSeconds > 0 {
		m.Spec.Timeouts = &v1alpha1.MountTimeouts{ConnectSeconds: ptr.To(connectSeconds)}
	}
	return m
}

// TestHungTargetsDoNotStarveHealthyMounts: 24 mounts of targets that accept connections and
// never answer (with the longest connect timeout a mount may set), more than the controller
// has workers, do not keep a healthy mount from becoming Ready promptly.
func TestHungTargetsDoNotStarveHealthyMounts(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	server := framework.StartInProcess(t, "", func(o *options.Options) { o.StatusController = false })
	mountsClient := server.Client.MountsV1alpha1().Mounts()

	secrets := secretMap{}
	healthy := secrets.startTarget(t, "healthy", nil)
	hung, accepted := hungListener(t)
	const hungMounts = 24
	for i := range hungMounts {
		// One Secret each: no probe is shared, every hung mount costs its own probe.
		name := fmt.Sprintf("hung-%02d", i)
		data, err := framework.KubeconfigBytes(&rest.Config{Host: "https://" + hung, BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{CAData: healthy.CA.CertPEM}})
		if err != nil {
			t.Fatal(err)
		}
		secrets.add(name, data)
		if _, err := mountsClient.Create(ctx, mountOf(name, name, 300), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A tiny TTL: results reach the mounts that waited for them nonetheless. Probes end after
	// 2 s, although the hung mounts allow 300 s to connect.
	proxier := &proxy.Proxier{Secrets: secrets, Transports: proxy.NewTransports(proxy.TransportOptions{}, nil),
		Probes: &proxy.ProbeCache{TTL: time.Nanosecond, Timeout: 2 * time.Second}}
	runController(ctx, t, server, proxier, status.Options{BaseURL: server.URL, Interval: time.Minute, Workers: 16})

	// Once every worker has had a hung target to probe, a healthy mount comes.
	for deadline := time.Now().Add(20 * time.Second); accepted() < 16; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the hung targets got %d connections, want 16", accepted())
		}
	}
	start := time.Now()
	if _, err := mountsClient.Create(ctx, mountOf("ready", "healthy", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var ready time.Duration
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m, err := mountsClient.Get(ctx, "ready", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if m.Status.Phase == v1alpha1.MountPhaseReady {
			ready = time.Since(start)
			break
		}
	}
	if ready == 0 {
		t.Fatalf("with %d hung targets, the healthy mount was not Ready within 20 s", hungMounts)
	}
	t.Logf("with %d hung targets and 16 workers, the healthy mount was Ready %v after it was created", hungMounts, ready.Round(time.Millisecond))
	// Starved, it waits for hung probes (15 s each); healthy, 0.25–0.5 s. The margin is for
	// a loaded machine.
	if ready > 10*time.Second {
		t.Errorf("the healthy mount took %v to become Ready; hung targets starve the workers", ready)
	}

	// A healthy target slower than the controller's probe wait: the probe goes on without the
	// worker, and its result makes the mount Ready.
	slow := secrets.startTarget(t, "slow", healthy.CA)
	slow.Handler = func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(time.Second)
		_, _ = w.Write([]byte("ok"))
	}
	start = time.Now()
	if _, err := mountsClient.Create(ctx, mountOf("slow", "slow", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := waitFor(ctx, t, mountsClient, "slow", 20*time.Second, func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady })
	t.Logf("a target answering after 1 s: Ready %v after the mount was created", time.Since(start).Round(time.Millisecond))
	if got := len(slow.Requests()); got > 2 {
		t.Errorf("the slow target got %d probe requests for one mount", got)
	}

	// The hung mounts get their verdict once their probes time out.
	for i := range hungMounts {
		name := fmt.Sprintf("hung-%02d", i)
		m = waitFor(ctx, t, mountsClient, name, 20*time.Second, func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseConnecting })
		if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionTargetReachable); c == nil || c.Reason != status.ReasonProbeFailed || !strings.Contains(c.Message, "timed out") {
			t.Errorf("%s: TargetReachable %+v", name, c)
		}
	}
	t.Logf("all %d hung mounts Connecting (probe timed out) %v after the healthy mount was created", hungMounts, time.Since(start).Round(time.Millisecond))
}

// waitFor polls the mount until ok holds, failing the test after timeout.
// runController runs a status controller of prober over server's Mounts until ctx ends or the
// test does; the test waits for it to stop.
func runController(ctx context.Context, t *testing.T, server *framework.Server, prober status.Prober, opts status.Options) *status.Controller {
	t.Helper()
	factory := informers.NewSharedInformerFactory(server.Client, 0)
	ctrl, err := status.New(server.Client, factory.Mounts().V1alpha1().Mounts(), prober, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); ctrl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctrl
}

func waitFor(ctx context.Context, t *testing.T, client mountsv1alpha1.MountInterface, name string, timeout time.Duration, ok func(*v1alpha1.Mount) bool) *v1alpha1.Mount {
	t.Helper()
	var m *v1alpha1.Mount
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var err error
		if m, err = client.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if ok(m) {
			return m
		}
	}
	t.Fatalf("mount %s: not as expected after %v; status %+v", name, timeout, m.Status)
	return nil
}

// TestRunsAgainAfterLosingTheLease: a replica that stops leading and leads again (Run ends
// and runs again) keeps writing status, also of mounts created while it did not lead: the
// first run shuts its queue down, so the next one needs a queue of its own with every mount.
func TestRunsAgainAfterLosingTheLease(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	server := framework.StartInProcess(t, "", func(o *options.Options) { o.StatusController = false })
	mountsClient := server.Client.MountsV1alpha1().Mounts()
	secrets := secretMap{}
	secrets.startTarget(t, "target", nil)
	proxier := &proxy.Proxier{Secrets: secrets, Transports: proxy.NewTransports(proxy.TransportOptions{}, nil), Probes: &proxy.ProbeCache{}}
	factory := informers.NewSharedInformerFactory(server.Client, 0)
	ctrl, err := status.New(server.Client, factory.Mounts().V1alpha1().Mounts(), proxier, nil, status.Options{BaseURL: server.URL, Interval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	ready := func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady }

	// Leading.
	term1, stop1 := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); ctrl.Run(term1) }()
	if _, err := mountsClient.Create(ctx, mountOf("first", "target", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, mountsClient, "first", 20*time.Second, ready)
	stop1()
	<-done

	// Not leading: a mount comes, nobody writes its status.
	if _, err := mountsClient.Create(ctx, mountOf("second", "target", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Leading again.
	term2, stop2 := context.WithCancel(ctx)
	done = make(chan struct{})
	go func() { defer close(done); ctrl.Run(term2) }()
	defer func() { stop2(); <-done }()
	waitFor(ctx, t, mountsClient, "second", 20*time.Second, ready)
}

// grantable is a kcp.WorkspaceResolver whose one workspace is refused until granted, as kcp
// refuses the provider's read of a Workspace until RBAC in the parent allows it. A test double
// of our own interface: the resolver over kcp's API is tested against the kcp harness.
type grantable struct{ granted atomic.Bool }

func (g *grantable) ResolveWorkspace(_ context.Context, path string) (kcp.Workspace, error) {
	if !g.granted.Load() {
		return kcp.Workspace{}, apierrors.NewForbidden(schema.GroupResource{Group: "tenancy.kcp.io", Resource: "workspaces"}, "team", errors.New("access denied"))
	}
	return kcp.Workspace{Path: path, Cluster: "2x7kq3n1", URL: "https://kcp.example/clusters/2x7kq3n1", Ready: true}, nil
}

// TestWorkspaceMountFollowsAFixedCause: a Workspace mount that could not be resolved for a
// while is Ready within seconds of its cause being fixed (it once stayed WorkspaceUnresolved
// for more than 40 s: its lookups were spaced like probes of a dead target, up to 2 min).
func TestWorkspaceMountFollowsAFixedCause(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	server := framework.StartInProcess(t, "", func(o *options.Options) { o.StatusController = false })
	mountsClient := server.Client.MountsV1alpha1().Mounts()

	resolver := &grantable{}
	runController(ctx, t, server, &proxy.Proxier{}, status.Options{BaseURL: server.URL, Interval: time.Minute, Workspaces: resolver})

	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec: v1alpha1.MountSpec{Type: v1alpha1.MountTypeWorkspace, Ref: v1alpha1.ObjectReference{Kind: "Workspace", Name: "root:org:team"}}}
	if _, err := mountsClient.Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, mountsClient, "team", 20*time.Second, func(m *v1alpha1.Mount) bool {
		c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Reason == status.ReasonWorkspaceUnresolved
	})
	// Long enough for the targets' backoff (1 s doubling) to space looks 16 s apart.
	time.Sleep(20 * time.Second)

	resolver.granted.Store(true)
	start := time.Now()
	waitFor(ctx, t, mountsClient, "team", 30*time.Second, func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady })
	took := time.Since(start)
	t.Logf("after 20 s unresolved, the mount was Ready %v after its cause was fixed", took.Round(time.Millisecond))
	if took > 8*time.Second {
		t.Errorf("the mount took %v to follow a fixed cause; want seconds", took)
	}
}
