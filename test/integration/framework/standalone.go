package framework

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
)

// Server is a running standalone mount-apiserver.
type Server struct {
	RootDir    string
	Kubeconfig string
	Config     *rest.Config
	Client     clientset.Interface

	stop func()
}

// Stop stops the server and waits until it has shut down; t.Cleanup does this too.
func (s *Server) Stop() { s.stop() }

// StartInProcess runs the mount-apiserver command's options in this process on a free
// loopback port. rootDir may be "" for a fresh temporary directory. modify may change the
// options after defaulting, e.g. to set --etcd-servers.
func StartInProcess(t testing.TB, rootDir string, modify func(*options.Options)) *Server {
	t.Helper()
	if rootDir == "" {
		rootDir = t.TempDir()
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on loopback: %v", err)
	}

	o := options.NewOptions()
	o.RootDirectory = rootDir
	o.SecureServing.Listener = listener
	o.SecureServing.BindPort = listener.Addr().(*net.TCPAddr).Port
	if modify != nil {
		modify(o)
	}

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	exit := &exitStatus{done: make(chan struct{})}
	go func() {
		exit.err = server.Run(ctx, o)
		close(exit.done)
	}()

	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-exit.done:
				if exit.err != nil {
					t.Errorf("server stopped with error: %v", exit.err)
				}
			case <-time.After(time.Minute):
				t.Errorf("server did not stop within a minute")
			}
		})
	}
	t.Cleanup(stop)

	s := &Server{RootDir: rootDir, Kubeconfig: filepath.Join(rootDir, options.AdminKubeconfigFile), stop: stop}
	waitReady(t, s, exit)
	return s
}

// exitStatus is how a server ended; err is valid once done is closed.
type exitStatus struct {
	done chan struct{}
	err  error
}

// waitReady waits until the admin kubeconfig exists and /readyz answers 200 through it.
func waitReady(t testing.TB, s *Server, exit *exitStatus) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exit.done:
			return false, fmt.Errorf("server exited before it was ready: %v", exit.err)
		default:
		}
		if s.Config == nil {
			cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
			if err != nil {
				return false, nil //nolint:nilerr // not written yet
			}
			// Tests and benchmarks measure the server, not client-go's default 5 QPS limiter.
			cfg.QPS, cfg.Burst = 1000, 2000
			s.Config = cfg
		}
		client, err := rest.HTTPClientFor(s.Config)
		if err != nil {
			return false, err
		}
		resp, err := client.Get(s.Config.Host + "/readyz")
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("waiting for mount-apiserver to become ready: %v", err)
	}
	if s.Client, err = clientset.NewForConfig(s.Config); err != nil {
		t.Fatalf("creating clientset: %v", err)
	}
}

// Binary is a mount-apiserver binary built for the tests.
type Binary string

var (
	buildOnce sync.Once
	built     Binary
	buildErr  error
)

// BuildBinary builds ./cmd/mount-apiserver once per test process.
func BuildBinary(t testing.TB) Binary {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mount-apiserver-bin-")
		if err != nil {
			buildErr = err
			return
		}
		out := filepath.Join(dir, "mount-apiserver")
		cmd := exec.Command("go", "build", "-o", out, "github.com/kcp-dev/mount-apiserver/cmd/mount-apiserver")
		if output, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, output)
			return
		}
		built = Binary(out)
	})
	if buildErr != nil {
		t.Fatalf("building mount-apiserver: %v", buildErr)
	}
	return built
}

// Process is a mount-apiserver running as its own process.
type Process struct {
	*Server
	Cmd  *exec.Cmd
	exit *exitStatus
}

// Start runs the binary with a root directory on a free loopback port and waits until ready.
func (b Binary) Start(t testing.TB, rootDir string, args ...string) *Process {
	t.Helper()
	port := FreePort(t)
	args = append([]string{"--root-directory", rootDir, "--secure-port", strconv.Itoa(port)}, args...)
	cmd := exec.Command(string(b), args...)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "mount-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", b, err)
	}
	exit := &exitStatus{done: make(chan struct{})}
	p := &Process{Cmd: cmd, exit: exit}
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
	p.Server = &Server{RootDir: rootDir, Kubeconfig: filepath.Join(rootDir, options.AdminKubeconfigFile)}
	// A kubeconfig left by an earlier run names an old port; remove it so readiness waits for
	// this run's.
	_ = os.Remove(p.Kubeconfig)
	waitReady(t, p.Server, exit)
	return p
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exit.done }

// ExitErr is the process's exit status; valid once Exited is closed.
func (p *Process) ExitErr() error { return p.exit.err }

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
