package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay/record"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// AdmissionRelayConfig says where targets reach this server's admission relay.
type AdmissionRelayConfig struct {
	// URL is the relay's base URL as targets reach it (https://host:port).
	URL string
	// CABundle verifies the relay's serving certificate (PEM).
	CABundle []byte
}

// relayAnnotationPath is the relay record's annotation as a gjson/sjson path.
var relayAnnotationPath = "metadata.annotations." + strings.ReplaceAll(record.Annotation, ".", `\.`)

// maxWebhookConfigBytes bounds a response of webhook configurations that is read whole to
// restore what the caller wrote (a List of them; watches go event by event).
const maxWebhookConfigBytes = 16 << 20

// webhookKind returns the relay kind of a webhook configurations path, or "".
func webhookKind(p string) string {
	rest, ok := strings.CutPrefix(p, "/apis/admissionregistration.k8s.io/")
	if !ok {
		return ""
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 {
		return ""
	}
	if parts[1] == "watch" && len(parts) >= 3 {
		parts = parts[1:]
	}
	switch parts[1] {
	case "validatingwebhookconfigurations":
		return record.Validating
	case "mutatingwebhookconfigurations":
		return record.Mutating
	}
	return ""
}

// errWebhookRefused is a write of a webhook configuration the relay cannot serve (422).
type errWebhookRefused struct{ msg string }

func (e *errWebhookRefused) Error() string { return e.msg }

// relayWebhooks points every webhook of a configuration written through a renaming mount at
// the admission relay: the caller's clientConfig goes into the relay record annotation (a
// caller's own value of it is replaced), the relay URL and CA into clientConfig.
func (h *requestHandler) relayWebhooks(ctx context.Context, kind string, body []byte) ([]byte, error) {
	relay := h.proxier.AdmissionRelay
	if relay == nil {
		return nil, &errWebhookRefused{fmt.Sprintf("mount %q renames APIs, and its webhooks would see target names: this server has no admission relay (--admission-relay-address) to rename their AdmissionReviews", h.mount.Name)}
	}
	doc := gjson.ParseBytes(body)
	name := doc.Get("metadata.name").String()
	if name == "" {
		return nil, &errWebhookRefused{"webhook configurations written through a renaming mount need metadata.name (the relay URLs name it)"}
	}
	token, err := record.NewToken()
	if err != nil {
		return nil, err
	}
	rec := record.Record{Token: token, Webhooks: map[string]admissionregistrationv1.WebhookClientConfig{}}
	hook := record.Hook{Cluster: string(clusters.From(ctx)), Mount: h.mount.Name, UID: h.mount.UID, Kind: kind, Config: name, Token: token}
	relayCC, err := json.Marshal(map[string]string{"url": "", "caBundle": base64.StdEncoding.EncodeToString(relay.CABundle)})
	if err != nil {
		return nil, err
	}
	out := body
	var werr error
	doc.Get("webhooks").ForEach(func(i, wh gjson.Result) bool {
		whName := wh.Get("name").String()
		var cc admissionregistrationv1.WebhookClientConfig
		if err := json.Unmarshal([]byte(wh.Get("clientConfig").Raw), &cc); err != nil {
			werr = &errWebhookRefused{fmt.Sprintf("webhooks[%d].clientConfig does not decode", i.Int())}
			return false
		}
		if cc.Service != nil || cc.URL == nil {
			werr = &errWebhookRefused{fmt.Sprintf("webhooks[%d].clientConfig: a renaming mount relays webhooks with clientConfig.url only: clientConfig.service is not relayed, since the target's service proxy, the relay's only way to a service, does not verify a service's certificate against caBundle; register the webhook with clientConfig.url, at an address mount-apiserver reaches", i.Int())}
			return false
		}
		if _, dup := rec.Webhooks[whName]; dup || whName == "" {
			werr = &errWebhookRefused{fmt.Sprintf("webhooks[%d].name must be set and unique", i.Int())}
			return false
		}
		rec.Webhooks[whName] = cc
		hook.Webhook = whName
		cc2, _ := sjson.SetBytes(relayCC, "url", strings.TrimSuffix(relay.URL, "/")+hook.Path())
		if out, werr = sjson.SetRawBytes(out, "webhooks."+strconv.Itoa(int(i.Int()))+".clientConfig", cc2); werr != nil {
			return false
		}
		return true
	})
	if werr != nil {
		return nil, werr
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return sjson.SetBytes(out, relayAnnotationPath, string(data))
}

// serveWebhookWrite rewrites the body of a create or update of webhook configurations; it
// answers the caller itself and returns false when it refuses.
func (h *requestHandler) serveWebhookWrite(ctx context.Context, w http.ResponseWriter, kind string, body []byte) ([]byte, bool) {
	out, err := h.relayWebhooks(ctx, kind, body)
	if err == nil {
		return out, true
	}
	var refused *errWebhookRefused
	if errors.As(err, &refused) {
		writeStatus(w, newStatus(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error()))
	} else {
		writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error()))
	}
	return nil, false
}

