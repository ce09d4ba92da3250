package tunnel_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent/agenttest"
)

// BenchmarkTunnelThroughput: bodies of 16 MiB from a target behind a real agent, read by the
// hub through the session as fast as it can, one stream and four at once: what the guard
// (bounds.go) costs the tunnel's throughput.
func BenchmarkTunnelThroughput(b *testing.B) {
	const size = 16 << 20
	chunk := make([]byte, 32<<10)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(size))
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer target.Close()
	sessions, key := benchSession(b, target.Listener.Addr().String(), nil)
	fetch := func() error {
		conn, err := sessions.DialContext(context.Background(), key, tunnel.AddressTarget)
		if err != nil {
			return err
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: target\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && n != size {
			err = fmt.Errorf("%d bytes", n)
		}
		return err
	}
	for _, streams := range []int{1, 4} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			b.SetBytes(int64(size * streams))
			for b.Loop() {
				var wg sync.WaitGroup
				for range streams {
					wg.Go(func() {
						if err := fetch(); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
		})
	}
}

// benchSession runs a hub's Sessions and a real agent of one mount attached to it, the agent's
// target at target and its AddressAgent served by agentHandler (nil: none); it returns the
// sessions and the session's key once both ends are up. All stop when the benchmark ends.
func benchSession(b *testing.B, target string, agentHandler http.Handler) (*tunnel.Sessions, string) {
	b.Helper()
	sessions := tunnel.NewSessions(nil, tunnel.Limits{})
	b.Cleanup(sessions.CloseAll)
	m := &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge", UID: "uid-1"}, Spec: mounts.MountSpec{Tunnel: &mounts.MountTunnel{}}}
	attacher := &tunnel.Attacher{Sessions: sessions}
	hubServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := genericapirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "agent"})
		handler, err := attacher.Handler(ctx, m)
		if err != nil {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		handler.ServeHTTP(w, req.WithContext(ctx))
	}))
	b.Cleanup(hubServer.Close)
	url, _ := agent.AttachURL(hubServer.URL, "", "edge")
	a := agenttest.Run(b, &agent.Config{Hub: &rest.Config{Host: hubServer.URL}, AttachURL: url, Mount: "edge", Target: target, MaxBackoff: time.Second, AgentHandler: agentHandler})
	key := tunnel.SessionKey(clusters.DefaultCluster, m.UID)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := sessions.Connected(key); ok && a.Connected() {
			return sessions, key
		}
		if time.Now().After(deadline) {
			b.Fatal("no session")
		}
	}
}
