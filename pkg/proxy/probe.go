package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

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

// Probe resolves the Mount's credentials and asks its target /readyz, falling back to /version
// for targets that do not serve /readyz to these credentials. It uses the cached transport of
// the proxy with the mount's own credentials, so a working probe means working proxying.
func (p *Proxier) Probe(ctx context.Context, m *mounts.Mount) ProbeResult {
	target, err := p.Target(ctx, m)
	if err != nil {
		return ProbeResult{CredentialsErr: err}
	}
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
			return ProbeResult{ReachErr: fmt.Errorf("%s", statusForError(target.Base.Host, err).Message)}
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64*1024))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return ProbeResult{Path: path, Latency: time.Since(start)}
		}
		lastErr = fmt.Errorf("GET %s on %s answered %d", path, target.Base.Host, resp.StatusCode)
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized {
			break // a real answer, e.g. 500 from a failing /readyz: no fallback
		}
	}
	return ProbeResult{ReachErr: lastErr}
}
