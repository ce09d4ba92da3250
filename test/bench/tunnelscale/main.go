// Command tunnelscale measures agent tunnels at fleet scale on real servers on loopback: a
// host kube-apiserver with mount-apiserver (the built binary, its own process, on an etcd
// process of its own) aggregated into it, a target kube-apiserver, and a separate process
// (this binary, "tunnelscale agents") that runs thousands of real agents (pkg/tunnel/agent,
// the code of cmd/mount-agent), each attached to its own tunnel Mount with its own
// ServiceAccount token, through the host's aggregator as artifacts/agent deploys them.
//
// For each number of sessions (-sessions) it reports, once every agent is attached and every
// Mount Ready: mount-apiserver's RSS, Go heap and goroutines, its idle CPU (the agents' pings,
// the re-checks of their credentials and permission, the status controller's probes through
// every tunnel) over -window, and the host API calls by kind per second in that window; the
// growth per session between the figures; the p50 of a proxied GET through one tunnel with
// one session held and with all held. Then (-storm) it kills mount-apiserver holding all
// sessions and starts it again: the time until every agent is attached again and every Mount
// Ready, the peak RSS, the error lines in its log and the host API calls by kind per second.
//
// With -replicas 3 it runs three replicas on one etcd behind a forwarder (the Service), the
// agents spread over them, kills one (-failover) and reports the time until a GET through
// each remaining replica reaches every agent of the killed one again.
//
// The bench raises its limit of open files (setrlimit RLIMIT_NOFILE to fs.nr_open); the
// servers and the agents inherit it.
//
//	go run ./test/bench/tunnelscale [-sessions 1,100,1000,10000] [-window 2m] [-storm] [-replicas 1]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/test/bench/measure"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

