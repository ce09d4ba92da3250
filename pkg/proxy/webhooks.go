package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay"
	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay/record"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// The HTTP of webhook configurations written through renaming mounts; what is written into
// them, and how they read back, is package admissionrelay's.

// serveWebhookWrite points the webhooks of a create or update of webhook configurations at the
// admission relay; it answers the caller itself and returns false when it refuses.
func (h *requestHandler) serveWebhookWrite(ctx context.Context, w http.ResponseWriter, kind string, body []byte) ([]byte, bool) {
	hook := record.Hook{Cluster: string(clusters.From(ctx)), Mount: h.mount.Name, UID: h.mount.UID, Kind: kind}
	out, err := admissionrelay.Register(h.proxier.AdmissionRelay, hook, body)
	if err != nil {
		writeStatus(w, admissionrelay.StatusOf(err))
		return nil, false
	}
	return out, true
}

// patchWebhookConfig turns a patch of a webhook configuration (already in target names) into
// the whole configuration it makes, so that its webhooks can be relayed again: it reads the
// configuration from the target with the caller's credentials and applies the patch to it as
// the caller sees it (admissionrelay.ApplyPatch). A failure is a Status for the caller.
func (h *requestHandler) patchWebhookConfig(ctx context.Context, out *http.Request, location url.URL, kind, contentType string, patch []byte) ([]byte, *metav1.Status) {
	location.RawQuery = ""
	get, err := http.NewRequestWithContext(ctx, http.MethodGet, location.String(), nil)
	if err != nil {
		return nil, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
	}
	get.Header = out.Header.Clone()
	for _, k := range []string{"Content-Type", "Content-Length", "Content-Encoding"} {
		get.Header.Del(k)
	}
	get.Header.Set("Accept", "application/json")
	res, err := h.target.PlainRoundTripper(get.Header, h.imp).RoundTrip(get)
	if err != nil {
		return nil, newStatus(http.StatusBadGateway, metav1.StatusReasonServiceUnavailable, fmt.Sprintf("mount %q: reading the webhook configuration to patch from the target failed", h.mount.Name))
	}
	defer res.Body.Close()
	current, err := io.ReadAll(io.LimitReader(res.Body, admissionrelay.MaxConfigBytes+1))
	if err != nil || len(current) > admissionrelay.MaxConfigBytes {
		return nil, newStatus(http.StatusBadGateway, metav1.StatusReasonServiceUnavailable, fmt.Sprintf("mount %q: the webhook configuration to patch is unreadable or too large", h.mount.Name))
	}
	if res.StatusCode != http.StatusOK {
		// The target's Status (not found, forbidden) names no renamed resource.
		var s metav1.Status
		if json.Unmarshal(current, &s) != nil || s.Kind != "Status" {
			s = *newStatus(int32(res.StatusCode), metav1.StatusReasonUnknown, fmt.Sprintf("reading the webhook configuration to patch: the target answered %d", res.StatusCode))
		}
		s.Code = int32(res.StatusCode)
		return nil, &s
	}
	patched, err := admissionrelay.ApplyPatch(current, kind, contentType, patch)
	if err != nil {
		s := admissionrelay.StatusOf(err)
		s.Message = fmt.Sprintf("mount %q renames APIs and relays webhooks: %s", h.mount.Name, s.Message)
		return nil, s
	}
	return patched, nil
}

// ReadTarget GETs path from m's target with the mount's own credentials (no impersonation),
// reading at most limit bytes of the answer: the admission relay's view of a target. ctx
// carries the mount's logical cluster.
func (p *Proxier) ReadTarget(ctx context.Context, m *mounts.Mount, path string, limit int64) (int, []byte, error) {
	target, err := p.Target(ctx, m)
	if err != nil {
		return 0, nil, err
	}
	joined, err := JoinPath(target.Base.Path, path)
	if err != nil {
		return 0, nil, err
	}
	u := url.URL{Scheme: target.Base.Scheme, Host: target.Base.Host, Path: joined}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	res, err := target.PlainRoundTripper(req.Header, nil).RoundTrip(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, limit))
	return res.StatusCode, data, err
}
