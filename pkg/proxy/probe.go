package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// ProbeResult is what probing a Mount's target found.
type ProbeResult struct {
	// CredentialsErr says why the target's credentials could not be resolved; nil when they were.
	CredentialsErr error
	// ReachErr says why the target did not answer its health probe; nil when it did.
	ReachErr error
	// Path is the probed path that answered.
	Path string
	// Latency of the successful probe.
	Latency time.Duration
}

// probeSlack bounds a probe beyond the connect timeout.
const probeSlack = 5 * time.Second

// DefaultProbeTimeout bounds a probe whatever the mount's connect timeout (up to 300 s): a
// target that has not answered /readyz by then is not ready.
const DefaultProbeTimeout = 15 * time.Second

// waiterHold is how long a finished probe's result is kept for the mounts told to wait for
// it, however short the TTL: they read it when the controller's queue gets to them again.
const waiterHold = 5 * time.Minute

// maxProbeEntries is the number of targets above which finished, expired entries are dropped.
const maxProbeEntries = 1024

// ProbeCache shares probes between mounts of one target (one TargetKey): mounts probed while a
// probe of their target is in flight wait for that one, and its result serves them for TTL, so
// 10,000 mounts of one cluster cost that cluster one probe per TTL instead of 10,000. Its zero
// value shares in-flight probes only.
type ProbeCache struct {
	// TTL is how long a result serves further mounts of the target.
	TTL time.Duration
	// Timeout bounds a probe, also when the connect timeout is longer (0: DefaultProbeTimeout).
	Timeout time.Duration

	mu      sync.Mutex
	entries map[TargetKey]*probeEntry
	// pruneAt is the number of entries at which the next prune runs: twice what the last one
	// kept, so that pruning costs each new entry O(1) however many targets there are.
	pruneAt int
}

type probeEntry struct {
	running *probeRun // in flight, nil when none is
	last    *probeRun // the last finished one
}

// probeRun is one probe of a target, begun at started. result and at are set before done is
// closed; waiters are the mounts that were told to wait for done and have not read the result
// yet. Both under ProbeCache.mu.
type probeRun struct {
	done    chan struct{}
	started time.Time
	result  ProbeResult
	at      time.Time
	waiters map[types.UID]struct{}
}

func (c *ProbeCache) timeout() time.Duration {
	if c == nil || c.Timeout <= 0 {
		return DefaultProbeTimeout
	}
	return c.Timeout
}

// lookup returns the result a mount may use now, or else the run to wait for: the one in
// flight, or a new one the caller must start. Only runs begun at or after since count: a run
// in flight that began before is waited for (its end brings the mount back), and then a new
// one starts.
func (c *ProbeCache) lookup(uid types.UID, key TargetKey, now, since time.Time) (r ProbeResult, ok bool, run *probeRun, start bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[TargetKey]*probeEntry{}
	}
	e := c.entries[key]
	if e == nil {
		c.prune(now)
		e = &probeEntry{}
		c.entries[key] = e
	}
	if last := e.last; last != nil && !last.started.Before(since) {
		if _, waited := last.waiters[uid]; waited {
			delete(last.waiters, uid)
			return last.result, true, nil, false
		}
		if now.Sub(last.at) <= c.TTL {
			return last.result, true, nil, false
		}
	}
	if e.running != nil {
		return ProbeResult{}, false, e.running, false
	}
	e.running = &probeRun{done: make(chan struct{}), started: now, waiters: map[types.UID]struct{}{}}
	return ProbeResult{}, false, e.running, true
}

// wait registers uid as a waiter of run, unless run has finished: then it returns its result.
func (c *ProbeCache) wait(uid types.UID, run *probeRun) (ProbeResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-run.done:
		return run.result, true
	default:
		run.waiters[uid] = struct{}{}
		return ProbeResult{}, false
	}
}

// finish records run's result as the last of key and wakes its waiters. Mounts still waiting
// for the previous result get this newer one.
func (c *ProbeCache) finish(key TargetKey, run *probeRun, r ProbeResult, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	run.result, run.at = r, now
	e := c.entries[key]
	if e == nil { // pruned meanwhile; keep it for the waiters
		e = &probeEntry{}
		c.entries[key] = e
	}
	if e.last != nil {
		for uid := range e.last.waiters {
			run.waiters[uid] = struct{}{}
		}
	}
	e.last, e.running = run, nil
	close(run.done)
}

// prune drops entries with no probe in flight whose result nobody may use any more, once there
// are many. c.mu is held. It walks all entries, so it runs only once their number has doubled
// since the last walk: at 10,000 tunnel mounts, probed every 100 s with results kept 10 s,
// nearly every probe made a new entry, and walking the map for each was 5 % of an idle
// replica's CPU.
func (c *ProbeCache) prune(now time.Time) {
	if len(c.entries) < max(maxProbeEntries, c.pruneAt) {
		return
	}
	defer func() { c.pruneAt = 2 * len(c.entries) }()
	for key, e := range c.entries {
		if e.running != nil {
			continue
		}
		if last := e.last; last == nil || now.Sub(last.at) > c.TTL && (len(last.waiters) == 0 || now.Sub(last.at) > waiterHold) {
			delete(c.entries, key)
		}
	}
}

