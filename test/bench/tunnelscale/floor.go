package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

// The floor is what idle TLS WebSocket sessions cost a bare Go program on this machine, the
// least any hub that holds them pays: "tunnelscale floor" runs a server process (this binary,
// "floor serve": net/http over TLS with the serving certificate's key type of the servers,
// gorilla/websocket as remotedialer upgrades and reads it, a pong for every ping) and, in this
// process, clients that ping every 5 s as remotedialer's do; it reports the server's RSS,
// goroutines and idle CPU at each number of sessions.
func runFloor(args []string) error {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	levels := fs.String("sessions", "1,100,1000,10000", "numbers of sessions")
	window := fs.Duration("window", time.Minute, "how long to measure idle CPU at each number")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.Arg(0) == "serve" {
		return serveFloor()
	}
	if _, err := raiseFileLimit(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "floor", "serve")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	r := bufio.NewReader(out)
	var addr string
	var caPEM []byte
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	addr = strings.TrimSpace(line)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.TrimSpace(line) == "" {
			break
		}
		caPEM = append(caPEM, line...)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("floor server: no CA")
	}
	dialer := &websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}, HandshakeTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	held := 0
	fmt.Printf("floor: idle TLS WebSockets held by a bare Go server (%d CPUs, load average %s)\n", runtime.NumCPU(), loadAverage())
	var prev figures
	for _, s := range strings.Split(*levels, ",") {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil {
			return fmt.Errorf("-sessions %q", s)
		}
		for ; held < n; held++ {
			ws, _, err := dialer.DialContext(ctx, "wss://"+addr+"/", nil)
			if err != nil {
				return fmt.Errorf("session %d: %w", held, err)
			}
			open.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer ws.Close()
				stop := context.AfterFunc(ctx, func() { _ = ws.Close() })
				defer stop()
				// remotedialer's client: a ping every 5 s, a reader for the pongs.
				go func() {
					t := time.NewTicker(5 * time.Second)
					defer t.Stop()
					for {
						select {
						case <-ctx.Done():
							return
						case <-t.C:
							if ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Minute)) != nil {
								return
							}
						}
					}
				}()
				for {
					if _, _, err := ws.NextReader(); err != nil {
						return
					}
				}
			}()
		}
		time.Sleep(10 * time.Second)
		pid := cmd.Process.Pid
		c0, err := cpuTime(pid)
		if err != nil {
			return err
		}
		start := time.Now()
		time.Sleep(*window)
		c1, err := cpuTime(pid)
		if err != nil {
			return err
		}
		m := readMemory(pid)
		f := figures{sessions: n, rss: m.rss, anon: m.anon, cpu: (c1 - c0).Seconds() / time.Since(start).Seconds()}
		line := fmt.Sprintf("floor %6d sessions: RSS %.0f MiB, idle CPU %.2f%% of one core (load average %s)", n, mib(m.rss), 100*f.cpu, loadAverage())
		if prev.sessions > 0 {
			line += fmt.Sprintf("; %+.1f KiB RSS per session since %d", float64(f.rss-prev.rss)/float64(n-prev.sessions), prev.sessions)
		}
		fmt.Println(line)
		prev = f
	}
	return nil
}

// serveFloor is the floor's server process: it prints its address and CA, then serves.
func serveFloor() error {
	ca, err := pki.NewCA("floor-ca")
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := ca.IssuePEM(&x509.Certificate{Subject: pkix.Name{CommonName: "floor"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	upgrader := websocket.Upgrader{HandshakeTimeout: 5 * time.Second, CheckOrigin: func(*http.Request) bool { return true }}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ws, err := upgrader.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer ws.Close()
			var mu sync.Mutex
			_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
			ws.SetPingHandler(func(string) error {
				mu.Lock()
				err := ws.WriteControl(websocket.PongMessage, nil, time.Now().Add(time.Minute))
				mu.Unlock()
				if err != nil {
					return err
				}
				return ws.SetReadDeadline(time.Now().Add(time.Minute))
			})
			for {
				if _, _, err := ws.NextReader(); err != nil {
					return
				}
			}
		})}
	fmt.Println(ln.Addr().String())
	fmt.Print(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})))
	fmt.Println()
	return srv.ServeTLS(ln, "", "")
}
