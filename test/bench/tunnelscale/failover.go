package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kcp-dev/mount-apiserver/pkg/controller/agentconnected"
	"github.com/kcp-dev/mount-apiserver/test/bench/measure"
)

// failoverRun fails replica 2 while the agents of n Mounts are spread over the replicas, and
// measures how long until a GET through each remaining replica reaches every agent that was
// attached to replica 2.
func (b *bench) failoverRun(ctx context.Context, n int) error {
	_, byReplica, err := b.fleet.readiness(ctx, time.Time{})
	if err != nil {
		return err
	}
	var spread []string
	for msg, names := range byReplica {
		spread = append(spread, fmt.Sprintf("%s %d", strings.TrimSuffix(strings.TrimPrefix(msg, "An agent is connected to replica "), "."), len(names)))
	}
	sort.Strings(spread)
	fmt.Printf("\n== failover: %d agents spread over %d replicas (%s)\n", n, len(b.hubs), strings.Join(spread, ", "))
	victim := b.hubs[1]
	moved := byReplica[agentconnected.ConnectedMessage("replica-2")]
	if len(moved) == 0 {
		return fmt.Errorf("no agent is reported on replica 2")
	}
	var survivors []*hubProcess
	for i, h := range b.hubs {
		if i != 1 {
			survivors = append(survivors, h)
		}
	}
	before, err := hostCalls(b.hostClient, b.host.URL)
	if err != nil {
		return err
	}
	// Sessions started since the failure count the moved agents: a stopped replica's agents
	// still count as connected until they notice it is silent.
	_, _, startedBefore := b.agents.status()
	procs0 := processCPU()
	failed := time.Now()
	switch b.c.failover {
	case "stop":
		_ = victim.cmd.Process.Signal(syscall.SIGSTOP)
		fmt.Printf("replica 2 stopped (SIGSTOP: silent, its connections stay open) holding %d sessions (load average %s)\n", len(moved), loadAverage())
	default:
		victim.kill()
		fmt.Printf("replica 2 killed (SIGKILL) holding %d sessions (load average %s)\n", len(moved), loadAverage())
	}
	var allAttached time.Duration
	oks, codes, err := b.reach(survivors, moved, failed, 5*time.Minute, func() {
		if allAttached == 0 {
			if _, connected, started := b.agents.status(); connected >= n*b.c.sessions && started-startedBefore >= len(moved)*b.c.sessions {
				allAttached = time.Since(failed)
			}
		}
	})
	if err != nil {
		return err
	}
	after, err := hostCalls(b.hostClient, b.host.URL)
	if err != nil {
		return err
	}
	if allAttached > 0 {
		fmt.Printf("every agent of replica 2 attached again (the agents' count of sessions started) %v after the failure\n", allAttached.Round(100*time.Millisecond))
	}
	fmt.Printf("a GET through each remaining replica reaches every agent of replica 2 again %v after the failure (%s of the (mount, replica) pairs; answers meanwhile: %v)\n", oks[len(oks)-1].Round(100*time.Millisecond), quantiles(oks), codes)
	took, procs1 := time.Since(failed), processCPU()
	fmt.Printf("host API calls meanwhile: %s\n", rates(before, after, took))
	fmt.Println(cpuShares(procs0, procs1, b.processKind, len(moved), "moved agent"))
	fmt.Println(cpuFloor(procs0, procs1, b.processKind, took))
	if b.c.failover == "stop" {
		_ = victim.cmd.Process.Signal(syscall.SIGCONT)
	}
	return nil
}

// quantiles says when half, 90 % and 99 % of the pairs of oks (ascending) were reached.
func quantiles(oks []time.Duration) string {
	at := func(q float64) time.Duration {
		return oks[min(len(oks)-1, int(q*float64(len(oks))))].Round(100 * time.Millisecond)
	}
	return fmt.Sprintf("p50 %v, p90 %v, p99 %v", at(0.5), at(0.9), at(0.99))
}

// answers counts the answers by code, and keeps the first few distinct messages of each code
// other than 200: what a failure said, not only that it failed.
type answers struct {
	mu      sync.Mutex
	counts  map[string]int
	samples map[string][]string
}

// maxSamples bounds the distinct messages kept of one code.
const maxSamples = 3

func (a *answers) add(code, message string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.counts == nil {
		a.counts, a.samples = map[string]int{}, map[string][]string{}
	}
	a.counts[code]++
	if message == "" || len(a.samples[code]) >= maxSamples || slices.Contains(a.samples[code], message) {
		return
	}
	a.samples[code] = append(a.samples[code], message)
}

// String is the counts, as a map prints, then the messages kept.
func (a *answers) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := fmt.Sprint(a.counts)
	codes := make([]string, 0, len(a.samples))
	for code := range a.samples {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	for _, code := range codes {
		s += fmt.Sprintf("; %s: %q", code, a.samples[code])
	}
	return s
}

// message is what an answer's body or error says, in one bounded line.
func message(body []byte, err error) string {
	if err != nil {
		body = []byte(err.Error())
	}
	var status struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &status) == nil && status.Message != "" {
		body = []byte(status.Message)
	}
	s := strings.Join(strings.Fields(string(body)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// reach sends GETs through every replica of via to every mount of mounts until each
// (mount, replica) pair answered 200 once, and returns when each did after since, ascending,
// with the answers meanwhile. each runs between rounds.
func (b *bench) reach(via []*hubProcess, mounts []string, since time.Time, timeout time.Duration, each func()) ([]time.Duration, *answers, error) {
	var clients []*http.Client
	for _, h := range via {
		c, err := measure.Client(h.config(b.bencher))
		if err != nil {
			return nil, nil, err
		}
		c.Timeout = 10 * time.Second
		clients = append(clients, c)
	}
	type pair struct {
		mount   string
		replica int
	}
	pending := map[pair]bool{}
	for _, m := range mounts {
		for r := range via {
			pending[pair{m, r}] = true
		}
	}
	codes := &answers{}
	var mu sync.Mutex
	var oks []time.Duration
	deadline := time.Now().Add(timeout)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			return nil, codes, fmt.Errorf("after %v %d (mount, replica) pairs still fail; answers %v", timeout, len(pending), codes)
		}
		if each != nil {
			each()
		}
		work := make(chan pair)
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for p := range work {
					url := via[p.replica].url() + "/apis/mounts.kcp.io/v1alpha1/mounts/" + p.mount + "/proxy/version"
					code := "error"
					resp, err := clients[p.replica].Get(url)
					var body []byte
					if err == nil {
						body, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
						resp.Body.Close()
						code = fmt.Sprint(resp.StatusCode)
					}
					msg := ""
					if code != "200" {
						msg = message(body, err)
					}
					codes.add(code, msg)
					mu.Lock()
					if code == "200" {
						delete(pending, p)
						oks = append(oks, time.Since(since))
					}
					mu.Unlock()
				}
			}()
		}
		mu.Lock()
		list := make([]pair, 0, len(pending))
		for p := range pending {
			list = append(list, p)
		}
		mu.Unlock()
		for _, p := range list {
			work <- p
		}
		close(work)
		wg.Wait()
		if len(pending) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	slices.Sort(oks)
	return oks, codes, nil
}
