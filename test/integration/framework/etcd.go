package framework

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
)

// EtcdProcess is the real etcd binary (the one kube-apiserver is tested with) as its own
// process, for tests that kill and restart an external etcd. It keeps its data directory and
// client port across restarts, as an operator's etcd does.
type EtcdProcess struct {
	// ClientURL is http://127.0.0.1:<port>, the same across restarts.
	ClientURL string

	dir, logPath     string
	clientPort, peer int
	// netns runs etcd in a network namespace (nil: the host's).
	netns  *Netns
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartEtcdProcess starts etcd with its data in dir on free loopback ports, waits until it
// serves, and kills it with t.Cleanup.
func StartEtcdProcess(t testing.TB, dir string) *EtcdProcess {
	t.Helper()
	e, err := newEtcdProcess(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Kill()
		if t.Failed() {
			if data, err := os.ReadFile(e.logPath); err == nil {
				t.Logf("etcd log (tail):\n%s", tail(string(data), 40))
			}
		}
	})
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

// NewEtcdProcess prepares an etcd with its data in dir on free loopback ports, for callers
// without a testing.TB (bench commands): Start starts it, Kill ends it.
func NewEtcdProcess(dir string) (*EtcdProcess, error) { return newEtcdProcess(dir, nil) }

// Pid is the process id of the running etcd, 0 if it is not running.
func (e *EtcdProcess) Pid() int {
	if e.cmd == nil || e.cmd.Process == nil {
		return 0
	}
	return e.cmd.Process.Pid
}

// newEtcdProcess prepares an etcd with its data in dir on free loopback ports in ns (nil:
// the host's namespace); a fresh namespace has every port free.
func newEtcdProcess(dir string, ns *Netns) (*EtcdProcess, error) {
	clientPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &EtcdProcess{
		ClientURL:  "http://127.0.0.1:" + strconv.Itoa(clientPort),
		dir:        dir,
		logPath:    filepath.Join(dir, "etcd.log"),
		clientPort: clientPort,
		peer:       peerPort,
		netns:      ns,
	}, nil
}

// Start starts etcd (again) on the same ports and data directory and waits until it serves a
// read.
func (e *EtcdProcess) Start(ctx context.Context) error {
	bin, err := KubeBinDir()
	if err != nil {
		return err
	}
	peerURL := "http://127.0.0.1:" + strconv.Itoa(e.peer)
	logFile, err := os.OpenFile(e.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	e.cmd = e.netns.Command(filepath.Join(bin, "etcd"),
		"--name=test", "--data-dir="+filepath.Join(e.dir, "data"),
		"--listen-client-urls="+e.ClientURL, "--advertise-client-urls="+e.ClientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=test="+peerURL, "--log-level=warn")
	e.cmd.Stdout, e.cmd.Stderr = logFile, logFile
	if err := e.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting etcd: %w", err)
	}
	exited := make(chan struct{})
	e.exited = exited
	go func() {
		_ = e.cmd.Wait()
		logFile.Close()
		close(exited)
	}()

	if e.netns != nil {
		return e.waitHealthy(ctx, exited)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{e.ClientURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer client.Close()
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("etcd exited while starting; see %s", e.logPath)
		default:
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := client.Get(rctx, "health")
		return err == nil, nil
	})
}

// Kill SIGKILLs etcd, as a crash would, and waits until it is gone.
func (e *EtcdProcess) Kill() {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	_ = e.cmd.Process.Kill()
	<-e.exited
}

// waitHealthy waits until etcd's /health passes, asked through its network namespace.
func (e *EtcdProcess) waitHealthy(ctx context.Context, exited <-chan struct{}) error {
	client := &http.Client{Transport: &http.Transport{DialContext: e.netns.DialContext}, Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("etcd exited while starting; see %s", e.logPath)
		default:
		}
		resp, err := client.Get(e.ClientURL + "/health")
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}
