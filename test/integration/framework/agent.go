package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

var (
	agentBuildOnce sync.Once
	agentBuilt     string
	agentBuildErr  error
)

// BuildAgent builds ./cmd/mount-agent once per test process and returns its path.
func BuildAgent() (string, error) {
	agentBuildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mount-agent-bin-")
		if err != nil {
			agentBuildErr = err
			return
		}
		out := filepath.Join(dir, "mount-agent")
		cmd := exec.Command("go", "build", "-o", out, "github.com/kcp-dev/mount-apiserver/cmd/mount-agent")
		if output, err := cmd.CombinedOutput(); err != nil {
			agentBuildErr = fmt.Errorf("go build: %w\n%s", err, output)
			return
		}
		agentBuilt = out
	})
	return agentBuilt, agentBuildErr
}

// AgentProcess is a mount-agent process, in a network namespace (or on the host for a nil
// one), that tests kill and start again with the same arguments.
type AgentProcess struct {
	ns      *Netns
	bin     string
	args    []string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartAgent builds mount-agent and starts it in ns with args; t.Cleanup kills it, and shows
// its log when the test failed.
func StartAgent(t testing.TB, ns *Netns, args ...string) *AgentProcess {
	t.Helper()
	a, err := RunAgent(ns, filepath.Join(t.TempDir(), "mount-agent.log"), args...)
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

// RunAgent builds mount-agent and starts it in ns with args, its output in logPath. The
// caller kills it.
func RunAgent(ns *Netns, logPath string, args ...string) (*AgentProcess, error) {
	bin, err := BuildAgent()
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
