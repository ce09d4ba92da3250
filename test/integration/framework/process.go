package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// StartProcess runs the mount-apiserver binary bin with rootDir and args on a free loopback
// port until the returned Server's Stop, waits until it is ready, and returns its process id.
func StartProcess(ctx context.Context, bin, rootDir string, args ...string) (*Server, int, error) {
	port, err := FreePort()
	if err != nil {
		return nil, 0, err
	}
	return startProcess(ctx, bin, rootDir, port, args)
}

// startProcess runs the mount-apiserver binary bin on 127.0.0.1:port with rootDir and args
// until the returned Server's Stop (SIGINT, then SIGKILL after a minute), and waits until it
// is ready. Its output goes to mount-apiserver.log next to rootDir.
func startProcess(ctx context.Context, bin, rootDir string, port int, args []string) (*Server, int, error) {
	args = append([]string{"--root-directory", rootDir, "--secure-port", strconv.Itoa(port)}, args...)
	logFile, err := os.Create(filepath.Join(filepath.Dir(rootDir), "mount-apiserver.log"))
	if err != nil {
		return nil, 0, err
	}
	cmd := exec.Command(bin, args...)
	// A test that panics (its timeout) skips its cleanups: the process must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, 0, fmt.Errorf("starting %s: %w", bin, err)
	}
	exit := &exitStatus{done: make(chan struct{})}
	go func() {
		exit.err = cmd.Wait()
		logFile.Close()
		close(exit.done)
	}()
	var once sync.Once
	stop := func() error {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-exit.done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				<-exit.done
			}
		})
		return nil
	}
	s := &Server{RootDir: rootDir, URL: "https://127.0.0.1:" + strconv.Itoa(port), stop: stop}
	if err := waitReady(ctx, s, exit); err != nil {
		_ = stop()
		data, _ := os.ReadFile(logFile.Name())
		return nil, 0, fmt.Errorf("%w\nmount-apiserver log (tail):\n%s", err, tail(string(data), 40))
	}
	return s, cmd.Process.Pid, nil
}
