package proxy

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// secretMap is a SecretSource over Secrets held in memory: the tests here are about what the
// proxy does with a Secret, not about how it is read from a cluster.
type secretMap map[string]*corev1.Secret

func (s secretMap) GetSecret(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	if secret, ok := s[namespace+"/"+name]; ok {
		return secret, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), namespace+"/"+name)
}

// add stores a Secret whose kubeconfig points at server, trusting the PEM CA.
func (s secretMap) add(t *testing.T, name, server string, caPEM []byte) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "probe-token"}
	kc.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "ctx"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	s["ns/"+name] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "1"},
		Data: map[string][]byte{"kubeconfig": data}}
}

func testMount(name, secret string) *mounts.Mount {
	return &mounts.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec:       mounts.MountSpec{Type: mounts.MountTypeURL, Ref: mounts.ObjectReference{Namespace: "ns", Name: secret}},
	}
}

// startTarget starts a TLS server on 127.0.0.1 that answers /readyz with 200 after delay and
// counts the requests it gets.
func startTarget(t *testing.T, delay time.Duration) (srv *httptest.Server, caPEM []byte, readyz *atomic.Int32) {
	t.Helper()
	readyz = &atomic.Int32{}
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			readyz.Add(1)
		}
		time.Sleep(delay)
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), readyz
}

// TestProbesOfOneTargetShareOneRequest: mounts of one target probed at the same time cost the
// target one probe, not one each.
func TestProbesOfOneTargetShareOneRequest(t *testing.T) {
	srv, ca, readyz := startTarget(t, 200*time.Millisecond)
	secrets := secretMap{}
	secrets.add(t, "shared", srv.URL, ca)
	p := &Proxier{Secrets: secrets, Transports: NewTransports(TransportOptions{}, nil), Probes: &ProbeCache{TTL: time.Minute}}

	const n = 20
	var wg sync.WaitGroup
	results := make([]ProbeResult, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = p.Probe(context.Background(), testMount(fmt.Sprintf("m%d", i), "shared"))
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.CredentialsErr != nil || r.ReachErr != nil || r.Path != "/readyz" {
			t.Errorf("probe %d: %+v", i, r)
		}
	}
	t.Logf("%d concurrent probes of one target: %d /readyz requests at the target", n, readyz.Load())
	if got := readyz.Load(); got != 1 {
		t.Errorf("%d concurrent probes of one target sent %d requests; want 1", n, got)
	}
}

// TestProbeWithinPendingResultOutlivesTTL: a probe slower than the caller's wait goes on
// without it; the caller, told to wait, finds the result afterwards even with a tiny TTL,
// and without probing the target again.
func TestProbeWithinPendingResultOutlivesTTL(t *testing.T) {
	srv, ca, readyz := startTarget(t, 2*time.Second)
	secrets := secretMap{}
	secrets.add(t, "slow", srv.URL, ca)
	p := &Proxier{Secrets: secrets, Transports: NewTransports(TransportOptions{}, nil), Probes: &ProbeCache{TTL: time.Nanosecond}}
	m := testMount("m", "slow")
	ctx := context.Background()

	start := time.Now()
	r, pending := p.ProbeWithin(ctx, m, 20*time.Millisecond)
	if pending == nil {
		t.Fatalf("a 2 s probe returned within a 20 ms wait: %+v", r)
	}
	// Far below the probe's 2 s, far above scheduling noise on a loaded machine.
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("the caller was held %v for a 20 ms wait", waited)
	}
	<-pending
	time.Sleep(10 * time.Millisecond) // far beyond the TTL
	r, pending = p.ProbeWithin(ctx, m, 0)
	if pending != nil || r.ReachErr != nil || r.Path != "/readyz" {
		t.Fatalf("after the probe finished: %+v, pending %v", r, pending != nil)
	}
	if got := readyz.Load(); got != 1 {
		t.Errorf("%d probe requests, want 1", got)
	}
	// Read once; the next probe of the mount, past the TTL, asks the target again.
	if r = p.Probe(ctx, m); r.ReachErr != nil || readyz.Load() != 2 {
		t.Errorf("next probe: %+v, %d requests", r, readyz.Load())
	}
}

// TestProbeBoundedDespiteLongConnectTimeout: a target that accepts and never answers costs a
// probe the probe timeout, not the 300 s the mount allows for connecting.
func TestProbeBoundedDespiteLongConnectTimeout(t *testing.T) {
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
	defer func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	_, ca, _ := startTarget(t, 0)
	secrets := secretMap{}
	secrets.add(t, "hung", "https://"+l.Addr().String(), ca)
	p := &Proxier{Secrets: secrets, Transports: NewTransports(TransportOptions{}, nil), Probes: &ProbeCache{Timeout: 300 * time.Millisecond}}
	m := testMount("m", "hung")
	m.Spec.Timeouts = &mounts.MountTimeouts{ConnectSeconds: ptr.To[int32](300)}

	start := time.Now()
	r := p.Probe(context.Background(), m)
	elapsed := time.Since(start)
	if r.ReachErr == nil || !strings.Contains(r.ReachErr.Error(), "timed out") {
		t.Errorf("probe of a hung target: %+v", r)
	}
	if elapsed > 10*time.Second {
		t.Errorf("the probe took %v; bound 300 ms (unbounded, it would take the mount's 300 s)", elapsed)
	}
	t.Logf("probe of a hung target with connectSeconds 300: %v: %v", elapsed.Round(time.Millisecond), r.ReachErr)
}

// TestProbeCacheBoundedAndPrunedRarely: probes of ever new targets, with 2,000 results still
// of use at any time (more than maxProbeEntries), keep the cache bounded (twice the entries
// still of use), and the walks over all entries that drop expired ones happen only when their
// number doubled, not once per new target: that cost an idle replica with 10,000 tunnel
// mounts (probed every 100 s, results kept 10 s) 5 % of its CPU.
func TestProbeCacheBoundedAndPrunedRarely(t *testing.T) {
	const live, targets = 2000, 50_000
	c := &ProbeCache{TTL: live * time.Millisecond}
	start := time.Now()
	// A walk drops entries: the entries fell since the last target only after one.
	walks, before := 0, 0
	for i := range targets {
		now := start.Add(time.Duration(i) * time.Millisecond)
		key := TargetKey{SecretName: fmt.Sprintf("target-%d", i)}
		_, ok, run, begin := c.lookup(types.UID(key.SecretName), key, now, now)
		if ok || !begin {
			t.Fatalf("target %d: a new target's lookup must start a probe", i)
		}
		c.finish(key, run, ProbeResult{}, now)
		n := len(c.entries)
		if n > 2*(live+1) {
			t.Fatalf("%d entries after %d targets, want at most %d", n, i+1, 2*(live+1))
		}
		if n <= before {
			walks++
		}
		before = n
	}
	// A walk after every live new entries at most, and never one per new target.
	if want := targets / live; walks == 0 || walks > want {
		t.Fatalf("%d walks over the entries for %d new targets, want 1 to %d", walks, targets, want)
	}
}
