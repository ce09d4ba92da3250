package record

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotation holds a Record on a webhook configuration in the target. The proxy sets it on
// every write through a renaming mount (a caller's own value is replaced) and hides it from
// reads through the mount.
const Annotation = "mounts.kcp.io/admission-relay"

// Record is what the relay needs of a webhook configuration written through a renaming mount:
// the token its relay URLs carry, and each webhook's clientConfig as the caller wrote it.
type Record struct {
	Token    string                                                 `json:"token"`
	Webhooks map[string]admissionregistrationv1.WebhookClientConfig `json:"webhooks"`
}

// NewToken returns a random token for a configuration's relay URLs.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a relay token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Kinds of webhook configurations, as they appear in relay paths.
const (
	Validating = "validating"
	Mutating   = "mutating"
)

// Hook names one webhook of one configuration written through one mount.
type Hook struct {
	Cluster, Mount string
	UID            types.UID
	Kind           string // Validating or Mutating
	Config         string
	Webhook        string
	Token          string
}

// Path is the relay path of a webhook: every part escaped as one segment.
func (h Hook) Path() string {
	parts := []string{h.Cluster, h.Mount, string(h.UID), h.Kind, h.Config, h.Webhook, h.Token}
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/" + strings.Join(parts, "/")
}

// ParsePath reads a relay path (the request's escaped path) back.
func ParsePath(escaped string) (Hook, error) {
	parts := strings.Split(strings.TrimPrefix(escaped, "/"), "/")
	if len(parts) != 7 {
		return Hook{}, fmt.Errorf("not a relay path")
	}
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil || u == "" {
			return Hook{}, fmt.Errorf("not a relay path")
		}
		parts[i] = u
	}
	h := Hook{Cluster: parts[0], Mount: parts[1], UID: types.UID(parts[2]), Kind: parts[3], Config: parts[4], Webhook: parts[5], Token: parts[6]}
	if h.Kind != Validating && h.Kind != Mutating {
		return Hook{}, fmt.Errorf("not a relay path")
	}
	return h, nil
}

// ParseRecord reads the Record of a configuration's annotations.
func ParseRecord(annotations map[string]string) (*Record, error) {
	v, ok := annotations[Annotation]
	if !ok {
		return nil, fmt.Errorf("the webhook configuration was not written through the mount")
	}
	var r Record
	if err := json.Unmarshal([]byte(v), &r); err != nil || r.Token == "" {
		return nil, fmt.Errorf("the webhook configuration's %s annotation does not parse", Annotation)
	}
	return &r, nil
}
