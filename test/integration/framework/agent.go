package framework

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// BuildAgent builds ./cmd/mount-agent once per test process and returns its path.
func BuildAgent(t testing.TB) string {
	t.Helper()
	bin, err := BuildAgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// BuildAgentBinary is BuildAgent for callers without a testing.TB (benchmarks).
func BuildAgentBinary() (string, error) {
	return buildCommand("github.com/kcp-dev/mount-apiserver/cmd/mount-agent", "mount-agent")
}

// Agent is a mount-agent running as its own process, serving /healthz, /readyz and
// /metrics on Health (127.0.0.1).
type Agent struct {
	Cmd    *exec.Cmd
	Health string
	log    string
	done   chan struct{}
}

// StartAgent runs mount-agent with the hub kubeconfig for mount, dialing target
// (host:port), plus args; it is killed at the end of the test, and its log shown if the test
// failed.
func StartAgent(t testing.TB, hubKubeconfig, mount, target string, args ...string) *Agent {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.CreateTemp(t.TempDir(), "mount-agent-*.log")
	if err != nil {
		t.Fatal(err)
	}
	health := "127.0.0.1:" + strconv.Itoa(port)
	args = append([]string{"--hub-kubeconfig", hubKubeconfig, "--mount", mount, "--target", target,
		"--health-bind-address", health, "--max-backoff", "1s", "-v=2"}, args...)
	cmd := exec.Command(BuildAgent(t), args...)
	// A test that panics (its timeout) skips its cleanups: the process must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &Agent{Cmd: cmd, log: logFile.Name(), Health: health, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logFile.Close(); close(a.done) }()
	t.Cleanup(func() {
		a.Kill()
		if t.Failed() {
			t.Logf("mount-agent %s log:\n%s", mount, a.Log())
		}
	})
	return a
}

// Kill kills the agent (SIGKILL) and waits for it.
func (a *Agent) Kill() {
	_ = a.Cmd.Process.Kill()
	<-a.done
}

// Terminate sends SIGTERM and waits for the agent to exit.
func (a *Agent) Terminate() error {
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	<-a.done
	return nil
}

// Log is the agent's output so far.
func (a *Agent) Log() string {
	data, _ := os.ReadFile(a.log)
	return string(data)
}

// Ready says whether the agent holds a session (/readyz).
func (a *Agent) Ready() bool {
	resp, err := http.Get("http://" + a.Health + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Metric returns the value of series (name and labels as exposed) on the agent's /metrics,
// "" when it is not there.
func (a *Agent) Metric(t testing.TB, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + a.Health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// AgentProcess is a mount-agent process in a network namespace (or on the host for a nil
// one) that tests kill and start again with the same arguments; unlike Agent, its health
// address is the caller's to choose (inside a namespace the host cannot reach it).
type AgentProcess struct {
	ns      *Netns
	bin     string
	args    []string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartAgentIn builds mount-agent and starts it in ns with args (all its flags); t.Cleanup kills it, and shows
// its log when the test failed.
func StartAgentIn(t testing.TB, ns *Netns, args ...string) *AgentProcess {
	t.Helper()
	a, err := RunAgentIn(ns, filepath.Join(t.TempDir(), "mount-agent.log"), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Kill()
		if t.Failed() {
			t.Logf("mount-agent %v log (tail):\n%s", args, tail(a.Log(), 60))
		}
	})
	return a
}

// RunAgentIn builds mount-agent and starts it in ns with args, its output in logPath. The
// caller kills it.
func RunAgentIn(ns *Netns, logPath string, args ...string) (*AgentProcess, error) {
	bin, err := BuildAgentBinary()
	if err != nil {
		return nil, fmt.Errorf("building mount-agent: %w", err)
	}
	a := &AgentProcess{ns: ns, bin: bin, args: args, logPath: logPath}
	if err := a.Start(); err != nil {
		return nil, err
	}
	return a, nil
}

// Start starts the agent (again); its output is appended to its log.
func (a *AgentProcess) Start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	logFile, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := a.ns.Command(a.bin, a.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting mount-agent: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	a.cmd, a.exited = cmd, exited
	return nil
}

// Kill SIGKILLs the agent, as a crash or a lost node would, and waits until it is gone.
func (a *AgentProcess) Kill() {
	a.signal(syscall.SIGKILL)
}

// Stop SIGTERMs the agent and waits until it has exited.
func (a *AgentProcess) Stop() {
	a.signal(syscall.SIGTERM)
}

func (a *AgentProcess) signal(sig syscall.Signal) {
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	a.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	<-exited
}

// Log returns the agent's output so far, of every start.
func (a *AgentProcess) Log() string {
	data, _ := os.ReadFile(a.logPath)
	return string(data)
}
