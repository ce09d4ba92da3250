package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// remotedialer's message types, as its client writes them.
const (
	rdData      = 1
	rdConnect   = 2
	rdAddClient = 4
	rdPause     = 6
	rdResume    = 7
)

// hostileAgent holds a mount's tunnel session as an agent with the right to attach to its own
// mount, and speaks remotedialer's wire protocol by hand: it obeys nothing.
type hostileAgent struct {
	ws       *websocket.Conn
	connects chan int64
	pauses   atomic.Int64
	// paused: the hub's last flow-control message was a Pause (an agent that keeps to it
	// waits for the Resume).
	paused atomic.Bool
	closed chan struct{}
}

func attachHostileAgent(t *testing.T, hub *rest.Config, mount string) *hostileAgent {
	t.Helper()
	tlsConfig, err := rest.TLSConfigFor(hub)
	if err != nil {
		t.Fatal(err)
	}
	url, err := agent.AttachURL(hub.Host, "", mount)
	if err != nil {
		t.Fatal(err)
	}
	ws, resp, err := (&websocket.Dialer{TLSClientConfig: tlsConfig, HandshakeTimeout: 10 * time.Second}).Dial(url, nil)
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(resp.Body)
			t.Fatalf("attach: %v: %s", err, body)
		}
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	a := &hostileAgent{ws: ws, connects: make(chan int64, 16), closed: make(chan struct{})}
	go func() {
		defer close(a.closed)
		for {
			_, r, err := ws.NextReader()
			if err != nil {
				return
			}
			var head [30]byte
			n, _ := io.ReadFull(r, head[:])
			_, l1 := binary.Varint(head[:n])
			connID, l2 := binary.Varint(head[max(l1, 0):n])
			msgType, l3 := binary.Varint(head[max(l1+l2, 0):n])
			if l1 <= 0 || l2 <= 0 || l3 <= 0 {
				continue
			}
			switch msgType {
			case rdConnect:
				select {
				case a.connects <- connID:
				default:
				}
			case rdPause:
				a.pauses.Add(1)
				a.paused.Store(true)
			case rdResume:
				a.paused.Store(false)
			}
		}
	}()
	return a
}

// send writes one remotedialer message.
func (a *hostileAgent) send(connID, msgType int64, body []byte) error {
	b := binary.AppendVarint(make([]byte, 0, 32+len(body)), rand.Int64())
	b = binary.AppendVarint(b, connID)
	b = binary.AppendVarint(b, msgType)
	if msgType == rdData || msgType == rdConnect {
		b = binary.AppendVarint(b, 15000)
	}
	_ = a.ws.SetWriteDeadline(time.Now().Add(30 * time.Second))
	return a.ws.WriteMessage(websocket.BinaryMessage, append(b, body...))
}

func (a *hostileAgent) isClosed() bool {
	select {
	case <-a.closed:
		return true
	default:
		return false
	}
}

// rssPeak samples the server's RSS until stopped and returns the highest.
func rssPeak(t *testing.T, scraper *framework.Scraper) (stop func() int64) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if f, err := scraper.Figures(); err == nil && f.RSS > peak.Load() {
				peak.Store(f.RSS)
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return func() int64 {
		close(done)
		wg.Wait()
		if f, err := scraper.Figures(); err == nil && f.RSS > peak.Load() {
			peak.Store(f.RSS)
		}
		return peak.Load()
	}
}

