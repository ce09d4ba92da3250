package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// The agent simulator is this binary run as "tunnelscale agents": many real agents
// (pkg/tunnel/agent, the code of cmd/mount-agent) in one process, each with its own Mount and
// its own hub credentials. It reads commands on standard input, one per line, and answers
// "status" on standard output:
//
//	add <mount> <token>   start the agent of <mount>, attaching with the bearer token <token>
//	status                print "status <agents> <connected> <sessions started>"
//	quit                  stop every agent and exit
//
// Its log (klog, every agent's) goes to -log.
type simulator struct {
	hub        string
	ca         []byte
	target     string
	maxBackoff time.Duration
	silence    time.Duration
	sessions   int

	ctx    context.Context
	mu     sync.Mutex
	agents []*agent.Agent
	wg     sync.WaitGroup
	// started counts the sessions established, reconnects included.
	started atomic.Int64
}

func runAgents(args []string) error {
	fs := flag.NewFlagSet("agents", flag.ExitOnError)
	hub := fs.String("hub", "", "URL the agents attach through (the host kube-apiserver, or mount-apiserver itself)")
	backends := fs.String("backends", "", "host:port of mount-apiserver replicas, comma separated: the agents attach through a forwarder of this process to them (round robin, a dead one skipped), as through a Service; -hub is then ignored")
	caFile := fs.String("ca", "", "CA bundle that verifies -hub")
	target := fs.String("target", "", "host:port every agent dials for the hub")
	logFile := fs.String("log", "", "file for the agents' log")
	maxBackoff := fs.Duration("max-backoff", agent.DefaultMaxBackoff, "the agents' longest wait between attempts")
	sessions := fs.Int("sessions-per-agent", 1, "sessions each agent holds (2: to two replicas at once)")
	silence := fs.Duration("hub-silence-timeout", agent.DefaultSilenceTimeout, "how long an agent's session may go without the hub's pong")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		return err
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	if *logFile != "" {
		_ = klogFlags.Set("logtostderr", "false")
		_ = klogFlags.Set("log_file", *logFile)
		_ = klogFlags.Set("one_output", "true")
	}
	defer klog.Flush()
	tunnel.BridgeLogrus(klog.Background())
	if *backends != "" {
		fwd, err := framework.StartForwarder()
		if err != nil {
			return err
		}
		defer fwd.Close()
		all := strings.Split(*backends, ",")
		fwd.SetBackends(all...)
		*hub = "https://" + fwd.Addr()
		stopProbes := probeReadiness(fwd, all, ca)
		defer stopProbes()
	}
	s := &simulator{hub: *hub, ca: ca, target: *target, maxBackoff: *maxBackoff, silence: *silence, sessions: *sessions}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	defer cancel()
	s.ctx = ctx

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "add":
			if len(f) != 3 {
				return fmt.Errorf("add wants a mount and a token: %q", in.Text())
			}
			if err := s.add(f[1], f[2]); err != nil {
				return err
			}
		case "status":
			n, connected := s.status()
			fmt.Fprintf(out, "status %d %d %d\n", n, connected, s.started.Load())
			_ = out.Flush()
		case "quit":
			cancel()
			s.wg.Wait()
			return nil
		default:
			return fmt.Errorf("unknown command %q", in.Text())
		}
	}
	cancel()
	s.wg.Wait()
	return in.Err()
}

// add starts the agent of mount, attaching with token; with -sessions-per-agent 2, two
// agents of mount (two sessions, as one agent holding two would): through the forwarder's
// round robin they attach to different replicas.
func (s *simulator) add(mount, token string) error {
	hub := &rest.Config{Host: s.hub, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca}}
	attach, err := agent.AttachURL(s.hub, "", mount)
	if err != nil {
		return err
	}
	for range max(s.sessions, 1) {
		a, err := agent.New(&agent.Config{Hub: hub, AttachURL: attach, Mount: mount, Target: s.target, MaxBackoff: s.maxBackoff, SilenceTimeout: s.silence,
			OnSession: func() { s.started.Add(1) }})
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.agents = append(s.agents, a)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = a.Run(s.ctx)
		}()
	}
	return nil
}

