package framework

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	netutils "k8s.io/utils/net"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

// Replicas are mount-apiserver processes (the test's binary) of one aggregated server: they
// share one external etcd and one serving CA (the generated PKI, copied to each root
// directory, with 127.0.0.1 among its addresses), and the host reaches them through a
// Forwarder that stands in for the Service in front of a Deployment.
type Replicas struct {
	Kube      *KubeAPIServer
	Etcd      *EtcdProcess
	Forwarder *Forwarder
	// Kubeconfig is the bundle's service account's, which every replica runs with.
	Kubeconfig string
	Procs      []*Process

	agg *Aggregated
}

// StartReplicas starts n replicas registered into kube (artifacts/apiservice), each with
// --tunnel-replica-name replica-<i> and args, and waits until the APIService is Available.
// Cleanup kills them with the test.
func StartReplicas(ctx context.Context, t testing.TB, kube *KubeAPIServer, bin Binary, n int, args ...string) *Replicas {
	t.Helper()
	dir := t.TempDir()
	fwd, err := StartForwarder()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fwd.Close)
	r := &Replicas{Kube: kube, Forwarder: fwd, Etcd: StartEtcdProcess(t, t.TempDir())}
	r.agg = &Aggregated{Kube: kube, port: fwd.Port()}
	if err := r.agg.applyBundle(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Kubeconfig, err = r.agg.serviceAccountKubeconfig(ctx); err != nil {
		t.Fatal(err)
	}

	// One CA for all, as a Deployment mounting one serving Secret would have.
	shared := filepath.Join(dir, "pki")
	hosts := append([]string{"localhost"}, options.DefaultServingCertHosts...)
	if _, err := pki.Ensure(shared, hosts, []net.IP{netutils.ParseIPSloppy("127.0.0.1"), net.IPv6loopback}); err != nil {
		t.Fatal(err)
	}
	backends := make([]string, n)
	ports := make([]int, n)
	for i := range n {
		if ports[i], err = FreePort(); err != nil {
			t.Fatal(err)
		}
		backends[i] = "127.0.0.1:" + strconv.Itoa(ports[i])
	}
	fwd.SetBackends(backends...)
	for i := range n {
		root := filepath.Join(dir, "replica-"+strconv.Itoa(i+1))
		if err := CopyDir(shared, filepath.Join(root, "pki")); err != nil {
			t.Fatal(err)
		}
		p := bin.StartOnPort(t, root, ports[i], append([]string{
			"--kubeconfig", r.Kubeconfig, "--apiservice-name", APIServiceName,
			"--etcd-servers", r.Etcd.ClientURL, "--tunnel-replica-name", "replica-" + strconv.Itoa(i+1),
		}, args...)...)
		r.Procs = append(r.Procs, p)
	}
	if err := r.agg.WaitAvailable(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// CopyDir copies the files of directory from into to (made if missing), as replicas share
// one generated PKI.
func CopyDir(from, to string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Forwarder is a TCP forwarder on loopback standing in for a Service: each connection goes to
// the next backend that accepts it, round robin, so a dead backend is skipped; in failover
// mode to the first backend that accepts it.
type Forwarder struct {
	listener net.Listener

	mu       sync.Mutex
	backends []string
	failover bool
	next     int
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// StartForwarder listens on a free loopback port; SetBackends says where to.
func StartForwarder() (*Forwarder, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Forwarder{listener: l, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// Port is the forwarder's port on 127.0.0.1.
func (f *Forwarder) Port() int { return f.listener.Addr().(*net.TCPAddr).Port }

// Addr is 127.0.0.1:<port>.
func (f *Forwarder) Addr() string { return f.listener.Addr().String() }

// SetFailover sends each new connection to the first backend that accepts it.
func (f *Forwarder) SetFailover(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failover = on
}

// SetBackends replaces the backends (host:port); connections already forwarded stay.
func (f *Forwarder) SetBackends(backends ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backends = append([]string(nil), backends...)
}

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of descriptors in a burst of thousands of agents: a Service keeps
			// accepting once some are free, and so does the forwarder.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !f.track(c) {
			_ = c.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.forward(c)
		}()
	}
}

func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

func (f *Forwarder) forward(c net.Conn) {
	defer f.untrack(c)
	defer c.Close()
	f.mu.Lock()
	backends, start := f.backends, f.next
	if f.failover {
		start = 0
	}
	f.next++
	f.mu.Unlock()
	var b net.Conn
	for i := range backends {
		var err error
		if b, err = net.DialTimeout("tcp", backends[(start+i)%len(backends)], 2*time.Second); err == nil {
			break
		}
	}
	if b == nil {
		return
	}
	if !f.track(b) {
		_ = b.Close()
		return
	}
	defer f.untrack(b)
	defer b.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		// Not io.Copy of the bare connections: Linux splices TCP to TCP through a pipe held
		// for the connection's life, two more descriptors per direction, and thousands of
		// agents ran a simulator out of them.
		_, _ = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, 8<<10))
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go cp(b, c)
	go cp(c, b)
	<-done
	<-done
}

// Close stops listening, closes every forwarded connection and waits for the copies to end.
func (f *Forwarder) Close() {
	_ = f.listener.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