type config struct {
	levels        []int
	window        time.Duration
	settle        time.Duration
	requests      int
	storm         bool
	replicas      int
	failover      string
	viaAggregator bool
	serverFlags   []string
	serverEnv     []string
	serverBin     string
	keep          bool
	sessions      int
	silence       time.Duration
	profiles      string
	ramp          float64
	agentBindings bool
	agentsNice    int
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agents" {
		if err := runAgents(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "floor" {
		if err := runFloor(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	var c config
	levels := flag.String("sessions", "1,100,1000,10000", "numbers of sessions to measure at, ascending")
	flag.DurationVar(&c.window, "window", 2*time.Minute, "how long to measure idle CPU and host API calls at each number of sessions (the re-checks run every minute)")
	flag.DurationVar(&c.settle, "settle", 30*time.Second, "how long to wait after every agent is attached and every Mount Ready before measuring")
	flag.IntVar(&c.requests, "requests", 2000, "proxied GETs through one tunnel at the first and the last number of sessions")
	flag.BoolVar(&c.storm, "storm", true, "kill and restart mount-apiserver holding the last number of sessions")
	flag.IntVar(&c.replicas, "replicas", 1, "mount-apiserver replicas (on one etcd, behind a forwarder standing in for the Service)")
	flag.StringVar(&c.failover, "failover", "kill", "with -replicas > 1: how one replica fails: kill (SIGKILL: its connections are reset) or stop (SIGSTOP: it goes silent, as a node that vanished)")
	flag.BoolVar(&c.viaAggregator, "via-aggregator", false, "agents attach through the host's aggregator (as artifacts/agent deploys them) instead of to mount-apiserver directly; the host kube-apiserver then holds two descriptors per agent, which the limit of open files bounds")
	flag.IntVar(&c.sessions, "sessions-per-agent", 1, "sessions each agent holds (2: to two replicas at once)")
	flag.DurationVar(&c.silence, "agent-silence-timeout", agent.DefaultSilenceTimeout, "how long an agent's session may go without the hub's pong before it attaches again (mount-agent --hub-silence-timeout; remotedialer alone: 60s)")
	serverFlags := flag.String("server-flags", "", "extra flags for mount-apiserver, space separated")
	serverEnv := flag.String("server-env", "", "extra environment of mount-apiserver only, NAME=value space separated (e.g. GOMEMLIMIT=1400MiB)")
	flag.StringVar(&c.serverBin, "server-binary", "", "mount-apiserver binary to run (default: built from ./cmd/mount-apiserver)")
	flag.BoolVar(&c.keep, "keep", false, "keep the directory with the logs")
	flag.Float64Var(&c.ramp, "ramp", 0, "new agents started per second at each number of sessions, as a fleet rolls out (0: all at once, an attach storm: 9,000 at once overloaded this machine's host, whose timed-out re-checks then closed sessions)")
	flag.BoolVar(&c.agentBindings, "agent-bindings", false, "give each agent a ClusterRole and a binding of its own on the host (resourceNames: its Mount), instead of one binding for the agents' namespace and each Mount naming its agent (spec.tunnel.agentUser); the host's RBAC walks every binding on every request")
	flag.IntVar(&c.agentsNice, "agents-nice", 0, "niceness of the simulators of the agents past the first number of sessions (e.g. 19: a fleet's agents do not share the hub's cores; the timed tunnel's agent keeps a simulator of normal priority)")
	flag.StringVar(&c.profiles, "profiles", "", "directory to write profiles of each replica to: CPU and allocations over each idle window, heap at its end (cpu-<sessions>-<replica>.pprof, allocs-..., heap-...; go tool pprof -top reads them); in a storm the restarted replica's CPU over the first window after its restart (cpu-storm-<sessions>.pprof) and its allocations since (allocs-storm-<sessions>.pprof)")
	flag.Parse()
	for _, s := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "-sessions: %q\n", s)
			os.Exit(2)
		}
		c.levels = append(c.levels, n)
	}
	c.serverFlags = strings.Fields(*serverFlags)
	c.serverEnv = strings.Fields(*serverEnv)
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// bench is the running set-up.
type bench struct {
	c      config
	dir    string
	host   *framework.KubeAPIServer
	remote *framework.KubeAPIServer
	etcd   *framework.EtcdProcess
	hubs   []*hubProcess
	fwd    *framework.Forwarder
	fleet  *fleet
	agents *agentsPool
	// fileLimit is the limit of open files of every process.
	fileLimit uint64

	// bencher may do anything on the host and the target; admin is the host's admin.
	bencher, admin *rest.Config
	hostClient     *http.Client
}

func run(c config) error {
	ctx := klog.NewContext(context.Background(), klog.Background())
	limit, err := raiseFileLimit()
	if err != nil {
		return err
	}
	b := &bench{c: c, fileLimit: limit}
	if b.dir, err = os.MkdirTemp("", "mount-tunnelscale-"); err != nil {
		return err
	}
	if c.keep {
		fmt.Println("directory:", b.dir)
	} else {
		defer os.RemoveAll(b.dir)
	}
	defer b.stop()
	fmt.Printf("limit of open files: %d per process (setrlimit RLIMIT_NOFILE raised as far as allowed; the servers and the agents inherit it); %d CPUs; load average %s\n", limit, numCPU(), loadAverage())
	if err := b.setUp(ctx); err != nil {
		return err
	}
	return b.measure(ctx)
}

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(data), "\nprocessor") + 1
}

func (b *bench) stop() {
	if b.agents != nil {
		b.agents.quit()
	}
	for _, h := range b.hubs {
		if h.cmd != nil {
			_ = h.cmd.Process.Signal(syscall.SIGCONT)
			h.kill()
		}
	}
	if b.fwd != nil {
		b.fwd.Close()
	}
	if b.etcd != nil {
		b.etcd.Kill()
	}
	if b.remote != nil {
		b.remote.Stop()
	}
	if b.host != nil {
		b.host.Stop()
	}
}

