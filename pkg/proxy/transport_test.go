package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

func TestTransportsShareAndRebuild(t *testing.T) {
	ctx := context.Background()
	tr := NewTransports(TransportOptions{}, nil)
	builds := 0
	build := func() (*rest.Config, error) {
		builds++
		return &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "t"}, nil
	}
	key := TargetKey{SecretNamespace: "ns", SecretName: "s", SecretResourceVersion: "1"}
	first, err := tr.Get(ctx, "uid-1", key, build)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := tr.Get(ctx, "uid-1", key, build)
	shared, _ := tr.Get(ctx, "uid-2", key, build)
	if again != first || shared != first || builds != 1 {
		t.Errorf("same key built %d targets; mounts of one Secret must share one", builds)
	}
	if first.ConnectTimeout != 10*time.Second {
		t.Errorf("default connect timeout %v", first.ConnectTimeout)
	}

	rotated := key
	rotated.SecretResourceVersion = "2"
	second, _ := tr.Get(ctx, "uid-1", rotated, build)
	if second == first || builds != 2 || tr.Len() != 2 {
		t.Errorf("rotation: %d builds, %d targets", builds, tr.Len())
	}
	// uid-2 still uses the old target; once it moves too, the old one is closed and gone.
	tr.Get(ctx, "uid-2", rotated, build)
	if tr.Len() != 1 {
		t.Errorf("old target kept after its last user left: %d targets", tr.Len())
	}
	withTimeout := rotated
	withTimeout.ConnectTimeout = 3 * time.Second
	third, _ := tr.Get(ctx, "uid-2", withTimeout, build)
	if third.ConnectTimeout != 3*time.Second || builds != 3 {
		t.Errorf("connect timeout change: %v, %d builds", third.ConnectTimeout, builds)
	}
	tr.Forget("uid-1")
	tr.Forget("uid-2")
	if tr.Len() != 0 {
		t.Errorf("Forget left %d targets", tr.Len())
	}
}