// CloseIdleConnections closes the idle connections of m's Target, if one is cached and serves
// m alone (a tunnel's always does); they are dialed again when needed. A Target shared by
// mounts of one key keeps them: the other mounts' probes and requests use them.
func (p *Proxier) CloseIdleConnections(m *mounts.Mount) {
	if p.Transports != nil {
		p.Transports.closeIdle(m.UID)
	}
}

// Probe resolves the Mount's credentials and asks its target /readyz, falling back to /version
// for targets that do not serve /readyz to these credentials; it waits for the result. It uses
// the cached transport of the proxy with the mount's own credentials, so a working probe means
// working proxying.
func (p *Proxier) Probe(ctx context.Context, m *mounts.Mount) ProbeResult {
	r, _ := p.ProbeWithin(ctx, m, -1)
	return r
}

// ProbeWithin probes like Probe but waits at most wait (negative: until the result is there).
// When the probe is still running then, it returns pending, which is closed when the probe
// has finished: a ProbeWithin of the same mount after that gets its result, whatever the TTL.
// The probe runs on without the caller, bounded by the probe timeout.
func (p *Proxier) ProbeWithin(ctx context.Context, m *mounts.Mount, wait time.Duration) (r ProbeResult, pending <-chan struct{}) {
	return p.ProbeSince(ctx, m, wait, time.Time{})
}

// ProbeSince probes like ProbeWithin, with the result of a probe begun at or after since: what
// an earlier probe found, shared or cached, no longer tells once something changed since (a
// request through the mount found otherwise, its agent attached).
func (p *Proxier) ProbeSince(ctx context.Context, m *mounts.Mount, wait time.Duration, since time.Time) (r ProbeResult, pending <-chan struct{}) {
	target, err := p.Target(ctx, m)
	if err != nil {
		return ProbeResult{CredentialsErr: err}, nil
	}
	if p.Probes == nil {
		return p.probe(withMount(ctx, p.metricsLabel(clusters.From(ctx), m.Name), m.UID), target, DefaultProbeTimeout), nil
	}
	r, ok, run, start := p.Probes.lookup(m.UID, target.key, time.Now(), since)
	if ok {
		return r, nil
	}
	if start {
		// Not bound to the caller's context: mounts of other callers may wait for it.
		probeCtx := withMount(context.WithoutCancel(ctx), p.metricsLabel(clusters.From(ctx), m.Name), m.UID)
		timeout := p.Probes.timeout()
		go func() {
			r := p.probe(probeCtx, target, timeout)
			p.Probes.finish(target.key, run, r, time.Now())
		}()
	}
	var timer <-chan time.Time
	if wait >= 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-run.done:
		if run.started.Before(since) {
			// Begun before the change: probe again.
			return p.ProbeSince(ctx, m, 0, since)
		}
		return run.result, nil
	case <-ctx.Done():
		return ProbeResult{ReachErr: fmt.Errorf("probe of %s abandoned: %w", target.Base.Host, ctx.Err())}, nil
	case <-timer:
	}
	if r, ok := p.Probes.wait(m.UID, run); ok && !run.started.Before(since) {
		return r, nil
	}
	return ProbeResult{}, run.done
}

// probe asks the target, within the connect timeout plus probeSlack and at most limit.
func (p *Proxier) probe(ctx context.Context, target *Target, limit time.Duration) ProbeResult {
	ctx, cancel := context.WithTimeout(ctx, min(target.ConnectTimeout+probeSlack, limit))
	defer cancel()
	var lastErr error
	for _, path := range []string{"/readyz", "/version"} {
		joined, err := JoinPath(target.Base.Path, path)
		if err != nil {
			return ProbeResult{ReachErr: err}
		}
		u := *target.Base
		u.Path = joined
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return ProbeResult{ReachErr: err}
		}
		start := time.Now()
		resp, err := target.transport.RoundTrip(req)
		if err != nil {
			// The status gets the class of failure; the root cause is for the operator.
			klog.FromContext(ctx).V(2).Info("Probe failed", "target", target.Base.Host, "path", path, "err", err.Error())
			if e, ok := noAgent(ctx, err); ok {
				return ProbeResult{ReachErr: e}
			}
			return ProbeResult{ReachErr: fmt.Errorf("%s", statusForError(target.Base.Host, err).Message)}
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64*1024))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return ProbeResult{Path: path, Latency: time.Since(start)}
		}
		klog.FromContext(ctx).V(2).Info("Probe answered", "target", target.Base.Host, "path", path, "code", resp.StatusCode)
		lastErr = probeAnswerError(target.Base.Host, resp.StatusCode)
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized {
			break // a real answer, e.g. 500 from a failing /readyz: no fallback
		}
	}
	return ProbeResult{ReachErr: lastErr}
}
