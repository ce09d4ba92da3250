package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
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
	cmd              *exec.Cmd
	exited           chan struct{}
}

// StartEtcdProcess starts etcd with its data in dir on free loopback ports, waits until it
// serves, and kills it with t.Cleanup.
func StartEtcdProcess(t testing.TB, dir string) *EtcdProcess {
	t.Helper()
	clientPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	peerPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := &EtcdProcess{
		ClientURL:  "http://127.0.0.1:" + strconv.Itoa(clientPort),
		dir:        dir,
		logPath:    filepath.Join(dir, "etcd.log"),
		clientPort: clientPort,
		peer:       peerPort,
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
	e.cmd = exec.Command(filepath.Join(bin, "etcd"),
		"--name=test", "--data-dir="+filepath.Join(e.dir, "data"),
		"--listen-client-urls="+e.ClientURL, "--advertise-client-urls="+e.ClientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=test="+peerURL, "--log-level=warn")
	e.cmd.Stdout, e.cmd.Stderr = logFile, logFile
	// Die with the test process, even when it is killed.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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
