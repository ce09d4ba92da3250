package admissionrelay

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay/record"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/rewrite"
	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
)

// maxBodyBytes bounds an AdmissionReview and a webhook's answer: kube-apiserver's request
// limit, which bounds the objects a review carries.
const maxBodyBytes = 3 * 1024 * 1024

// webhookTimeout bounds a webhook call: kube-apiserver allows webhooks at most 30 s.
const webhookTimeout = 30 * time.Second

// Relay serves the admission relay.
type Relay struct {
	// Mount reads a Mount of a logical cluster (a quorum read).
	Mount func(ctx context.Context, cluster, name string) (*mounts.Mount, error)
	// Targets reaches targets with the mounts' credentials and webhooks under the target
	// policy.
	Targets Targets
}

// Targets is what the relay needs of the proxy. Every call gets a context that carries the
// mount's logical cluster (pkg/clusters): the mount's Secret is read there.
type Targets interface {
	// RewriteRules returns the compiled rules of a mount's spec.rewrites, nil when they rename
	// nothing.
	RewriteRules(m *mounts.Mount) (*rewrite.Rules, error)
	// ReadTarget GETs path (JSON) from the mount's target with the mount's own credentials,
	// reading at most limit bytes of the answer.
	ReadTarget(ctx context.Context, m *mounts.Mount, path string, limit int64) (code int, body []byte, err error)
	// WebhookClient returns a client for a webhook at rawURL under the target policy,
	// trusting caPEM, following no redirect.
	WebhookClient(caPEM []byte, rawURL string) (*http.Client, error)
}

// ServeHTTP relays one AdmissionReview. Every failure answers a Status the target's
// kube-apiserver logs, and the webhook's failurePolicy decides; no failure says more than
// which step failed.
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	logger := klog.FromContext(req.Context())
	if req.Method != http.MethodPost {
		writeStatus(w, http.StatusMethodNotAllowed, "the admission relay takes POST only")
		return
	}
	hook, err := record.ParsePath(req.URL.EscapedPath())
	if err != nil {
		writeStatus(w, http.StatusNotFound, "not a webhook of the admission relay")
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBodyBytes+1))
	if err != nil || len(body) > maxBodyBytes {
		writeStatus(w, http.StatusRequestEntityTooLarge, "the AdmissionReview is unreadable or too large")
		return
	}
	answer, code, err := r.relay(req.Context(), hook, body)
	if err != nil {
		logger.V(2).Info("Admission relay failed", "mount", hook.Mount, "cluster", hook.Cluster, "configuration", hook.Config, "webhook", hook.Webhook, "err", err.Error())
		writeStatus(w, code, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(answer)
}

func (r *Relay) relay(ctx context.Context, hook record.Hook, body []byte) ([]byte, int, error) {
	// The mount, its Secret and its target are those of the cluster the hook names, never the
	// default cluster's (whose Secrets are the operator's).
	ctx = clusters.WithCluster(ctx, clusters.Name(hook.Cluster))
	m, err := r.Mount(ctx, hook.Cluster, hook.Mount)
	if err != nil || m.UID != hook.UID {
		return nil, http.StatusNotFound, fmt.Errorf("the mount that registered this webhook no longer exists")
	}
	rules, err := r.Targets.RewriteRules(m)
	if err != nil || rules == nil {
		return nil, http.StatusNotFound, fmt.Errorf("mount %q renames nothing any more", m.Name)
	}
	rec, err := readRecord(ctx, r.Targets, m, hook)
	if err != nil {
		return nil, http.StatusForbidden, err
	}
	if subtle.ConstantTimeCompare([]byte(rec.Token), []byte(hook.Token)) != 1 {
		return nil, http.StatusForbidden, fmt.Errorf("the relay token does not match the webhook configuration")
	}
	cc, ok := rec.Webhooks[hook.Webhook]
	if !ok || cc.URL == nil {
		return nil, http.StatusForbidden, fmt.Errorf("webhook %q was not registered through the mount with a URL", hook.Webhook)
	}
	if err := CheckJSONObject(body); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("the AdmissionReview: %w", err)
	}
	presented, err := rules.AdmissionReviewToPresented(body)
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("the AdmissionReview cannot be renamed: %w", err)
	}
	client, err := r.Targets.WebhookClient(cc.CABundle, *cc.URL)
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("webhook %q cannot be reached: %s", hook.Webhook, reachError(err))
	}
	ctx, cancel := context.WithTimeout(ctx, webhookTimeout)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, *cc.URL, bytes.NewReader(presented))
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("webhook %q: its URL does not parse", hook.Webhook)
	}
	out.Header.Set("Content-Type", "application/json")
	out.Header.Set("Accept", "application/json")
	res, err := client.Do(out)
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("webhook %q cannot be reached: %s", hook.Webhook, reachError(err))
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(res.Body, maxBodyBytes+1))
	if err != nil || len(answer) > maxBodyBytes {
		return nil, http.StatusBadGateway, fmt.Errorf("webhook %q answered unreadably or too much", hook.Webhook)
	}
	if res.StatusCode != http.StatusOK {
		// Redirects included: the webhook was registered at its URL, and nowhere else.
		return nil, http.StatusBadGateway, fmt.Errorf("webhook %q answered %d", hook.Webhook, res.StatusCode)
	}
	if err := CheckJSONObject(answer); err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("webhook %q's answer: %w", hook.Webhook, err)
	}
	toTarget, err := rules.AdmissionResponseToTarget(answer)
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("webhook %q's answer cannot be renamed: %w", hook.Webhook, err)
	}
	return toTarget, http.StatusOK, nil
}

// readRecord reads the relay record of the webhook configuration from the target, with the
// mount's own credentials.
func readRecord(ctx context.Context, targets Targets, m *mounts.Mount, hook record.Hook) (*record.Record, error) {
	resource := "validatingwebhookconfigurations"
	if hook.Kind == record.Mutating {
		resource = "mutatingwebhookconfigurations"
	}
	if strings.ContainsAny(hook.Config, "/%") || hook.Config == "." || hook.Config == ".." {
		return nil, fmt.Errorf("webhook configuration %q: bad name", hook.Config)
	}
	ctx, cancel := context.WithTimeout(ctx, webhookTimeout)
	defer cancel()
	code, data, err := targets.ReadTarget(ctx, m, "/apis/admissionregistration.k8s.io/v1/"+resource+"/"+hook.Config, maxBodyBytes)
	if err != nil {
		return nil, fmt.Errorf("reading webhook configuration %q from the target failed", hook.Config)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("reading webhook configuration %q from the target: %d", hook.Config, code)
	}
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("webhook configuration %q does not decode", hook.Config)
	}
	return record.ParseRecord(obj.Annotations)
}

// reachError says why a webhook could not be reached in the proxy's fixed vocabulary.
func reachError(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, targetpolicy.ErrNotAllowed):
		return "the target policy refuses it"
	}
	return "cannot connect, or its certificate does not verify"
}

func writeStatus(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Message: message,
	})
}
