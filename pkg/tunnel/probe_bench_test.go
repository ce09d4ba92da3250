package tunnel_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// BenchmarkProbeThroughTunnel: what one status probe of a tunnel mount costs when probes come
// too far apart to keep their connection (past 9,000 mounts at the default
// --status-probes-qps), each on a new connection through a real agent to a TLS target
// answering /readyz: HTTP/2 with a full handshake, HTTP/2 resuming the Target's TLS session
// (what the proxy does), HTTP/1.1 resuming it, and for scale a plain HTTP/1.1 exchange with
// the agent itself (tunnel.AddressAgent), which no TLS handshake crosses. The figures are of
// the whole process (hub, agent and target), as ratios against each other.
func BenchmarkProbeThroughTunnel(b *testing.B) {
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	target.EnableHTTP2 = true
	target.StartTLS()
	defer target.Close()
	agentHandler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	sessions, key := benchSession(b, target.Listener.Addr().String(), agentHandler)
	roots := target.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs

	for _, c := range []struct {
		name          string
		http2, resume bool
	}{{"http2-full-handshake", true, false}, {"http2-resumed", true, true}, {"http1-resumed", false, true}} {
		cfg := &tls.Config{RootCAs: roots, ServerName: "example.com", MinVersion: tls.VersionTLS12}
		if c.resume {
			cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		}
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return sessions.DialContext(ctx, key, tunnel.AddressTarget)
			},
			TLSClientConfig:   cfg,
			ForceAttemptHTTP2: c.http2,
		}
		client := &http.Client{Transport: tr}
		probe := func(b *testing.B) *tls.ConnectionState {
			resp, err := client.Get("https://target/readyz")
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			tr.CloseIdleConnections()
			if resp.StatusCode != http.StatusOK || resp.TLS == nil {
				b.Fatalf("%s over TLS %v", resp.Status, resp.TLS != nil)
			}
			return resp.TLS
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			probe(b) // a session to resume
			for b.Loop() {
				if state := probe(b); state.DidResume != c.resume || (state.NegotiatedProtocol == "h2") != c.http2 {
					b.Fatalf("resumed %v over %q", state.DidResume, state.NegotiatedProtocol)
				}
			}
		})
	}
	b.Run("http1-to-the-agent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			conn, err := sessions.DialContext(context.Background(), key, tunnel.AddressAgent)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(conn, "GET /readyz HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			conn.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatal(resp.Status)
			}
		}
	})
}