func (b *bench) setUp(ctx context.Context) error {
	var err error
	mk := func(name string) string {
		d := filepath.Join(b.dir, name)
		_ = os.MkdirAll(d, 0o700)
		return d
	}
	if b.host, err = framework.StartKubeAPIServer(ctx, mk("host")); err != nil {
		return err
	}
	if b.remote, err = framework.StartKubeAPIServer(ctx, mk("target")); err != nil {
		return err
	}
	if b.etcd, err = framework.NewEtcdProcess(mk("etcd")); err != nil {
		return err
	}
	if err := b.etcd.Start(ctx); err != nil {
		return err
	}
	bin := b.c.serverBin
	if bin == "" {
		if bin, err = framework.BuildMountAPIServer(); err != nil {
			return err
		}
		defer framework.RemoveBuilds()
	}

	// The aggregator reaches the replicas through a forwarder, as through a Service.
	if b.fwd, err = framework.StartForwarder(); err != nil {
		return err
	}
	kubeconfig, err := framework.ApplyBundle(ctx, b.host, b.fwd.Port())
	if err != nil {
		return err
	}
	// One serving CA for all replicas, as a Deployment mounting one Secret has.
	shared := mk("pki")
	hosts := append([]string{"localhost"}, options.DefaultServingCertHosts...)
	if _, err := pki.Ensure(shared, hosts, []net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return err
	}
	var backends []string
	for i := range b.c.replicas {
		port, err := framework.FreePort()
		if err != nil {
			return err
		}
		root := mk(fmt.Sprintf("replica-%d", i+1))
		if err := framework.CopyDir(shared, filepath.Join(root, "pki")); err != nil {
			return err
		}
		args := []string{"--kubeconfig", kubeconfig, "--apiservice-name", framework.APIServiceName,
			"--etcd-servers", b.etcd.ClientURL, "--tunnel-replica-name", fmt.Sprintf("replica-%d", i+1),
			"--tunnel-peer-server-name", options.DefaultServingCertHosts[0], "--audit-log-path", ""}
		h := &hubProcess{bin: bin, root: root, port: port, logPath: filepath.Join(b.dir, fmt.Sprintf("replica-%d.log", i+1)), args: append(args, b.c.serverFlags...), env: b.c.serverEnv}
		b.hubs = append(b.hubs, h)
		backends = append(backends, "127.0.0.1:"+strconv.Itoa(port))
	}
	b.fwd.SetBackends(backends...)
	for _, h := range b.hubs {
		if err := h.start(ctx); err != nil {
			return err
		}
	}
	if err := framework.WaitAPIServiceAvailable(ctx, b.host); err != nil {
		return err
	}

	// The target lets the mounts' credentials impersonate; "bencher" may do anything on
	// both; the host holds the target's kubeconfig for the Mounts.
	lender, err := b.remote.UserConfig("mount-lender")
	if err != nil {
		return err
	}
	if err := grant(ctx, b.remote, "mount-lender", "", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
	}); err != nil {
		return err
	}
	for _, k := range []*framework.KubeAPIServer{b.host, b.remote} {
		if err := grant(ctx, k, "bencher", "cluster-admin", nil); err != nil {
			return err
		}
	}
	if b.bencher, err = b.host.UserConfig("bencher"); err != nil {
		return err
	}
	b.admin = b.host.AdminConfig
	if b.hostClient, err = rest.HTTPClientFor(b.admin); err != nil {
		return err
	}
	data, err := framework.KubeconfigBytes(lender)
	if err != nil {
		return err
	}
	if _, err := b.host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := b.host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Data: map[string][]byte{"kubeconfig": data}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if b.fleet, err = newFleet(ctx, b.admin, b.hubs[0].config(b.admin), b.c.agentBindings); err != nil {
		return err
	}

	// The agents attach to the replicas directly, through a forwarder in each simulator when
	// there are several, or through the host's aggregator (-via-aggregator).
	ca := b.hubs[0].ca
	args := []string{"-target", strings.TrimPrefix(b.remote.URL, "https://"), "-sessions-per-agent", strconv.Itoa(b.c.sessions), "-hub-silence-timeout", b.c.silence.String()}
	switch {
	case b.c.viaAggregator:
		ca = b.host.ClientCA.CertPEM
		args = append(args, "-hub", b.host.URL)
	case len(b.hubs) == 1:
		args = append(args, "-hub", b.hubs[0].url())
	default:
		args = append(args, "-backends", strings.Join(backends, ","))
	}
	caFile := filepath.Join(b.dir, "hub-ca.crt")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		return err
	}
	// Each agent holds a descriptor per session, one per connection to its target, and with
	// several replicas two of its simulator's forwarder.
	perAgent := uint64(2*b.c.sessions + 1)
	if len(b.hubs) > 1 && !b.c.viaAggregator {
		perAgent += uint64(2 * b.c.sessions)
	}
	perProcess := int((b.fileLimit - 1000) / perAgent)
	b.agents = newAgentsPool(b.dir, min(perProcess, 5000), append(args, "-ca", caFile)...)
	fmt.Printf("agents: at most %d per simulator process; attaching %s\n", min(perProcess, 5000), map[bool]string{true: "through the host's aggregator", false: "to mount-apiserver directly (ServiceAccount tokens reviewed by the host)"}[b.c.viaAggregator])
	return nil
}

