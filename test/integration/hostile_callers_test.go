package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// repeatReader yields n bytes of b over and over: a large body that is never held whole.
type repeatReader struct {
	b   []byte
	n   int64
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && int64(k) < r.n {
		c := copy(p[k:], r.b[r.off:])
		if int64(k+c) > r.n {
			c = int(r.n) - k
		}
		k += c
		r.off = (r.off + c) % len(r.b)
	}
	r.n -= int64(k)
	return k, nil
}

// TestHostileCallers attacks mount-apiserver (standalone, its own process) with callers that
// hold or overload it, while a normal caller uses the real kubectl on the Mount API and GETs
// through a mount of a real kube-apiserver, which must keep working:
//   - 1,000 connections that never finish their headers: 500 that never start TLS and 500
//     that send half a request head. The server closes them itself (net/http's
//     ReadHeaderTimeout, 32 s in k8s.io/apiserver, also bounds the TLS handshake);
//   - a 2 MB request header, to the Mount API and through the proxy: 431 (MaxHeaderBytes,
//     1 MB);
//   - a 10 MB body to the Mount API: 413 (the generic server's 3 MB bound), and a 100 MB body
//     through the proxy: streamed to the target, which refuses it, in bounded memory;
//   - 200 WebSocket attach upgrades (the framework's kubelet behind the real kube-apiserver)
//     that never send a frame, with --proxy-max-upgrades=150: 150 sessions open, 50 refused
//     with 429.
//
// RSS, goroutines and fds stay bounded while they last and return to the baseline after.
func TestHostileCallers(t *testing.T) {
	ctx := context.Background()
	kube, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	kubelet, err := framework.StartKubelet(ctx, kube, "hostile-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "apps", "app"); err != nil {
		t.Fatal(err)
	}
	const maxUpgrades = 150
	p := framework.BuildBinary(t).Start(t, t.TempDir(), "--status-controller=false", fmt.Sprintf("--proxy-max-upgrades=%d", maxUpgrades))
	scraper, err := framework.NewScraper(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	core, err := kubernetes.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := framework.KubeconfigBytes(kube.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "target-kubeconfig"}, Data: map[string][]byte{"kubeconfig": kc}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := urlMount("target")
	m.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
	if _, err := p.Client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	tlsConfig, err := rest.TLSConfigFor(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	h1TLS := tlsConfig.Clone()
	h1TLS.NextProtos = []string{"http/1.1"}
	h1TLS.ServerName = "127.0.0.1"
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}}
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: h1TLS}}
	proxyURL := p.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/target/proxy"
	addr := strings.TrimPrefix(p.URL, "https://")

	// The normal caller: the real kubectl on the Mount API, a GET through the mount.
	normal := func() error {
		out, err := exec.Command(realKubectl(t), "--kubeconfig", p.Kubeconfig, "get", "mounts", "--request-timeout=30s").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "target") {
			return fmt.Errorf("kubectl get mounts: %v: %s", err, out)
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL+"/api/v1/namespaces/default", nil)
		resp, err := h2.Do(req)
		if err != nil {
			return fmt.Errorf("proxied GET: %w", err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("proxied GET: %d", resp.StatusCode)
		}
		return nil
	}
	if err := normal(); err != nil {
		t.Fatal(err)
	}
	baseline, err := scraper.Figures()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("baseline: %v", baseline)
	// bounded: what the server holds while attacked, and that it returns to the baseline.
	bounded := func(t *testing.T, what string, during framework.Figures) {
		t.Helper()
		if during.RSS > 2*baseline.RSS+64<<20 {
			t.Errorf("%s: RSS %.1f MiB, baseline %.1f MiB", what, float64(during.RSS)/(1<<20), float64(baseline.RSS)/(1<<20))
		}
		var after framework.Figures
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			f, err := scraper.Figures()
			after = f
			return err == nil && f.Goroutines <= baseline.Goroutines+20 && f.FDs <= baseline.FDs+10, nil
		}); err != nil {
			t.Errorf("%s: goroutines and fds did not return: baseline %v, after %v", what, baseline, after)
		}
		t.Logf("%s: baseline %v; during %v; after %v", what, baseline, during, after)
	}

	t.Run("slow headers", func(t *testing.T) {
		const n = 1000
		var mu sync.Mutex
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		var wg sync.WaitGroup
		var failed atomic.Int64
		sem := make(chan struct{}, 50)
		for i := range n {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					failed.Add(1)
					return
				}
				if i%2 == 1 {
					tc := tls.Client(c, h1TLS)
					if err := tc.Handshake(); err != nil {
						c.Close()
						failed.Add(1)
						return
					}
					if _, err := io.WriteString(tc, "GET /apis/mounts.kcp.io/v1alpha1/mounts HTTP/1.1\r\nHost: mount-apiserver\r\nUser-Agent: slow"); err != nil {
						c.Close()
						failed.Add(1)
						return
					}
					c = tc
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			})
		}
		wg.Wait()
		if failed.Load() > 0 {
			t.Fatalf("%d of %d slow connections could not be opened", failed.Load(), n)
		}
		if err := normal(); err != nil {
			t.Errorf("with %d slow connections open: %v", n, err)
		}
		during, err := scraper.Figures()
		if err != nil {
			t.Fatal(err)
		}
		// The server closes every one of them itself.
		var open atomic.Int64
		open.Store(n)
		for _, c := range conns {
			wg.Go(func() {
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
				if _, err := io.Copy(io.Discard, c); err == nil || !isTimeout(err) {
					open.Add(-1)
				}
			})
		}
		wg.Wait()
		if o := open.Load(); o > 0 {
			t.Errorf("%d of %d slow connections were still open after 2 minutes", o, n)
		}
		bounded(t, "1,000 slow connections", during)
	})

	t.Run("oversized", func(t *testing.T) {
		do := func(c *http.Client, method, url string, header http.Header, body io.Reader, size int64) (int, string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, method, url, body)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range header {
				req.Header[k] = v
			}
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				return 0, err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			return resp.StatusCode, string(b)
		}
		big := http.Header{"X-Big": {strings.Repeat("h", 2<<20)}}
		for _, url := range []string{p.URL + "/apis/mounts.kcp.io/v1alpha1/mounts", proxyURL + "/api/v1/namespaces"} {
			if code, body := do(h1, http.MethodGet, url, big, nil, 0); code != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("2 MB header to %s: %d %.200s, want 431", url, code, body)
			}
		}

		var peak atomic.Int64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				if f, err := scraper.Figures(); err == nil && f.RSS > peak.Load() {
					peak.Store(f.RSS)
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
		// The Mount API reads at most 3 MB of a body.
		const apiBody = 10 << 20
		code, body := do(h2, http.MethodPost, p.URL+"/apis/mounts.kcp.io/v1alpha1/mounts", nil, &repeatReader{b: []byte(`{"a":"b"} `), n: apiBody}, apiBody)
		var status metav1.Status
		if code != http.StatusRequestEntityTooLarge || json.Unmarshal([]byte(body), &status) != nil || status.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("10 MB body to the Mount API: %d %.300s, want a 413 Status", code, body)
		}
		// The proxy streams a body to the target, which decides (kube-apiserver: 413).
		const proxyBody = 100 << 20
		chunk := bytes.Repeat([]byte(`{"a":"b"} `), 1000)
		code, body = do(h2, http.MethodPut, proxyURL+"/api/v1/namespaces/default/configmaps/big", nil, &repeatReader{b: chunk, n: proxyBody}, proxyBody)
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("100 MB body through the proxy: %d %.300s, want the target's 413", code, body)
		}
		close(stop)
		<-sampled
		if err := normal(); err != nil {
			t.Errorf("after the oversized requests: %v", err)
		}
		h1.CloseIdleConnections()
		h2.CloseIdleConnections()
		bounded(t, "oversized headers and bodies", framework.Figures{RSS: peak.Load()})
	})

	t.Run("upgrades", func(t *testing.T) {
		const n = 200
		var mu sync.Mutex
		var sessions []io.Closer
		defer func() {
			for _, s := range sessions {
				s.Close()
			}
		}()
		codes := map[int]int{}
		var wg sync.WaitGroup
		start := time.Now()
		// One client per session: each upgrade is a connection of its own.
		for range n {
			wg.Go(func() {
				c := &http.Client{Transport: &http.Transport{TLSClientConfig: h1TLS}}
				ctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL+"/api/v1/namespaces/apps/pods/app/attach?stdin=true&stdout=true", nil)
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
				req.Header.Set("Sec-WebSocket-Version", "13")
				req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
				req.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
				resp, err := c.Do(req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					codes[0]++
					return
				}
				codes[resp.StatusCode]++
				if resp.StatusCode == http.StatusSwitchingProtocols {
					sessions = append(sessions, resp.Body.(io.ReadWriteCloser))
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				// Else the refused callers' connections idle until the server's idle
				// timeout (90 s) ends them.
				c.CloseIdleConnections()
			})
		}
		wg.Wait()
		t.Logf("upgrades answered in %v", time.Since(start))
		if codes[http.StatusSwitchingProtocols] != maxUpgrades || codes[http.StatusTooManyRequests] != n-maxUpgrades {
			t.Errorf("200 upgrades with --proxy-max-upgrades=%d: answers %v, want %d × 101 and %d × 429", maxUpgrades, codes, maxUpgrades, n-maxUpgrades)
		}
		if err := normal(); err != nil {
			t.Errorf("with %d sessions open: %v", len(sessions), err)
		}
		during, err := scraper.Figures()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d sessions open: %v", len(sessions), during)
		for _, s := range sessions {
			s.Close()
		}
		sessions = nil
		t.Logf("sessions closed at %v", time.Since(start))
		bounded(t, fmt.Sprintf("%d upgrade requests", n), during)
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
