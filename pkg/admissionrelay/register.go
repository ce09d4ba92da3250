package admissionrelay

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay/record"
)

// This file is the proxy's side of the relay: what a renaming mount writes into the target's
// webhook configurations, and how it shows them back to its callers. It works on bytes only;
// the proxy does the HTTP.

// Config says where targets reach this server's admission relay.
type Config struct {
	// URL is the relay's base URL as targets reach it (https://host:port).
	URL string
	// CABundle verifies the relay's serving certificate (PEM).
	CABundle []byte
}

// annotationPath is the relay record's annotation as a gjson/sjson path.
var annotationPath = "metadata.annotations." + strings.ReplaceAll(record.Annotation, ".", `\.`)

// MaxConfigBytes bounds a response of webhook configurations that is read whole to restore
// what the caller wrote (a List of them; watches go event by event), and one configuration
// read to be patched.
const MaxConfigBytes = 16 << 20

// ErrTooLarge: a response of webhook configurations is larger than MaxConfigBytes.
var ErrTooLarge = errors.New("webhook configurations too large to restore")

// Kind returns the relay kind of a webhook configurations path, or "". The path must be
// clean (no empty segments): the proxy classifies the path it sends.
func Kind(p string) string {
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

// Register points every webhook of a configuration written through a renaming mount at the
// relay: the caller's clientConfig goes into the relay record annotation (a caller's own value
// of it is replaced), the relay URL and CA into clientConfig. hook names the cluster, mount,
// UID and kind. A configuration the relay cannot serve is an Invalid error (422); cfg nil
// refuses every one.
func Register(cfg *Config, hook record.Hook, body []byte) ([]byte, error) {
	if cfg == nil {
		return nil, invalid(fmt.Sprintf("mount %q renames APIs, and its webhooks would see target names: this server has no admission relay (--admission-relay-address) to rename their AdmissionReviews", hook.Mount))
	}
	if err := CheckJSONObject(body); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the webhook configuration: %v", err))
	}
	doc := gjson.ParseBytes(body)
	name := doc.Get("metadata.name").String()
	if name == "" {
		return nil, invalid("webhook configurations written through a renaming mount need metadata.name (the relay URLs name it)")
	}
	token, err := record.NewToken()
	if err != nil {
		return nil, err
	}
	rec := record.Record{Token: token, Webhooks: map[string]admissionregistrationv1.WebhookClientConfig{}}
	hook.Config, hook.Token = name, token
	relayCC, err := json.Marshal(map[string]string{"url": "", "caBundle": base64.StdEncoding.EncodeToString(cfg.CABundle)})
	if err != nil {
		return nil, err
	}
	out := body
	var werr error
	doc.Get("webhooks").ForEach(func(i, wh gjson.Result) bool {
		whName := wh.Get("name").String()
		var cc admissionregistrationv1.WebhookClientConfig
		if err := json.Unmarshal([]byte(wh.Get("clientConfig").Raw), &cc); err != nil {
			werr = invalid(fmt.Sprintf("webhooks[%d].clientConfig does not decode", i.Int()))
			return false
		}
		if cc.Service != nil || cc.URL == nil {
			werr = invalid(fmt.Sprintf("webhooks[%d].clientConfig: a renaming mount relays webhooks with clientConfig.url only: clientConfig.service is not relayed, since the target's service proxy, the relay's only way to a service, does not verify a service's certificate against caBundle; register the webhook with clientConfig.url, at an address mount-apiserver reaches", i.Int()))
			return false
		}
		if _, dup := rec.Webhooks[whName]; dup || whName == "" {
			werr = invalid(fmt.Sprintf("webhooks[%d].name must be set and unique", i.Int()))
			return false
		}
		rec.Webhooks[whName] = cc
		hook.Webhook = whName
		cc2, _ := sjson.SetBytes(relayCC, "url", strings.TrimSuffix(cfg.URL, "/")+hook.Path())
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
	return sjson.SetBytes(out, annotationPath, string(data))
}

func invalid(msg string) error {
	return statusError(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, msg)
}

func statusError(code int32, reason metav1.StatusReason, msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: code, Reason: reason, Message: msg,
	}}
}