// status is the number of agents and of those with a session up (sessions, with
// -sessions-per-agent 2).
func (s *simulator) status() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	connected := 0
	for _, a := range s.agents {
		if a.Connected() {
			connected++
		}
	}
	return len(s.agents), connected
}

// agentsPool is the simulators as the bench sees them: processes of at most perProcess agents
// each (every agent holds a descriptor for its session and one for each connection to its
// target, and a process may not open more than the limit of open files).
type agentsPool struct {
	args       []string
	dir        string
	perProcess int
	procs      []*agentsProcess
	added      int
	// nice is the niceness of the simulators started after lowerPriority; 0 before.
	nice int
}

// agentsProcess is one simulator process.
type agentsProcess struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	mu    sync.Mutex
	done  chan struct{}
	added int
}

func newAgentsPool(dir string, perProcess int, args ...string) *agentsPool {
	return &agentsPool{dir: dir, perProcess: perProcess, args: args}
}

// lowerPriority runs the agents added from now on in simulators of their own under nice: the
// agents of a fleet run on machines of their own, not on the hub's cores, and the tunnel the
// bench times (agent 0's) stays in a simulator of normal priority.
func (a *agentsPool) lowerPriority(nice int) {
	if nice == 0 || a.nice == nice {
		return
	}
	a.nice = nice
	if n := len(a.procs); n > 0 {
		a.procs[n-1].added = a.perProcess
	}
}

// startAgents runs this binary as a simulator with args, under nice(1) if nice is not 0 (so
// that every thread of the Go runtime has it: Linux keeps niceness per thread).
func startAgents(logPath string, nice int, args []string) (*agentsProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	argv := append([]string{self, "agents", "-log", logPath}, args...)
	if nice != 0 {
		argv = append([]string{"nice", "-n", strconv.Itoa(nice)}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &agentsProcess{cmd: cmd, in: in, out: bufio.NewReader(out), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// add starts the agent of mount in a simulator with room for it.
func (a *agentsPool) add(mount, token string) error {
	if len(a.procs) == 0 || a.procs[len(a.procs)-1].added >= a.perProcess {
		p, err := startAgents(filepath.Join(a.dir, fmt.Sprintf("agents-%d.log", len(a.procs)+1)), a.nice, a.args)
		if err != nil {
			return err
		}
		a.procs = append(a.procs, p)
	}
	p := a.procs[len(a.procs)-1]
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Fprintf(p.in, "add %s %s\n", mount, token); err != nil {
		return err
	}
	p.added++
	a.added++
	return nil
}

// status is the number of agents, of those attached, and of sessions started so far, over
// every simulator.
func (a *agentsPool) status() (agents, connected, started int) {
	for _, p := range a.procs {
		n, c, s := p.status()
		agents, connected, started = agents+n, connected+c, started+s
	}
	return agents, connected, started
}

func (a *agentsPool) quit() {
	for _, p := range a.procs {
		p.quit()
	}
}

func (p *agentsProcess) status() (agents, connected, started int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Fprintln(p.in, "status"); err != nil {
		return 0, 0, 0
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		return 0, 0, 0
	}
	_, _ = fmt.Sscanf(line, "status %d %d %d", &agents, &connected, &started)
	return agents, connected, started
}

func (p *agentsProcess) quit() {
	p.mu.Lock()
	_, _ = fmt.Fprintln(p.in, "quit")
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// probeReadiness keeps the forwarder's backends to the replicas that answer /readyz, as a
// Service's endpoints follow its pods' readiness with Kubernetes' defaults (a probe every
// 10 s, 1 s to answer, out after 3 failures, back after 1 success): a replica that went
// silent keeps its endpoint, and gets new connections, for about 30 s.
func probeReadiness(fwd *framework.Forwarder, backends []string, ca []byte) (stop func()) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	done := make(chan struct{})
	go func() {
		failures := map[string]int{}
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var ready []string
			for _, b := range backends {
				resp, err := client.Get("https://" + b + "/readyz")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err == nil && resp.StatusCode < 400 {
					failures[b] = 0
				} else {
					failures[b]++
				}
				if failures[b] < 3 {
					ready = append(ready, b)
				}
			}
			fwd.SetBackends(ready...)
		}
	}()
	return func() { close(done) }
}