// TestTransportsSlowFailingKeyDelaysNoOther: a key whose kubeconfig takes long to parse and
// fails (a 1 MB Secret, say) must neither delay the mounts of other keys nor be parsed again
// for every request and probe while its Secret is unchanged.
func TestTransportsSlowFailingKeyDelaysNoOther(t *testing.T) {
	ctx := context.Background()
	tr := NewTransports(TransportOptions{}, nil)
	const parse = 300 * time.Millisecond
	var badBuilds atomic.Int32
	slowFailing := func() (*rest.Config, error) {
		badBuilds.Add(1)
		time.Sleep(parse)
		return nil, fmt.Errorf("%w: it does not parse as a kubeconfig", ErrCredentials)
	}
	good := func() (*rest.Config, error) {
		return &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "t"}, nil
	}
	bad := TargetKey{SecretNamespace: "ns", SecretName: "bad", SecretResourceVersion: "1"}
	healthy := TargetKey{SecretNamespace: "ns", SecretName: "good", SecretResourceVersion: "1"}
	if _, err := tr.Get(ctx, "healthy", healthy, good); err != nil {
		t.Fatal(err)
	}

	// 30 mounts reference the bad Secret and are used (probed, proxied) over and over.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := types.UID(fmt.Sprintf("bad-%d", i))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := tr.Get(ctx, uid, bad, slowFailing); !errors.Is(err, ErrCredentials) {
					t.Errorf("bad key: %v", err)
					return
				}
				time.Sleep(time.Millisecond) // requests and probes arrive; they do not spin

			}
		}()
	}
	time.Sleep(50 * time.Millisecond) // the first bad build is under way

	var worst time.Duration
	for i := range 20 {
		start := time.Now()
		if _, err := tr.Get(ctx, "healthy", healthy, good); err != nil {
			t.Fatal(err)
		}
		// A mount of another, new key is built meanwhile too.
		fresh := TargetKey{SecretNamespace: "ns", SecretName: fmt.Sprintf("new-%d", i), SecretResourceVersion: "1"}
		if _, err := tr.Get(ctx, types.UID(fresh.SecretName), fresh, good); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
		time.Sleep(25 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("healthy Get, worst of 20 while 30 mounts hit a failing %v build: %v; failing builds: %d", parse, worst, badBuilds.Load())
	// Behind the lock it waited seconds (18 s once); free of it, milliseconds. The margin is
	// for a loaded machine.
	if worst > time.Second {
		t.Errorf("a healthy mount waited %v behind another key's build", worst)
	}
	if n := badBuilds.Load(); n != 1 {
		t.Errorf("the failing key was built %d times; once per resourceVersion is enough", n)
	}

	// The fixed Secret (a new resourceVersion) is built at once.
	fixed := bad
	fixed.SecretResourceVersion = "2"
	if _, err := tr.Get(ctx, "bad-0", fixed, good); err != nil {
		t.Errorf("fixed Secret: %v", err)
	}
}

// TestTransportsConcurrentBuildsShareOne: mounts of one new key that arrive together wait for
// one build and are all counted as its users.
func TestTransportsConcurrentBuildsShareOne(t *testing.T) {
	ctx := context.Background()
	tr := NewTransports(TransportOptions{}, nil)
	var builds atomic.Int32
	slow := func() (*rest.Config, error) {
		builds.Add(1)
		time.Sleep(50 * time.Millisecond)
		return &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "t"}, nil
	}
	key := TargetKey{SecretNamespace: "ns", SecretName: "s", SecretResourceVersion: "1"}
	targets := make([]*Target, 20)
	var wg sync.WaitGroup
	for i := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if targets[i], err = tr.Get(ctx, types.UID(fmt.Sprint(i)), key, slow); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, target := range targets {
		if target != targets[0] {
			t.Fatal("mounts of one key got different targets")
		}
	}
	if builds.Load() != 1 || targets[0].users != 20 {
		t.Errorf("%d builds, %d users; want 1 build, 20 users", builds.Load(), targets[0].users)
	}
	for i := range 19 {
		tr.Forget(types.UID(fmt.Sprint(i)))
	}
	if tr.Len() != 1 {
		t.Errorf("target closed while a mount still uses it")
	}
	tr.Forget("19")
	if tr.Len() != 0 {
		t.Errorf("target kept after its last user left")
	}

	// A waiter whose context ends stops waiting; the build goes on for the others.
	block := make(chan struct{})
	blocked := func() (*rest.Config, error) {
		<-block
		return &rest.Config{Host: "https://127.0.0.1:6443"}, nil
	}
	other := TargetKey{SecretNamespace: "ns", SecretName: "blocked", SecretResourceVersion: "1", ConnectTimeout: time.Second}
	built := make(chan error)
	go func() {
		_, err := tr.Get(ctx, "builder", other, blocked)
		built <- err
	}()
	for {
		tr.mu.Lock()
		_, inFlight := tr.building[other]
		tr.mu.Unlock()
		if inFlight {
			break
		}
		time.Sleep(time.Millisecond)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := tr.Get(waitCtx, "waiter", other, blocked); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiter with an ended context: %v", err)
	}
	close(block)
	if err := <-built; err != nil {
		t.Errorf("builder: %v", err)
	}
}

// TestTransportsFailuresBounded: remembered failures are bounded in number and expire with
// the idle expiry.
func TestTransportsFailuresBounded(t *testing.T) {
	ctx := context.Background()
	tr := NewTransports(TransportOptions{MaxFailures: 3, IdleExpiry: time.Minute}, nil)
	failing := func() (*rest.Config, error) { return nil, fmt.Errorf("%w: broken", ErrCredentials) }
	for i := range 10 {
		key := TargetKey{SecretNamespace: "ns", SecretName: "s", SecretResourceVersion: fmt.Sprint(i)}
		if _, err := tr.Get(ctx, "m", key, failing); !errors.Is(err, ErrCredentials) {
			t.Fatal(err)
		}
	}
	if n := tr.Failures(); n != 3 {
		t.Errorf("%d failures remembered, bound 3", n)
	}
	tr.expire(time.Now().Add(30 * time.Second))
	if n := tr.Failures(); n != 3 {
		t.Errorf("failures used 30 s ago expired: %d left", n)
	}
	tr.expire(time.Now().Add(2 * time.Minute))
	if n := tr.Failures(); n != 0 {
		t.Errorf("%d failures left after the idle expiry", n)
	}
}
