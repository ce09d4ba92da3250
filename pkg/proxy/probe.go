package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
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

// probeTimeout bounds a probe beyond the connect timeout.
const probeTimeout = 5 * time.Second

// ProbeCache shares probe results between mounts of one target (one TargetKey) for TTL, so
// 10,000 mounts of one cluster cost that cluster one probe per TTL instead of 10,000.
type ProbeCache struct {
	TTL time.Duration

	mu      sync.Mutex
	entries map[TargetKey]probeEntry
}

type probeEntry struct {
	result ProbeResult
	at     time.Time
}

func (c *ProbeCache) get(key TargetKey) (ProbeResult, bool) {
	if c == nil || c.TTL <= 0 {
		return ProbeResult{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || time.Since(e.at) > c.TTL {
		return ProbeResult{}, false
	}
	return e.result, true
}

func (c *ProbeCache) put(key TargetKey, r ProbeResult) {
	if c == nil || c.TTL <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[TargetKey]probeEntry{}
	}
	now := time.Now()
	if len(c.entries) > 1024 {
		for k, e := range c.entries {
			if now.Sub(e.at) > c.TTL {
				delete(c.entries, k)
			}
		}
	}
	c.entries[key] = probeEntry{result: r, at: now}
}

// Probe resolves the Mount's credentials and asks its target /readyz, falling back to /version
// for targets that do not serve /readyz to these credentials. It uses the cached transport of
// the proxy with the mount's own credentials, so a working probe means working proxying.
func (p *Proxier) Probe(ctx context.Context, m *mounts.Mount) ProbeResult {
	target, err := p.Target(ctx, m)
	if err != nil {
		return ProbeResult{CredentialsErr: err}
	}
	if r, ok := p.Probes.get(target.key); ok {
		return r
	}
	r := p.probe(ctx, target)
	p.Probes.put(target.key, r)
	return r
}

func (p *Proxier) probe(ctx context.Context, target *Target) ProbeResult {
	ctx, cancel := context.WithTimeout(ctx, target.ConnectTimeout+probeTimeout)
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