// restoreWebhookConfig gives a webhook configuration the clientConfigs its writer wrote back
// and drops the relay record.
func restoreWebhookConfig(obj []byte) []byte {
	ann := gjson.GetBytes(obj, relayAnnotationPath)
	if !ann.Exists() {
		return obj
	}
	out, err := sjson.DeleteBytes(obj, relayAnnotationPath)
	if err != nil {
		return obj
	}
	if anns := gjson.GetBytes(out, "metadata.annotations"); anns.IsObject() && len(anns.Map()) == 0 {
		out, _ = sjson.DeleteBytes(out, "metadata.annotations")
	}
	var rec record.Record
	if json.Unmarshal([]byte(ann.String()), &rec) != nil {
		return out
	}
	gjson.GetBytes(obj, "webhooks").ForEach(func(i, wh gjson.Result) bool {
		if cc, ok := rec.Webhooks[wh.Get("name").String()]; ok {
			if data, err := json.Marshal(cc); err == nil {
				out, _ = sjson.SetRawBytes(out, "webhooks."+strconv.Itoa(int(i.Int()))+".clientConfig", data)
			}
		}
		return true
	})
	return out
}

// restoreWebhooks restores webhook configurations in a response: an object or a List read
// whole (bounded), a watch event by event.
func restoreWebhooks(in io.Reader, watch bool) io.Reader {
	if watch {
		return &eventRestorer{in: bufio.NewReaderSize(in, 64<<10)}
	}
	return &wholeRestorer{in: in}
}

// wholeRestorer reads a response whole on its first Read (bounded) and restores it.
type wholeRestorer struct {
	in   io.Reader
	out  *bytes.Reader
	done bool
	err  error
}

func (r *wholeRestorer) Read(p []byte) (int, error) {
	if !r.done {
		r.done = true
		data, err := io.ReadAll(io.LimitReader(r.in, maxWebhookConfigBytes+1))
		if err == nil && len(data) > maxWebhookConfigBytes {
			err = fmt.Errorf("%w: more than %d bytes of webhook configurations", errUnrewritable, maxWebhookConfigBytes)
		}
		if err != nil {
			r.err = err
			return 0, err
		}
		if items := gjson.GetBytes(data, "items"); items.IsArray() {
			out := data
			items.ForEach(func(i, item gjson.Result) bool {
				out, _ = sjson.SetRawBytes(out, "items."+strconv.Itoa(int(i.Int())), restoreWebhookConfig([]byte(item.Raw)))
				return true
			})
			data = out
		} else {
			data = restoreWebhookConfig(data)
		}
		r.out = bytes.NewReader(data)
	}
	if r.err != nil {
		return 0, r.err
	}
	return r.out.Read(p)
}

// eventRestorer restores the object of each watch event, one JSON event per line.
type eventRestorer struct {
	in      *bufio.Reader
	pending []byte
	err     error
}

func (e *eventRestorer) Read(p []byte) (int, error) {
	for len(e.pending) == 0 {
		if e.err != nil {
			return 0, e.err
		}
		line, err := e.in.ReadBytes('\n')
		if len(line) > maxWebhookConfigBytes {
			err = fmt.Errorf("%w: a watch event of more than %d bytes", errUnrewritable, maxWebhookConfigBytes)
			line = nil
		}
		e.err = err
		if obj := gjson.GetBytes(line, "object"); obj.IsObject() {
			if out, serr := sjson.SetRawBytes(bytes.TrimRight(line, "\n"), "object", restoreWebhookConfig([]byte(obj.Raw))); serr == nil {
				line = append(out, '\n')
			}
		}
		e.pending = line
	}
	n := copy(p, e.pending)
	e.pending = e.pending[n:]
	return n, nil
}

