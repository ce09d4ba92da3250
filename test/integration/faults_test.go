package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// writeLoad creates Mounts from workers goroutines until stopped, each create bounded by its
// own timeout, and remembers which ones the server acknowledged.
type writeLoad struct {
	mu     sync.Mutex
	acked  []string
	failed int
	errs   map[string]int // first line of each distinct error, counted

	stop func()
	done sync.WaitGroup
}

func startWriteLoad(client clientset.Interface, prefix string, workers int) *writeLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &writeLoad{errs: map[string]int{}, stop: cancel}
	for w := range workers {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("%s-%d-%05d", prefix, w, i)
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := client.MountsV1alpha1().Mounts().Create(rctx, urlMount(name), metav1.CreateOptions{})
				cancel()
				l.mu.Lock()
				if err == nil {
					l.acked = append(l.acked, name)
				} else if ctx.Err() == nil {
					l.failed++
					l.errs[strings.SplitN(err.Error(), "\n", 2)[0]]++
				}
				l.mu.Unlock()
				if err != nil {
					// A server without etcd answers at once; do not spin.
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

// ackedCount is how many creates were acknowledged so far.
func (l *writeLoad) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitAcked waits until n more creates than now are acknowledged.
func (l *writeLoad) waitAcked(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	want := l.ackedCount() + n
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return l.ackedCount() >= want, nil
	}); err != nil {
		t.Fatalf("%d acknowledged creates, want %d within %v", l.ackedCount(), want, timeout)
	}
}

// finish stops the load and returns the acknowledged names.
func (l *writeLoad) finish() []string {
	l.stop()
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}

// readyz returns the status code and body of /readyz?verbose.
func readyz(ctx context.Context, client *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz?verbose", nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestEtcdKilledUnderWriteLoad SIGKILLs the server's external etcd (the real etcd binary, its
// own process) while Mounts are being created, and starts it again on the same data and port:
// /readyz names etcd while it is down, the server comes back by itself, and every create it
// acknowledged, before, during or after the outage, is there.
func TestEtcdKilledUnderWriteLoad(t *testing.T) {
	ctx := context.Background()
	etcd := framework.StartEtcdProcess(t, t.TempDir())
	p := framework.BuildBinary(t).Start(t, t.TempDir(), "--etcd-servers="+etcd.ClientURL, "--status-controller=false")
	httpClient, err := rest.HTTPClientFor(p.Config)
	if err != nil {
		t.Fatal(err)
	}

	load := startWriteLoad(p.Client, "m", 8)
	defer load.finish()
	load.waitAcked(t, 100, 30*time.Second)

	etcd.Kill()
	killed := time.Now()
	ackedAtKill := load.ackedCount()
	var body string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		code, b, err := readyz(ctx, httpClient, p.URL)
		body = b
		return err == nil && code != http.StatusOK, nil
	}); err != nil {
		t.Fatalf("/readyz still passes with etcd killed: %s", body)
	}
	notReady := time.Since(killed)
	if !strings.Contains(body, "[-]etcd") {
		t.Errorf("/readyz fails without naming etcd:\n%s", body)
	}
	t.Logf("/readyz failed %v after etcd was killed:\n%s", notReady.Round(time.Millisecond), grepLines(body, "[-]"))

	// Down a while longer, as a real outage is, under the same load.
	time.Sleep(2 * time.Second)
	ackedDuringOutage := load.ackedCount() - ackedAtKill

	restarted := time.Now()
	if err := etcd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		code, b, err := readyz(ctx, httpClient, p.URL)
		body = b
		return err == nil && code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("/readyz did not pass again within a minute of etcd's restart:\n%s", body)
	}
	ready := time.Since(restarted)
	beforeWrites := load.ackedCount()
	load.waitAcked(t, 100, 60*time.Second)
	t.Logf("etcd down %v; /readyz passed %v after etcd's restart; %d creates acknowledged while down (in flight at the kill), %d after",
		restarted.Sub(killed).Round(time.Millisecond), ready.Round(time.Millisecond), ackedDuringOutage, load.ackedCount()-beforeWrites)

	acked := load.finish()
	load.mu.Lock()
	t.Logf("%d creates acknowledged, %d refused; errors: %v", len(acked), load.failed, load.errs)
	load.mu.Unlock()
	if load.failed == 0 {
		t.Error("no create failed while etcd was down: was it?")
	}
	list, err := p.Client.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for _, m := range list.Items {
		stored[m.Name] = true
	}
	var lost []string
	for _, name := range acked {
		if !stored[name] {
			lost = append(lost, name)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d acknowledged Mounts lost: %v", len(lost), len(acked), lost)
	}
	// The stored ones beyond those acknowledged were written but answered too late (or after the
	// load stopped): a create that fails is not known to be lost.
	t.Logf("%d Mounts stored, %d acknowledged", len(stored), len(acked))
}

