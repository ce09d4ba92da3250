package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuTime is the CPU time (user and system) pid has used so far.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (in parentheses, may hold spaces): utime is the 14th
	// field of the line, stime the 15th.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// memory is what /proc/<pid>/status says of a process's memory, in KiB.
type memory struct {
	rss, hwm, anon int
}

func readMemory(pid int) memory {
	var m memory
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{-1, -1, -1}
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "VmRSS:":
			m.rss = v
		case "VmHWM:":
			m.hwm = v
		case "RssAnon:":
			m.anon = v
		}
	}
	return m
}

func mib(kib int) float64 { return float64(kib) / 1024 }

// cpuTicks is the machine's CPU time from /proc/stat: busy and all, in clock ticks.
type cpuTicks struct{ busy, all uint64 }

// machineCPU reads the machine's CPU time so far; zero when /proc/stat cannot be read.
func machineCPU() cpuTicks {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return cpuTicks{}
	}
	var t cpuTicks
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTicks{}
		}
		// guest and guest_nice (the 9th and 10th) are already counted in user and nice.
		if i >= 8 {
			break
		}
		t.all += v
		if i != 3 && i != 4 { // idle, iowait
			t.busy += v
		}
	}
	return t
}

// since says how busy the machine's cores were from t0 to t: the floor of any rate of this
// machine is set by what is left.
func (t cpuTicks) since(t0 cpuTicks) string {
	if t.all <= t0.all {
		return "machine CPU unknown"
	}
	return fmt.Sprintf("the machine's %d cores were %.0f%% busy meanwhile", runtime.NumCPU(), 100*float64(t.busy-t0.busy)/float64(t.all-t0.all))
}

// loadAverage is the first figure of /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:3], " ")
}

// raiseFileLimit lifts this process's limit of open files as far as it may (children inherit
// it): to fs.nr_open with CAP_SYS_RESOURCE, else the soft limit to the hard one. It returns
// the limit in effect.
func raiseFileLimit() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if data, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64); err == nil && v > rl.Max {
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: v, Max: v}) == nil {
				return v, nil
			}
		}
	}
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	return rl.Max, nil
}

// scrape reads a /metrics endpoint and returns the samples whose name is in names, summed over
// their labels, and the samples of family (if not empty), by their labels.
func scrape(client *http.Client, url string, names []string, family string) (map[string]float64, map[string]float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	sums, byLabels := map[string]float64{}, map[string]float64{}
	r := bufio.NewReaderSize(resp.Body, 1<<16)
	for {
		line, err := r.ReadString('\n')
		if len(line) > 0 && line[0] != '#' {
			name, labels, value, ok := parseSample(strings.TrimSpace(line))
			if ok {
				if want[name] {
					sums[name] += value
				}
				if name == family {
					byLabels[labels] += value
				}
			}
		}
		if err == io.EOF {
			return sums, byLabels, nil
		}
		if err != nil {
			return nil, nil, err
		}
	}
}

func parseSample(line string) (name, labels string, value float64, ok bool) {
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(line[sp+1:], 64)
	if err != nil {
		return "", "", 0, false
	}
	head := line[:sp]
	if i := strings.IndexByte(head, '{'); i >= 0 {
		return head[:i], head[i:], v, true
	}
	return head, "", v, true
}

// label returns the value of label key in a {k="v",...} label set.
func label(labels, key string) string {
	i := strings.Index(labels, key+`="`)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(key)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// hostCalls sums the host kube-apiserver's apiserver_request_total by verb and resource
// (with subresource): the calls the host served.
func hostCalls(client *http.Client, url string) (map[string]float64, error) {
	_, byLabels, err := scrape(client, url+"/metrics", nil, "apiserver_request_total")
	if err != nil {
		return nil, err
	}
	calls := map[string]float64{}
	for labels, v := range byLabels {
		kind := strings.ToLower(label(labels, "verb")) + " " + label(labels, "resource")
		if sub := label(labels, "subresource"); sub != "" {
			kind += "/" + sub
		}
		calls[kind] += v
	}
	return calls, nil
}

// rates is what grew between two hostCalls, per second over d, the kinds with at least
// 0.05/s, largest first.
func rates(before, after map[string]float64, d time.Duration) string {
	type kr struct {
		kind string
		rate float64
	}
	var list []kr
	total := 0.0
	for k, v := range after {
		if r := (v - before[k]) / d.Seconds(); r >= 0.05 {
			list = append(list, kr{k, r})
			total += r
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].rate > list[j].rate })
	var b strings.Builder
	fmt.Fprintf(&b, "%.1f/s in all", total)
	for _, e := range list {
		fmt.Fprintf(&b, "; %s %.1f", e.kind, e.rate)
	}
	return b.String()
}

// hubProcess is one mount-apiserver replica run as its own process, on a fixed port and root
// directory, so that it can be killed and started again as a restarted pod would be.
type hubProcess struct {
	bin, root, logPath string
	port               int
	args               []string
	// env is added to the bench's environment for this process only.
	env []string

	cmd    *exec.Cmd
	exited chan struct{}
	ca     []byte
}

func (h *hubProcess) url() string { return "https://127.0.0.1:" + strconv.Itoa(h.port) }

func (h *hubProcess) pid() int { return h.cmd.Process.Pid }

