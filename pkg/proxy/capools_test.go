package proxy

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

func caPEM(s *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// Mounts of one cluster with credentials of their own hold one parsed CA bundle, which still
// verifies the target; another CA's bundle gets a pool of its own, a bundle without a
// certificate is refused as client-go refuses it, and a bundle goes with its last Target.
func TestTargetsShareParsedCABundles(t *testing.T) {
	server, hits := countingServer(t, true, "ok")
	otherCA, _, err := certutil.GenerateSelfSignedCertKey("another-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// An HTTP/2 connection's ping timer holds its closed connection, and so the Target's CA
	// pool, until it fires once more (PingAfter): short here, so that the test need not wait.
	tr := NewTransports(TransportOptions{PingAfter: 100 * time.Millisecond}, nil)
	build := func(token string, ca []byte) *Target {
		t.Helper()
		cfg := &rest.Config{Host: server.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
		target, err := tr.newTarget(cfg, nil, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return target
	}
	// The requests' contexts end before the Targets are expected to go: a context's deadline
	// timer keeps it, and what the transport registered on it, until it fires (CI once
	// waited the whole 10 s for a bundle).
	ctx, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	alice, bob := build("alice", caPEM(server)), build("bob", caPEM(server))
	if alice.plain.TLSClientConfig.RootCAs != bob.plain.TLSClientConfig.RootCAs {
		t.Error("two Targets of one CA bundle parsed it twice")
	}
	for _, target := range []*Target{alice, bob} {
		resp, err := getWith(ctx, t, target, "/")
		if err != nil {
			t.Fatalf("the shared pool does not verify the target: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "ok" {
			t.Fatalf("answer %q", body)
		}
	}
	if hits.Load() != 2 {
		t.Errorf("the target saw %d requests, want 2", hits.Load())
	}

	// The other CA does not verify the first server.
	stranger := build("carol", otherCA)
	if stranger.plain.TLSClientConfig.RootCAs == alice.plain.TLSClientConfig.RootCAs {
		t.Fatal("bundles of two CAs share a pool")
	}
	if _, err := getWith(ctx, t, stranger, "/"); err == nil {
		t.Fatal("a Target trusting another CA reached the server")
	}

	cfg := &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{CAData: []byte("no certificate here")}}
	if _, err := tr.newTarget(cfg, nil, time.Second); !errors.Is(err, ErrCredentials) {
		t.Errorf("a CA bundle without a certificate: %v, want ErrCredentials", err)
	}

	// Two bundles and, until it is collected, the empty pool of the refused one.
	if n := tr.caPools.len(); n < 2 {
		t.Fatalf("%d bundles held, want 2 or 3", n)
	}
	endRequests()
	for _, target := range []*Target{alice, bob, stranger} {
		target.close()
	}
	alice, bob, stranger = nil, nil, nil
	deadline := time.Now().Add(10 * time.Second)
	for tr.caPools.len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bundles still held after their Targets went", tr.caPools.len())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkTargetLiveMemory: the live heap a Target of a mount holds, with 1,000 Targets of
// one CA bundle, against the same with a bundle byte-different for each (as parsed before
// the pools were shared, and as a fleet of clusters of their own still is).
func BenchmarkTargetLiveMemory(b *testing.B) {
	const targets = 1000
	server := httptest.NewTLSServer(nil)
	defer server.Close()
	ca := caPEM(server)
	for _, bc := range []struct {
		name   string
		bundle func(i int) []byte
	}{
		{"one-bundle", func(int) []byte { return ca }},
		{"a-bundle-each", func(i int) []byte { return append([]byte(fmt.Sprintf("# mount %d\n", i)), ca...) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var perTarget float64
			for range b.N {
				tr := NewTransports(TransportOptions{}, nil)
				before := liveHeap()
				held := make([]*Target, 0, targets)
				for i := range targets {
					cfg := &rest.Config{Host: server.URL, BearerToken: fmt.Sprint("token-", i), TLSClientConfig: rest.TLSClientConfig{CAData: bc.bundle(i)}}
					target, err := tr.newTarget(cfg, nil, time.Second)
					if err != nil {
						b.Fatal(err)
					}
					held = append(held, target)
				}
				perTarget = float64(liveHeap()-before) / targets
				runtime.KeepAlive(held)
			}
			b.ReportMetric(perTarget, "live-B/target")
		})
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