// TestHostileAgent: an agent is a tenant. With only the right to attach to its own mount, a
// hostile agent (remotedialer's wire format written by hand) attached to a standalone hub
// running as its own process:
//   - answers a proxied GET with a 320 MiB body and ignores the hub's Pause, while the caller
//     reads nothing: the hub closes its session once it holds 16 MiB unread on the connection
//     (--tunnel-connection-buffer-bytes), its RSS rises by less than 128 MiB (issue #23
//     measured 92 -> 987 MiB without a bound);
//   - sends 1,000,000 AddClient messages (peering, which remotedialer stores for any
//     session): the session is closed at the first, RSS stays flat (issue #23: 90 -> 778 MiB);
//   - answers a caller's exec (a WebSocket upgrade, which the hub sends to the agent's address
//     in Agent-credential mode) with headers that never end (256 MiB): the caller gets a 502
//     Status, the hub read at most 1 MiB of it (proxy.MaxUpgradeAnswerBytes), RSS stays flat;
//     and with no answer at all: the caller gets 504 once the mount's requestSeconds (5 s)
//     passed. Before, an Agent-credential mount's upgrades had neither bound: the hub kept a
//     copy of every header byte, and waited for a silent agent as long as the caller did.
//
// Another mount's agent (the real mount-agent, a real kube-apiserver behind it) keeps its
// session and serves throughout.
func TestHostileAgent(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	target, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Stop)
	framework.BuildAgent(t)
	p := framework.BuildBinary(t).Start(t, t.TempDir(), "--status-controller=false", "--tunnel-authorization-interval=1s")
	scraper, err := framework.NewScraper(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	core, err := kubernetes.NewForConfig(p.Config)
	if err != nil {
		t.Fatal(err)
	}
	mounts := p.Client.MountsV1alpha1().Mounts()

	// honest: the target's admin kubeconfig lent through a real agent.
	kubeconfig, err := framework.KubeconfigBytes(target.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "honest"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	honest := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "honest"}, Spec: v1alpha1.MountSpec{
		Ref:      v1alpha1.ObjectReference{Namespace: "clusters", Name: "honest"},
		Identity: v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeMountCredentials},
		Tunnel:   &v1alpha1.MountTunnel{},
	}}
	// hostile: the agent's own credentials (the hub sends plain HTTP to the agent).
	// Its answers to upgrades must be in within 5 s.
	hostile := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "hostile"}, Spec: v1alpha1.MountSpec{
		Tunnel:   &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsAgent},
		Timeouts: &v1alpha1.MountTimeouts{RequestSeconds: ptr.To[int32](5)},
	}}
	for _, m := range []*v1alpha1.Mount{honest, hostile} {
		if _, err := mounts.Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	serverPKI, err := pki.Load(filepath.Join(p.RootDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	agentKubeconfig := func(mount string) string {
		data, err := serverPKI.UserKubeconfig(p.URL, mount+"-agent", []string{authorization.AgentGroupPrefix + mount}, true)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), mount+".kubeconfig")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	honestAgent := framework.StartAgent(t, agentKubeconfig("honest"), "honest", strings.TrimPrefix(target.URL, "https://"))
	until(t, "the honest agent's session", honestAgent.Ready)
	hostileHub, err := clientcmd.BuildConfigFromFlags("", agentKubeconfig("hostile"))
	if err != nil {
		t.Fatal(err)
	}
	honestServes := func(when string) {
		t.Helper()
		if code, _, body := proxyGet(t, p.Config, "honest", "/version"); code != http.StatusOK || !strings.Contains(body, "gitVersion") {
			t.Fatalf("the honest mount %s: %d %s", when, code, body)
		}
	}
	honestServes("before")

	violations := func(reason string) float64 {
		return metricValue(t, p.Config, fmt.Sprintf(`mount_tunnel_session_violations_total{mount="hostile",reason=%q}`, reason))
	}

	t.Run("ignores Pause", func(t *testing.T) {
		baseline, err := scraper.Figures()
		if err != nil {
			t.Fatal(err)
		}
		a := attachHostileAgent(t, hostileHub, "hostile")
		// A caller's GET through the hostile mount, whose body the caller never reads.
		rt, err := rest.TransportFor(p.Config)
		if err != nil {
			t.Fatal(err)
		}
		callerCtx, cancelCaller := context.WithCancel(ctx)
		defer cancelCaller()
		go func() {
			var resp *http.Response
			for callerCtx.Err() == nil {
				req, _ := http.NewRequestWithContext(callerCtx, http.MethodGet, p.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/hostile/proxy/api/v1/pods", nil)
				if resp, err = rt.RoundTrip(req); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if resp != nil {
				<-callerCtx.Done()
				resp.Body.Close()
			}
		}()
		var connID int64
		select {
		case connID = <-a.connects:
		case <-time.After(time.Minute):
			t.Fatal("the hub never dialed through the hostile session")
		}
		peak := rssPeak(t, scraper)
		const size = 320 << 20
		sent := 0
		if err := a.send(connID, rdData, fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)); err != nil {
			t.Fatal(err)
		}
		chunk := bytes.Repeat([]byte("{"), 32<<10)
		for sent < size && !a.isClosed() {
			if err := a.send(connID, rdData, chunk); err != nil {
				break
			}
			sent += len(chunk)
		}
		closed := false
		select {
		case <-a.closed:
			closed = true
		case <-time.After(30 * time.Second):
		}
		rise := peak() - baseline.RSS
		t.Logf("the agent sent %d MiB (%d Pauses from the hub); hub RSS %.1f MiB -> peak %.1f MiB (+%.1f MiB); session closed: %v",
			sent>>20, a.pauses.Load(), float64(baseline.RSS)/(1<<20), float64(baseline.RSS+rise)/(1<<20), float64(rise)/(1<<20), closed)
		if !closed {
			t.Error("the hub kept the session of an agent that ignored Pause")
		}
		if sent >= size {
			t.Error("the hub took the whole 320 MiB")
		}
		if rise > 128<<20 {
			t.Errorf("the hub's RSS rose by %.1f MiB", float64(rise)/(1<<20))
		}
		if v := violations("connection_buffer"); v != 1 {
			t.Errorf("connection_buffer violations: %v, want 1", v)
		}
		honestServes("after the flood")
		if !honestAgent.Ready() {
			t.Error("the honest agent lost its session")
		}
	})

	// upgrade sends a caller's exec through the hostile mount and returns the answer's code
	// and body.
	upgrade := func(t *testing.T) (int, string) {
		t.Helper()
		tlsConfig, err := rest.TLSConfigFor(p.Config)
		if err != nil {
			t.Fatal(err)
		}
		tlsConfig = tlsConfig.Clone()
		tlsConfig.NextProtos = []string{"http/1.1"}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 2 * time.Minute}
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/hostile/proxy/api/v1/namespaces/default/pods/app/exec?command=true&stdout=true", nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		req.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, string(body)
	}

	t.Run("endless upgrade answer", func(t *testing.T) {
		baseline, err := scraper.Figures()
		if err != nil {
			t.Fatal(err)
		}
		a := attachHostileAgent(t, hostileHub, "hostile")
		peak := rssPeak(t, scraper)
		answered := make(chan string, 1)
		go func() {
			code, body := upgrade(t)
			answered <- fmt.Sprintf("%d %s", code, body)
		}()
		var connID int64
		select {
		case connID = <-a.connects:
		case <-time.After(time.Minute):
			t.Fatal("the hub never dialed through the hostile session")
		}
		const size = 256 << 20
		sent := 0
		if err := a.send(connID, rdData, []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nX-Endless: ")); err != nil {
			t.Fatal(err)
		}
		chunk := bytes.Repeat([]byte("a"), 32<<10)
		var answer string
		for sent < size && answer == "" {
			// The header line never ends, but the agent keeps to remotedialer's Pause: its
			// flood outran a loaded hub's reader once in CI, and then the other bound (16 MiB
			// unread on a connection, "ignores Pause" above) closed the session first.
			for a.paused.Load() && answer == "" {
				select {
				case answer = <-answered:
				case <-time.After(time.Millisecond):
				}
			}
			if answer != "" {
				break
			}
			if err := a.send(connID, rdData, chunk); err != nil {
				break
			}
			sent += len(chunk)
			select {
			case answer = <-answered:
			default:
			}
		}
		if answer == "" {
			select {
			case answer = <-answered:
			case <-time.After(time.Minute):
				t.Fatal("no answer to the caller")
			}
		}
		rise := peak() - baseline.RSS
		t.Logf("the agent sent %d MiB of one header line; the caller got %.120s; hub RSS %+.1f MiB", sent>>20, answer, float64(rise)/(1<<20))
		if !strings.HasPrefix(answer, "502 ") || !strings.Contains(answer, `"kind":"Status"`) {
			t.Errorf("the caller's answer: %.300s, want a 502 Status", answer)
		}
		if rise > 64<<20 {
			t.Errorf("the hub's RSS rose by %.1f MiB", float64(rise)/(1<<20))
		}
	})

	t.Run("silent upgrade answer", func(t *testing.T) {
		a := attachHostileAgent(t, hostileHub, "hostile")
		answered := make(chan string, 1)
		go func() {
			code, body := upgrade(t)
			answered <- fmt.Sprintf("%d %s", code, body)
		}()
		select {
		case <-a.connects:
		case <-time.After(time.Minute):
			t.Fatal("the hub never dialed through the hostile session")
		}
		// The agent says nothing. The mount's requestSeconds (5 s) bounds the wait; without
		// the guard, the caller waited for the server's own 60 s.
		asked := time.Now()
		var answer string
		select {
		case answer = <-answered:
		case <-time.After(90 * time.Second):
			t.Fatal("the caller got no answer in 90 s")
		}
		took := time.Since(asked)
		t.Logf("the caller got %.60s after %v", answer, took.Round(time.Millisecond))
		if !strings.HasPrefix(answer, "504 ") || took > 30*time.Second {
			t.Errorf("the caller's answer after %v: %.300s, want 504 once the mount's 5 s passed", took, answer)
		}
		honestServes("after the upgrades")
	})

	t.Run("peering messages", func(t *testing.T) {
		baseline, err := scraper.Figures()
		if err != nil {
			t.Fatal(err)
		}
		a := attachHostileAgent(t, hostileHub, "hostile")
		peak := rssPeak(t, scraper)
		const n = 1_000_000
		sent := 0
		for sent < n && !a.isClosed() {
			if err := a.send(0, rdAddClient, fmt.Appendf(nil, "client-%d/%d", sent, sent)); err != nil {
				break
			}
			sent++
		}
		closed := false
		select {
		case <-a.closed:
			closed = true
		case <-time.After(30 * time.Second):
		}
		rise := peak() - baseline.RSS
		t.Logf("the agent sent %d AddClient messages; hub RSS %.1f MiB -> peak %.1f MiB (%+.1f MiB); session closed: %v",
			sent, float64(baseline.RSS)/(1<<20), float64(baseline.RSS+rise)/(1<<20), float64(rise)/(1<<20), closed)
		if !closed {
			t.Error("the hub kept the session of an agent that sent peering messages")
		}
		if sent >= n {
			t.Error("the hub read all 1,000,000 AddClient messages")
		}
		if rise > 64<<20 {
			t.Errorf("the hub's RSS rose by %.1f MiB", float64(rise)/(1<<20))
		}
		if v := violations("message_type"); v != 1 {
			t.Errorf("message_type violations: %v, want 1", v)
		}
		honestServes("after the peering messages")
	})
}