// start starts the process (appending to its log) and waits until /readyz answers 200.
func (h *hubProcess) start(ctx context.Context) error {
	logFile, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	args := append([]string{"--root-directory", h.root, "--secure-port", strconv.Itoa(h.port)}, h.args...)
	h.cmd = exec.Command(h.bin, args...)
	h.cmd.Stdout, h.cmd.Stderr = logFile, logFile
	if len(h.env) > 0 {
		h.cmd.Env = append(os.Environ(), h.env...)
	}
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	exited := make(chan struct{})
	h.exited = exited
	cmd := h.cmd
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("mount-apiserver exited; see %s", h.logPath)
		default:
		}
		ca, err := os.ReadFile(filepath.Join(h.root, "pki", "ca.crt"))
		if err != nil {
			return false, nil
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := c.Get(h.url() + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		h.ca = ca
		return resp.StatusCode == http.StatusOK, nil
	})
}

// kill SIGKILLs the process, as a crash or an evicted node would, and waits until it is gone.
func (h *hubProcess) kill() {
	_ = h.cmd.Process.Kill()
	<-h.exited
}

// stop stops the process as a rolling update does (SIGTERM), SIGKILL after a minute.
func (h *hubProcess) stop() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(time.Minute):
		h.kill()
	}
}

// config is cfg aimed at this replica directly.
func (h *hubProcess) config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host, c.CAData = h.url(), h.ca
	return c
}

// procCPU is one process's name and CPU time so far.
type procCPU struct {
	comm string
	cpu  time.Duration
}

// processCPU is the CPU time so far of this process and of every process it started (the
// servers, etcds and simulators), by pid.
func processCPU() map[int]procCPU {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	type stat struct {
		procCPU
		ppid int
	}
	all := map[int]stat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		// After the name: state, ppid, ... utime (the 12th), stime (the 13th).
		fields := strings.Fields(s[end+1:])
		if len(fields) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		all[pid] = stat{procCPU{s[open+1 : end], time.Duration(utime+stime) * clockTick}, ppid}
	}
	self := os.Getpid()
	ours := map[int]procCPU{}
	for pid, st := range all {
		for p, hops := pid, 0; p > 1 && hops < 10; p, hops = all[p].ppid, hops+1 {
			if p == self {
				ours[pid] = st.procCPU
				break
			}
		}
	}
	return ours
}

// byKind sums the CPU each kind of process used between two processCPU readings, most first;
// a process absent before (started since) counts from zero, one gone since is left out.
func byKind(before, after map[int]procCPU, label func(pid int, comm string) string) ([]string, map[string]time.Duration, time.Duration) {
	sums := map[string]time.Duration{}
	var total time.Duration
	for pid, a := range after {
		d := a.cpu
		if b, ok := before[pid]; ok && b.comm == a.comm {
			d -= b.cpu
		}
		sums[label(pid, a.comm)] += d
		total += d
	}
	names := make([]string, 0, len(sums))
	for n := range sums {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return sums[names[i]] > sums[names[j]] })
	return names, sums, total
}

// cpuShares says how much CPU each kind of process used between two readings, in all and per
// unit (e.g. per session started).
func cpuShares(before, after map[int]procCPU, label func(pid int, comm string) string, units int, unit string) string {
	names, sums, total := byKind(before, after, label)
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(max(units, 1)) }
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f s (%.1f ms)", n, sums[n].Seconds(), per(sums[n])))
	}
	return fmt.Sprintf("CPU of the bench's processes: %.1f s in all, %.1f ms per %s: %s", total.Seconds(), per(total), unit, strings.Join(parts, ", "))
}

// cpuPercents says what share of one core each kind of process used between two readings
// over elapsed.
func cpuPercents(before, after map[int]procCPU, label func(pid int, comm string) string, elapsed time.Duration) string {
	names, sums, total := byKind(before, after, label)
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / elapsed.Seconds() }
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f %%", n, pct(sums[n])))
	}
	return fmt.Sprintf("CPU of the bench's processes, share of one core: %.1f %% in all: %s", pct(total), strings.Join(parts, ", "))
}

// The kinds of processCPU's processes that cpuFloor tells apart.
const (
	kindAgents  = "agent simulators"
	kindReplica = "mount-apiserver"
)

// cpuFloor says how long the work between two readings would have taken at the least had
// this machine's cores done nothing else, as the CPU it took over the number of cores: with
// every process of the bench, without the agent simulators (a fleet's agents run on
// machines of their own), and for the replicas alone. A figure that stays above a goal is
// a goal this machine cannot reach, whatever is waited for.
func cpuFloor(before, after map[int]procCPU, label func(pid int, comm string) string, took time.Duration) string {
	_, sums, total := byKind(before, after, label)
	var agents, replicas time.Duration
	for kind, d := range sums {
		switch {
		case kind == kindAgents:
			agents += d
		case kind == kindReplica || strings.HasPrefix(kind, kindReplica+" replica "):
			replicas += d
		}
	}
	cores := runtime.NumCPU()
	over := func(d time.Duration) float64 { return d.Seconds() / float64(cores) }
	return fmt.Sprintf("the floor on %d cores (the CPU taken over the cores): %.1f s with every process of the bench (it took %.1f s), %.1f s without the agent simulators, %.1f s for mount-apiserver alone",
		cores, over(total), took.Seconds(), over(total-agents), over(replicas))
}