// Restore gives a webhook configuration the clientConfigs its writer wrote back and drops the
// relay record.
func Restore(obj []byte) []byte {
	ann := gjson.GetBytes(obj, annotationPath)
	if !ann.Exists() {
		return obj
	}
	out, err := sjson.DeleteBytes(obj, annotationPath)
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

// RestoreStream restores webhook configurations in a response: an object or a List read whole
// (bounded by MaxConfigBytes), a watch event by event.
func RestoreStream(in io.Reader, watch bool) io.Reader {
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
		data, err := io.ReadAll(io.LimitReader(r.in, MaxConfigBytes+1))
		if err == nil && len(data) > MaxConfigBytes {
			err = fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxConfigBytes)
		}
		if err == nil {
			err = CheckJSONObject(data)
		}
		if err != nil {
			r.err = err
			return 0, err
		}
		if items := gjson.GetBytes(data, "items"); items.IsArray() {
			out := data
			items.ForEach(func(i, item gjson.Result) bool {
				out, _ = sjson.SetRawBytes(out, "items."+strconv.Itoa(int(i.Int())), Restore([]byte(item.Raw)))
				return true
			})
			data = out
		} else {
			data = Restore(data)
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
		line, err := readLine(e.in, MaxConfigBytes)
		if err == nil && len(bytes.TrimSpace(line)) > 0 {
			err = CheckJSONObject(line)
			if err != nil {
				line = nil
			}
		}
		e.err = err
		if obj := gjson.GetBytes(line, "object"); obj.IsObject() {
			if out, serr := sjson.SetRawBytes(bytes.TrimRight(line, "\n"), "object", Restore([]byte(obj.Raw))); serr == nil {
				line = append(out, '\n')
			}
		}
		e.pending = line
	}
	n := copy(p, e.pending)
	e.pending = e.pending[n:]
	return n, nil
}

// readLine reads up to and including the next newline, refusing lines longer than limit
// without holding more than limit bytes of them.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, fmt.Errorf("%w: a watch event of more than %d bytes", ErrTooLarge, limit)
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// ApplyPatch applies a patch (in target names) of a webhook configuration to current, the
// configuration as read from the target, after giving current back the clientConfigs its
// writers wrote (what the caller sees through the mount): a patch therefore never touches a
// relay URL or record, and the result is relayed again as a whole. The result carries
// current's resourceVersion, so a concurrent write makes the update that follows 409.
// Server-side apply is refused (415).
func ApplyPatch(current []byte, kind, contentType string, patch []byte) ([]byte, error) {
	mt, _, _ := strings.Cut(contentType, ";")
	switch mt = strings.TrimSpace(strings.ToLower(mt)); types.PatchType(mt) {
	case types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType:
	default:
		return nil, statusError(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			"webhook configurations are patched through a renaming mount with JSON, merge or strategic merge patches only; server-side apply is not supported, since the relay URLs and record would become fields of every applier and conflict between field managers: use kubectl apply without --server-side, or kubectl replace")
	}
	if err := CheckJSONObject(current); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the webhook configuration to patch: %v", err))
	}
	rv := gjson.GetBytes(current, "metadata.resourceVersion").String()
	current = Restore(current)

	var patched []byte
	var err error
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
		return nil, invalid(fmt.Sprintf("the patch does not apply to webhook configuration %q: %v", gjson.GetBytes(current, "metadata.name").String(), err))
	}
	if CheckJSONObject(patched) != nil {
		return nil, invalid("the patched webhook configuration is not a JSON object")
	}
	if gjson.GetBytes(patched, "metadata.resourceVersion").String() == "" && rv != "" {
		if patched, err = sjson.SetBytes(patched, "metadata.resourceVersion", rv); err != nil {
			return nil, err
		}
	}
	return patched, nil
}

// StatusOf returns the Status of an error of this package: its own for API errors, else 500.
func StatusOf(err error) *metav1.Status {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		s := se.Status()
		return &s
	}
	s := apierrors.NewInternalError(err).Status()
	return &s
}

// CheckJSONObject checks that data is one JSON object. encoding/json's validator is a state
// machine with a nesting bound (10,000), so hostile input can neither recurse nor grow it
// without bound, unlike gjson's recursive validator; gjson reads data only once it passed.
func CheckJSONObject(data []byte) error {
	if !json.Valid(data) {
		return errors.New("not valid JSON, or nested too deeply")
	}
	if b := bytes.TrimLeft(data, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return errors.New("not a JSON object")
	}
	return nil
}