// grant binds user to role, or to a new ClusterRole of rules named after the user.
func grant(ctx context.Context, k *framework.KubeAPIServer, user, role string, rules []rbacv1.PolicyRule) error {
	if role == "" {
		role = user
		if _, err := k.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	_, err := k.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}, metav1.CreateOptions{})
	return err
}

// figures are one replica's at one number of sessions.
type figures struct {
	sessions   int
	rss, anon  int // KiB
	heap       float64
	stacks     float64
	goroutines float64
	cpu        float64 // share of one core
	load       string
}

func (b *bench) measure(ctx context.Context) error {
	var all []figures
	var first time.Duration
	for li, n := range b.c.levels {
		fmt.Printf("\n== %d sessions (%d replica(s))\n", n, len(b.hubs))
		start := time.Now()
		added, err := b.fleet.grow(ctx, n)
		if err != nil {
			return err
		}
		fmt.Printf("created %d agents (ServiceAccount, Mount, token; with -agent-bindings a ClusterRole and binding each) in %v\n", len(added), time.Since(start).Round(time.Second))
		attachStart := time.Now()
		for _, i := range added {
			if err := b.agents.add(agentName(i), b.fleet.tokens[i]); err != nil {
				return err
			}
			if b.c.ramp > 0 {
				time.Sleep(time.Duration(float64(time.Second) / b.c.ramp))
			}
		}
		// A loaded 2-core host reviews about 10 attaches a second once it holds thousands of
		// agents' RBAC bindings.
		if err := b.waitAttached(ctx, n, attachStart, max(15*time.Minute, time.Duration(len(added))*time.Second/5)); err != nil {
			return err
		}
		fmt.Printf("all %d agents attached and their Mounts Ready %v after the new agents started\n", n, time.Since(attachStart).Round(100*time.Millisecond))
		time.Sleep(b.c.settle)
		f, err := b.idle(ctx, n)
		if err != nil {
			return err
		}
		all = append(all, f...)
		if li == 0 {
			b.agents.lowerPriority(b.c.agentsNice)
		}
		if b.c.requests > 0 && (li == 0 || li == len(b.c.levels)-1) {
			p50, p99, err := b.timeGets(n)
			if err != nil {
				// A loaded host times out the review of a request now and then: say so, and
				// go on to what comes next.
				fmt.Printf("proxied GET through one tunnel: %v (load %s)\n", err, loadAverage())
				continue
			}
			line := fmt.Sprintf("proxied GET through one tunnel, %d sequential: p50 %v p99 %v (load %s)", b.c.requests, p50.Round(time.Microsecond), p99.Round(time.Microsecond), loadAverage())
			if li == 0 {
				first = p50
			} else {
				line += fmt.Sprintf("; p50 %.2fx of that with %d session(s)", float64(p50)/float64(first), b.c.levels[0])
			}
			fmt.Println(line)
		}
	}
	if len(b.hubs) == 1 {
		growth(all)
	}
	n := b.c.levels[len(b.c.levels)-1]
	if b.c.storm && len(b.hubs) == 1 {
		if err := b.stormRestart(ctx, n); err != nil {
			return err
		}
	}
	if len(b.hubs) > 1 {
		if err := b.failoverRun(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// waitAttached waits until the agents say the sessions of n Mounts are up and n Mounts are
// Ready with an agent reported connected (since since, if not zero).
// waitAttached waits until n agents hold their sessions and their Mounts are Ready, saying
// when the sessions were up and how busy the machine was until then.
func (b *bench) waitAttached(ctx context.Context, n int, start time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	cpu0 := machineCPU()
	var connected, ready int
	up := false
	for time.Now().Before(deadline) {
		_, connected, _ = b.agents.status()
		if connected >= n*b.c.sessions {
			if !up {
				up = true
				fmt.Printf("all %d sessions up %v after the new agents started; %s\n", n*b.c.sessions, time.Since(start).Round(100*time.Millisecond), machineCPU().since(cpu0))
			}
			var err error
			if ready, _, err = b.fleet.readiness(ctx, time.Time{}); err == nil && ready >= n {
				return nil
			}
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("after %v: %d of %d sessions up, %d Mounts Ready", timeout, connected, n*b.c.sessions, ready)
}

// idle measures every replica at rest with n sessions.
func (b *bench) idle(ctx context.Context, n int) ([]figures, error) {
	before, err := hostCalls(b.hostClient, b.host.URL)
	if err != nil {
		return nil, err
	}
	cpu0 := make([]time.Duration, len(b.hubs))
	for i, h := range b.hubs {
		if cpu0[i], err = cpuTime(h.pid()); err != nil {
			return nil, err
		}
	}
	start, procs0 := time.Now(), processCPU()
	profiled := b.profile(n)
	time.Sleep(b.c.window)
	elapsed, procs1 := time.Since(start), processCPU()
	if err := profiled(); err != nil {
		return nil, err
	}
	var out []figures
	for i, h := range b.hubs {
		cpu1, err := cpuTime(h.pid())
		if err != nil {
			return nil, err
		}
		f := figures{sessions: n, cpu: (cpu1 - cpu0[i]).Seconds() / elapsed.Seconds(), load: loadAverage()}
		m := readMemory(h.pid())
		f.rss, f.anon = m.rss, m.anon
		client, err := rest.HTTPClientFor(h.config(b.admin))
		if err != nil {
			return nil, err
		}
		sums, _, err := scrape(client, h.url()+"/metrics", []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes"}, "")
		if err != nil {
			return nil, err
		}
		f.goroutines, f.heap, f.stacks = sums["go_goroutines"], sums["go_memstats_heap_inuse_bytes"], sums["go_memstats_stack_inuse_bytes"]
		fmt.Printf("replica %d: RSS %.0f MiB (anonymous %.0f), Go heap in use %.0f MiB, stacks %.0f MiB, %0.f goroutines; idle CPU %.1f%% of one core over %v (load average %s)\n",
			i+1, mib(f.rss), mib(f.anon), f.heap/(1<<20), f.stacks/(1<<20), f.goroutines, 100*f.cpu, elapsed.Round(time.Second), f.load)
		out = append(out, f)
	}
	after, err := hostCalls(b.hostClient, b.host.URL)
	if err != nil {
		return nil, err
	}
	fmt.Printf("host API calls in that window: %s\n", rates(before, after, elapsed))
	fmt.Println(cpuPercents(procs0, procs1, b.processKind, elapsed))
	return out, nil
}

// profile starts CPU and allocation profiles of every replica over the idle window, if asked to, and
// returns what waits for them to be written. The profiler costs a little CPU of its own.
func (b *bench) profile(n int) func() error {
	if b.c.profiles == "" {
		return func() error { return nil }
	}
	errs := make(chan error, len(b.hubs))
	for i, h := range b.hubs {
		go func() {
			errs <- func() error {
				client, err := rest.HTTPClientFor(h.config(b.admin))
				if err != nil {
					return err
				}
				fetch := func(kind, query string) error {
					path := filepath.Join(b.c.profiles, fmt.Sprintf("%s-%d-%d.pprof", kind, n, i+1))
					if err := fetchProfile(client, h.url()+"/debug/pprof/"+query, path); err != nil {
						return fmt.Errorf("profiling replica %d: %w", i+1, err)
					}
					return nil
				}
				// What the window allocates (a delta profile) is what the garbage collector's
				// share of the idle CPU comes from.
				seconds := int(b.c.window.Seconds())
				allocs := make(chan error, 1)
				go func() { allocs <- fetch("allocs", fmt.Sprintf("allocs?seconds=%d", seconds)) }()
				if err := errors.Join(fetch("cpu", fmt.Sprintf("profile?seconds=%d", seconds)), <-allocs); err != nil {
					return err
				}
				if err := fetch("heap", "heap"); err != nil {
					return err
				}
				fmt.Printf("replica %d: CPU and allocation profiles of the window and a heap profile at its end in %s\n", i+1, b.c.profiles)
				return nil
			}()
		}()
	}
	return func() error {
		var all []error
		for range b.hubs {
			all = append(all, <-errs)
		}
		return errors.Join(all...)
	}
}

func fetchProfile(client *http.Client, url, path string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}

// growth prints what each session added between the numbers of sessions.
func growth(all []figures) {
	fmt.Println("\n== growth per session between the numbers of sessions (one replica)")
	for i := 1; i < len(all); i++ {
		a, z := all[i-1], all[i]
		d := float64(z.sessions - a.sessions)
		fmt.Printf("%d -> %d sessions: RSS %+.1f KiB, Go heap %+.1f KiB, stacks %+.1f KiB, %+.2f goroutines, CPU %+.4f%% of a core per session\n",
			a.sessions, z.sessions, float64(z.rss-a.rss)/d, (z.heap-a.heap)/1024/d, (z.stacks-a.stacks)/1024/d, (z.goroutines-a.goroutines)/d, 100*(z.cpu-a.cpu)/d)
	}
}

// timeGets times proxied GETs through the tunnel of agent 0 on the first replica.
func (b *bench) timeGets(n int) (time.Duration, time.Duration, error) {
	c, err := measure.Client(b.hubs[0].config(b.bencher))
	if err != nil {
		return 0, 0, err
	}
	url := b.hubs[0].url() + "/apis/mounts.kcp.io/v1alpha1/mounts/" + agentName(0) + "/proxy/api/v1/namespaces/default"
	samples, err := measure.TimeGets(c, url, b.c.requests)
	if err != nil {
		return 0, 0, err
	}
	return samples[len(samples)/2], samples[len(samples)*99/100], nil
}

// stormRestart kills the one replica holding n sessions and starts it again.
func (b *bench) stormRestart(ctx context.Context, n int) error {
	h := b.hubs[0]
	fmt.Printf("\n== reconnect storm: mount-apiserver holding %d sessions is killed (SIGKILL) and started again (load average %s)\n", n, loadAverage())
	logOffset := fileSize(h.logPath)
	before, err := hostCalls(b.hostClient, b.host.URL)
	if err != nil {
		return err
	}
	_, _, started0 := b.agents.status()
	cpu0, procs0 := machineCPU(), processCPU()
	killed := time.Now()
	h.kill()
	if err := h.start(ctx); err != nil {
		return err
	}
	readyAt := time.Since(killed)
	fmt.Printf("mount-apiserver ready again %v after the kill\n", readyAt.Round(100*time.Millisecond))
	stormProfile := b.stormCPUProfile(h, n)
	// The Mounts are watched from now on: when every one is Ready with its agent back is timed
	// as it happens, while the GETs below run.
	type watched struct {
		after time.Duration
		err   error
	}
	watchCtx, stopWatching := context.WithTimeout(ctx, 15*time.Minute-readyAt)
	defer stopWatching()
	allReady := make(chan watched, 1)
	go func() {
		after, err := b.fleet.waitReady(watchCtx, killed, n)
		allReady <- watched{after, err}
	}()
	// The peak RSS of the new process, sampled while it recovers.
	var peakRSS atomic.Int64
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if m := readMemory(h.pid()); int64(m.rss) > peakRSS.Load() {
				peakRSS.Store(int64(m.rss))
			}
			select {
			case <-sampling:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() { close(sampling); <-sampled }()
	var allAttached time.Duration
	for allAttached == 0 {
		if time.Since(killed) > 10*time.Minute {
			return fmt.Errorf("not all agents attached 10 minutes after the kill")
		}
		if _, connected, _ := b.agents.status(); connected >= n*b.c.sessions {
			allAttached = time.Since(killed)
			fmt.Printf("all %d sessions up again %v after the kill (the agents' count); %s\n", n*b.c.sessions, allAttached.Round(100*time.Millisecond), machineCPU().since(cpu0))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Up as the agents see it is not served as the hub sees it: a GET through every tunnel.
	names := make([]string, n)
	for i := range names {
		names[i] = agentName(i)
	}
	oks, codes, err := b.reach(b.hubs[:1], names, killed, 10*time.Minute, nil)
	if err != nil {
		return err
	}
	fmt.Printf("a GET through every one of the %d tunnels answered 200 %v after the kill (%s; answers meanwhile: %v)\n", n, oks[len(oks)-1].Round(100*time.Millisecond), quantiles(oks), codes)
	ready := <-allReady
	if ready.err != nil {
		return fmt.Errorf("not all Mounts Ready with an agent connected since the kill 15 minutes after it: %w", ready.err)
	}
	fmt.Printf("all %d Mounts Ready with an agent connected since the kill %v after the kill (watched as they changed)\n", n, ready.after.Round(100*time.Millisecond))
	// Recovered: the sessions, the GETs and the Mounts all done.
	recovered := time.Since(killed)
	after, err := hostCalls(b.hostClient, b.host.URL)
	if err != nil {
		return err
	}
	_, _, started1 := b.agents.status()
	m := readMemory(h.pid())
	fmt.Printf("recovered (sessions, GETs and Mounts) %v after the kill; sessions started meanwhile %d (%.2f per agent); %s\n", recovered.Round(100*time.Millisecond), started1-started0, float64(started1-started0)/float64(n*b.c.sessions), machineCPU().since(cpu0))
	fmt.Printf("mount-apiserver RSS: peak %.0f MiB (VmHWM of the new process), now %.0f MiB\n", mib(max(int(peakRSS.Load()), m.hwm)), mib(m.rss))
	fmt.Printf("host API calls from the kill to recovery (%v): %s\n", recovered.Round(time.Second), rates(before, after, recovered))
	procs1 := processCPU()
	fmt.Println(cpuShares(procs0, procs1, b.processKind, started1-started0, "session started"))
	fmt.Println(cpuFloor(procs0, procs1, b.processKind, recovered))
	fmt.Print(logSummary(h.logPath, logOffset))
	if err := stormProfile(); err != nil {
		return err
	}
	if b.c.profiles != "" {
		// The new process's allocations since it started are the storm's: what its collector
		// worked through.
		path, err := b.replicaProfile(h, "allocs", fmt.Sprintf("allocs-storm-%d.pprof", n))
		if err != nil {
			return fmt.Errorf("profiling the restarted replica: %w", err)
		}
		fmt.Printf("the restarted replica's allocations since it started: %s\n", path)
	}
	return nil
}

// stormCPUProfile starts a CPU profile of the restarted replica over the first window after
// its restart (cpu-storm-<n>.pprof), if asked to, and returns what waits for it.
func (b *bench) stormCPUProfile(h *hubProcess, n int) func() error {
	if b.c.profiles == "" {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			path, err := b.replicaProfile(h, fmt.Sprintf("profile?seconds=%d", int(b.c.window.Seconds())), fmt.Sprintf("cpu-storm-%d.pprof", n))
			if err != nil {
				return fmt.Errorf("profiling the restarted replica's CPU: %w", err)
			}
			fmt.Printf("the restarted replica's CPU over the first %v after its restart: %s\n", b.c.window, path)
			return nil
		}()
	}()
	return func() error { return <-done }
}

// replicaProfile writes the replica's /debug/pprof/<query> to file in the profiles directory
// and returns its path.
func (b *bench) replicaProfile(h *hubProcess, query, file string) (string, error) {
	client, err := rest.HTTPClientFor(h.config(b.admin))
	if err != nil {
		return "", err
	}
	path := filepath.Join(b.c.profiles, file)
	return path, fetchProfile(client, h.url()+"/debug/pprof/"+query, path)
}

// processKind names what a process of the bench is, for cpuShares.
func (b *bench) processKind(pid int, comm string) string {
	switch {
	case pid == os.Getpid():
		return "the bench (the host's embedded etcd, its GETs and checks)"
	case pid == b.host.Pid():
		return "host kube-apiserver"
	case pid == b.remote.Pid():
		return "target kube-apiserver"
	case b.etcd != nil && pid == b.etcd.Pid():
		return kindReplica + "'s etcd"
	case comm == "tunnelscale":
		return kindAgents
	}
	for i, h := range b.hubs {
		if h.cmd != nil && h.cmd.Process != nil && pid == h.pid() {
			if len(b.hubs) > 1 {
				return fmt.Sprintf("%s replica %d", kindReplica, i+1)
			}
			return kindReplica
		}
	}
	return comm
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// logSummary counts the error and warning lines of a klog log from offset, with the most
// frequent messages.
func logSummary(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error() + "\n"
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return err.Error() + "\n"
	}
	data, _ := io.ReadAll(f)
	lines := strings.Split(string(data), "\n")
	counts := map[byte]int{}
	messages := map[string]int{}
	for _, l := range lines {
		if len(l) < 2 {
			continue
		}
		counts[l[0]]++
		if l[0] == 'E' || l[0] == 'W' {
			msg := l
			if i := strings.Index(l, "] "); i >= 0 {
				msg = l[i+2:]
			}
			if len(msg) > 240 {
				msg = msg[:240]
			}
			messages[string(l[0])+" "+msg]++
		}
	}
	type mc struct {
		m string
		c int
	}
	var top []mc
	for m, c := range messages {
		top = append(top, mc{m, c})
	}
	slices.SortFunc(top, func(a, b mc) int { return b.c - a.c })
	var sb strings.Builder
	fmt.Fprintf(&sb, "its log since the restart: %d lines, %d error (E), %d warning (W), %d info (I)\n", len(lines), counts['E'], counts['W'], counts['I'])
	for i, t := range top {
		if i == 5 {
			break
		}
		fmt.Fprintf(&sb, "  %6d x %s\n", t.c, t.m)
	}
	return sb.String()
}

// waitHTTP polls until get answers 200.
func waitHTTP(ctx context.Context, c *http.Client, url string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := c.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}