// grepLines returns the lines of s that contain substr.
func grepLines(s, substr string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestSIGKILLDuringConcurrentWrites SIGKILLs the binary (embedded etcd in the same process)
// while 100 clients create Mounts, and starts it again on the same root directory: every
// create it acknowledged is there, every stored Mount reads back whole (the spec that was
// sent), and the server takes writes again.
func TestSIGKILLDuringConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	bin := framework.BuildBinary(t)
	root := t.TempDir()
	first := bin.Start(t, root, "--status-controller=false")

	load := startWriteLoad(first.Client, "k", 100)
	defer load.finish()
	load.waitAcked(t, 300, time.Minute)
	if err := first.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.Exited()
	acked := load.finish()
	load.mu.Lock()
	t.Logf("SIGKILL after %d acknowledged creates; %d cut off by the kill or refused after it", len(acked), load.failed)
	load.mu.Unlock()

	started := time.Now()
	second := bin.Start(t, root, "--status-controller=false")
	t.Logf("ready again %v after the restart", time.Since(started).Round(time.Millisecond))
	list, err := second.Client.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing after the restart: %v", err)
	}
	stored := map[string]bool{}
	for _, m := range list.Items {
		stored[m.Name] = true
		// The reference as sent, defaults (kind, version) filled in.
		if want := urlMount(m.Name).Spec.Ref; m.Spec.Ref.Namespace != want.Namespace || m.Spec.Ref.Name != want.Name || m.Spec.Ref.Kind != "Secret" || m.UID == "" || m.CreationTimestamp.IsZero() {
			t.Errorf("mount %s stored incomplete: ref %+v (want %s/%s), uid %q, created %v", m.Name, m.Spec.Ref, want.Namespace, want.Name, m.UID, m.CreationTimestamp)
		}
	}
	var lost []string
	for _, name := range acked {
		if !stored[name] {
			lost = append(lost, name)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d acknowledged Mounts lost: %v", len(lost), len(acked), lost)
	}
	t.Logf("%d Mounts stored, %d acknowledged", len(stored), len(acked))
	if _, err := second.Client.MountsV1alpha1().Mounts().Create(ctx, urlMount("after-restart"), metav1.CreateOptions{}); err != nil {
		t.Errorf("create after the restart: %v", err)
	}
}

// TestFlappingTarget: a mount's target goes down (its /readyz answers 503) and up again,
// first slowly enough for the status controller to see each state, then every 300 ms. The
// status follows each slow transition with at most a few writes, and the fast flapping costs
// writes bounded by the probe interval, not by the flaps: no storm. Writes are counted as the
// watch's MODIFIED events of the Mount (a write that changes nothing is no event, and no write
// to etcd either).
func TestFlappingTarget(t *testing.T) {
	ctx := context.Background()
	const interval = time.Second
	s := framework.StartInProcess(t, "", func(o *options.Options) { o.StatusProbeInterval = interval })
	var down atomic.Bool
	target, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	target.Handler = func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			http.Error(w, "flapping", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}
	kc, err := target.Kubeconfig("t")
	if err != nil {
		t.Fatal(err)
	}
	core, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "flap-kubeconfig"}, Data: map[string][]byte{"kubeconfig": kc}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mounts := s.Client.MountsV1alpha1().Mounts()
	created, err := mounts.Create(ctx, urlMount("flap"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := mounts.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=flap", ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	var writes int
	var phase v1alpha1.MountPhase
	go func() {
		for ev := range w.ResultChan() {
			if m, ok := ev.Object.(*v1alpha1.Mount); ok && ev.Type == watch.Modified {
				mu.Lock()
				writes++
				phase = m.Status.Phase
				mu.Unlock()
			}
		}
	}()
	count := func() (int, v1alpha1.MountPhase) {
		mu.Lock()
		defer mu.Unlock()
		return writes, phase
	}
	follow := func(ready bool) time.Duration {
		t.Helper()
		start := time.Now()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			_, p := count()
			return (p == v1alpha1.MountPhaseReady) == ready && p != "", nil
		}); err != nil {
			_, p := count()
			t.Fatalf("status did not follow the target (ready %v) within a minute: phase %q", ready, p)
		}
		return time.Since(start)
	}
	follow(true)

	// Slow flaps: each state holds until the status shows it, and two probe intervals more.
	const transitions = 4
	for i := range transitions {
		down.Store(i%2 == 0)
		before, _ := count()
		took := follow(!down.Load())
		time.Sleep(2 * interval)
		after, p := count()
		t.Logf("transition %d (down %v): status %s after %v, %d writes", i+1, down.Load(), p, took.Round(time.Millisecond), after-before)
		if after-before > 3 {
			t.Errorf("transition %d: %d status writes, want at most 3", i+1, after-before)
		}
	}

	// Fast flaps: far more changes than probes.
	const flapFor = 6 * time.Second
	before, _ := count()
	flaps := 0
	for start := time.Now(); time.Since(start) < flapFor; flaps++ {
		down.Store(!down.Load())
		time.Sleep(300 * time.Millisecond)
	}
	down.Store(false)
	settle := follow(true)
	time.Sleep(3 * interval)
	after, _ := count()
	elapsed := flapFor + settle + 3*interval
	// At most a change of phase per probe, and one for settling.
	bound := int(elapsed/interval) + 2
	t.Logf("%d flaps in %v: %d status writes (bound %d), Ready again %v after", flaps, flapFor, after-before, bound, settle.Round(time.Millisecond))
	if after-before > bound {
		t.Errorf("%d status writes while the target flapped %d times in %v, want at most %d", after-before, flaps, flapFor, bound)
	}
}