// errWebhookPatch is a patch of a webhook configuration that cannot be served, with the
// Status the caller gets.
type errWebhookPatch struct{ status *metav1.Status }

func (e *errWebhookPatch) Error() string { return e.status.Message }

// patchWebhookConfig turns a patch of a webhook configuration (already in target names) into
// the whole configuration it makes, so that its webhooks can be relayed again: it reads the
// configuration from the target with the caller's credentials, gives it back the
// clientConfigs its writers wrote (what the caller sees through the mount), and applies the
// patch to that. A patch therefore never touches a relay URL or record; the update that
// follows carries the resourceVersion that was read, so a concurrent write makes it 409.
func (h *requestHandler) patchWebhookConfig(ctx context.Context, out *http.Request, location url.URL, kind, contentType string, patch []byte) ([]byte, error) {
	mt, _, _ := strings.Cut(contentType, ";")
	switch mt = strings.TrimSpace(strings.ToLower(mt)); types.PatchType(mt) {
	case types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType:
	default:
		return nil, &errWebhookPatch{newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, fmt.Sprintf(
			"mount %q renames APIs and relays webhooks: webhook configurations are patched through it with JSON, merge or strategic merge patches only; server-side apply is not supported, since the relay URLs and record would become fields of every applier and conflict between field managers: use kubectl apply without --server-side, or kubectl replace", h.mount.Name))}
	}
	location.RawQuery = ""
	get, err := http.NewRequestWithContext(ctx, http.MethodGet, location.String(), nil)
	if err != nil {
		return nil, err
	}
	get.Header = out.Header.Clone()
	for _, k := range []string{"Content-Type", "Content-Length", "Content-Encoding"} {
		get.Header.Del(k)
	}
	get.Header.Set("Accept", "application/json")
	res, err := h.target.PlainRoundTripper(get.Header, h.imp).RoundTrip(get)
	if err != nil {
		return nil, &errWebhookPatch{newStatus(http.StatusBadGateway, metav1.StatusReasonServiceUnavailable, fmt.Sprintf("mount %q: reading the webhook configuration to patch from the target failed", h.mount.Name))}
	}
	defer res.Body.Close()
	current, err := io.ReadAll(io.LimitReader(res.Body, maxWebhookConfigBytes+1))
	if err != nil || len(current) > maxWebhookConfigBytes {
		return nil, &errWebhookPatch{newStatus(http.StatusBadGateway, metav1.StatusReasonServiceUnavailable, fmt.Sprintf("mount %q: the webhook configuration to patch is unreadable or too large", h.mount.Name))}
	}
	if res.StatusCode != http.StatusOK {
		// The target's Status (not found, forbidden) names no renamed resource.
		var s metav1.Status
		if json.Unmarshal(current, &s) != nil || s.Kind != "Status" {
			s = *newStatus(int32(res.StatusCode), metav1.StatusReasonUnknown, fmt.Sprintf("reading the webhook configuration to patch: the target answered %d", res.StatusCode))
		}
		s.Code = int32(res.StatusCode)
		return nil, &errWebhookPatch{&s}
	}
	rv := gjson.GetBytes(current, "metadata.resourceVersion").String()
	current = restoreWebhookConfig(current)

	var patched []byte
	switch types.PatchType(mt) {
	case types.JSONPatchType:
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(patch); err == nil {
			patched, err = p.Apply(current)
		}
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(current, patch)
	case types.StrategicMergePatchType:
		var schema any = &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if kind == record.Mutating {
			schema = &admissionregistrationv1.MutatingWebhookConfiguration{}
		}
		patched, err = strategicpatch.StrategicMergePatch(current, patch, schema)
	}
	if err != nil {
		return nil, &errWebhookPatch{newStatus(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("the patch does not apply to webhook configuration %q: %v", gjson.GetBytes(current, "metadata.name").String(), err))}
	}
	if !gjson.ValidBytes(patched) || !gjson.ParseBytes(patched).IsObject() {
		return nil, &errWebhookPatch{newStatus(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "the patched webhook configuration is not a JSON object")}
	}
	if gjson.GetBytes(patched, "metadata.resourceVersion").String() == "" && rv != "" {
		if patched, err = sjson.SetBytes(patched, "metadata.resourceVersion", rv); err != nil {
			return nil, err
		}
	}
	return patched, nil
}
