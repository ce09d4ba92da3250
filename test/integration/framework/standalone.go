package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

// Server is a running mount-apiserver.
type Server struct {
	RootDir string
	// URL is https://127.0.0.1:<port>.
	URL string
	// CAData is the CA of the server's generated serving certificate.
	CAData []byte
	// Kubeconfig, Config and Client are the admin's, in standalone mode only.
	Kubeconfig string
	Config     *rest.Config
	Client     clientset.Interface

	stop func() error
}

// Stop stops the server and waits until it has shut down.
func (s *Server) Stop() error { return s.stop() }

// StartInProcess runs the mount-apiserver command's options in this process on a free
// loopback port and stops it with t.Cleanup. rootDir may be "" for a fresh temporary
// directory. modify may change the options after defaulting, e.g. to set --etcd-servers.
func StartInProcess(t testing.TB, rootDir string, modify func(*options.Options)) *Server {
	t.Helper()
	if rootDir == "" {
		rootDir = t.TempDir()
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on loopback: %v", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	s, err := StartServer(ctx, rootDir, listener, modify)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping mount-apiserver: %v", err)
		}
	})
	return s
}

// StartServer runs mount-apiserver in this process on listener until Stop.
func StartServer(ctx context.Context, rootDir string, listener net.Listener, modify func(*options.Options)) (*Server, error) {
	o := options.NewOptions()
	o.RootDirectory = rootDir
	o.SecureServing.Listener = listener
	o.SecureServing.BindPort = listener.Addr().(*net.TCPAddr).Port
	if modify != nil {
		modify(o)
	}

	ctx, cancel := context.WithCancel(ctx)
	exit := &exitStatus{done: make(chan struct{})}
	go func() {
		exit.err = server.Run(ctx, o)
		close(exit.done)
	}()
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case <-exit.done:
				stopErr = exit.err
			case <-time.After(time.Minute):
				stopErr = fmt.Errorf("mount-apiserver did not stop within a minute")
			}
		})
		return stopErr
	}

	s := &Server{RootDir: rootDir, URL: "https://" + listener.Addr().String(), stop: stop}
	if err := waitReady(ctx, s, exit); err != nil {
		_ = stop()
		return nil, err
	}
	return s, nil
}

// exitStatus is how a server ended; err is valid once done is closed.
type exitStatus struct {
	done chan struct{}
	err  error
}

// waitReady waits until the server answers /readyz with 200 over TLS verified against its
// generated CA, then loads the admin kubeconfig if the server wrote one.
func waitReady(ctx context.Context, s *Server, exit *exitStatus) error {
	kubeconfig := filepath.Join(s.RootDir, options.AdminKubeconfigFile)
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exit.done:
			return false, fmt.Errorf("mount-apiserver exited before it was ready: %v", exit.err)
		default:
		}
		ca, err := os.ReadFile(filepath.Join(s.RootDir, "pki", pki.CACertFile))
		if err != nil {
			return false, nil //nolint:nilerr // not written yet
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := client.Get(s.URL + "/readyz")
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		resp.Body.Close()
		s.CAData = ca
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for mount-apiserver at %s: %w", s.URL, err)
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil // delegated mode: no admin kubeconfig
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading admin kubeconfig: %w", err)
	}
	// Tests and benchmarks measure the server, not client-go's default 5 QPS limiter.
	cfg.QPS, cfg.Burst = 1000, 2000
	s.Kubeconfig, s.Config = kubeconfig, cfg
	if s.Client, err = clientset.NewForConfig(cfg); err != nil {
		return fmt.Errorf("creating clientset: %w", err)
	}
	return nil
}

// Binary is a mount-apiserver binary built for the tests.
type Binary string

// BuildBinary builds ./cmd/mount-apiserver once per test process.
func BuildBinary(t testing.TB) Binary {
	t.Helper()
	bin, err := BuildMountAPIServer()
	if err != nil {
		t.Fatalf("building mount-apiserver: %v", err)
	}
	return Binary(bin)
}

// BuildMountAPIServer builds ./cmd/mount-apiserver once per process and returns its path.
func BuildMountAPIServer() (string, error) {
	return buildCommand("github.com/kcp-dev/mount-apiserver/cmd/mount-apiserver", "mount-apiserver")
}

// BuildBinaryWith builds ./cmd/mount-apiserver with extra go build flags (e.g. -ldflags) into
// a directory of the test.
func BuildBinaryWith(t testing.TB, flags ...string) Binary {
	t.Helper()
	out := filepath.Join(t.TempDir(), "mount-apiserver")
	args := append(append([]string{"build", "-o", out}, flags...), "github.com/kcp-dev/mount-apiserver/cmd/mount-apiserver")
	if output, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, output)
	}
	return Binary(out)
}

// Process is a mount-apiserver running as its own process.
type Process struct {
	*Server
	Cmd *exec.Cmd
	// LogPath holds the process's standard output and error.
	LogPath string
	exit    *exitStatus
}

// Start runs the binary with a root directory on a free loopback port and waits until ready.
// A port taken by another process between FreePort and the server's bind (tests run in
// parallel) is not the server's fault: Start tries another port, at most three times.
func (b Binary) Start(t testing.TB, rootDir string, args ...string) *Process {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.start(t, rootDir, port, args...)
		if err == nil {
			return p
		}
		if attempt < 3 && p.portTaken() {
			t.Logf("port %d was taken before mount-apiserver bound it; trying another", port)
			continue
		}
		t.Fatal(err)
	}
}

// StartOnPort is Start on a given port, for a server whose port must be known before it
// starts (an APIService that points at it).
func (b Binary) StartOnPort(t testing.TB, rootDir string, port int, args ...string) *Process {
	t.Helper()
	p, err := b.start(t, rootDir, port, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs the binary and waits until it is ready; the process is returned with the error,
// so that its log can be read.
func (b Binary) start(t testing.TB, rootDir string, port int, args ...string) (*Process, error) {
	t.Helper()
	args = append([]string{"--root-directory", rootDir, "--secure-port", strconv.Itoa(port)}, args...)
	cmd := exec.Command(string(b), args...)
	// A test that panics (its timeout) skips its cleanups: the process must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "mount-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", b, err)
	}
	exit := &exitStatus{done: make(chan struct{})}
	go func() {
		exit.err = cmd.Wait()
		logFile.Close()
		close(exit.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exit.done
		if t.Failed() {
			if data, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("mount-apiserver log:\n%s", data)
			}
		}
	})
	p := &Process{Cmd: cmd, LogPath: logFile.Name(), exit: exit, Server: &Server{RootDir: rootDir, URL: "https://127.0.0.1:" + strconv.Itoa(port)}}
	p.stop = func() error { _ = cmd.Process.Signal(os.Interrupt); <-exit.done; return exit.err }
	// A kubeconfig left by an earlier run names an old port; remove it so readiness loads
	// this run's.
	_ = os.Remove(filepath.Join(rootDir, options.AdminKubeconfigFile))
	if err := waitReady(klog.NewContext(context.Background(), klog.Background()), p.Server, exit); err != nil {
		return p, err
	}
	return p, nil
}

// portTaken reports whether the process exited because its secure port was in use.
func (p *Process) portTaken() bool {
	select {
	case <-p.exit.done:
	default:
		return false
	}
	data, err := os.ReadFile(p.LogPath)
	return err == nil && strings.Contains(string(data), "failed to listen on") && strings.Contains(string(data), "address already in use")
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exit.done }

// ExitErr is the process's exit status; valid once Exited is closed.
func (p *Process) ExitErr() error { return p.exit.err }
