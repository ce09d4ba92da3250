package admissionrelay

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay/record"
)

func TestKind(t *testing.T) {
	for p, want := range map[string]string{
		"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations":           record.Validating,
		"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/a":         record.Validating,
		"/apis/admissionregistration.k8s.io/v1/watch/mutatingwebhookconfigurations":       record.Mutating,
		"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/a":           record.Mutating,
		"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies":               "",
		"/apis/admissionregistration.k8s.io/v1":                                           "",
		"/apis/apps/v1/deployments":                                                       "",
		"/api/v1/namespaces/admissionregistration.k8s.io/validatingwebhookconfigurations": "",
	} {
		if got := Kind(p); got != want {
			t.Errorf("Kind(%q) = %q, want %q", p, got, want)
		}
	}
}

var hookOfM = record.Hook{Cluster: "_default", Mount: "m", UID: "uid-m", Kind: record.Validating}

// TestRegisterRoundTrip: a configuration written through a renaming mount points at the
// relay, keeps what was written in its record (a caller's own record replaced), and reads back
// as written.
func TestRegisterRoundTrip(t *testing.T) {
	cfg := &Config{URL: "https://relay.example.com:6444/", CABundle: []byte("relay-ca")}
	in := `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"c","annotations":{"mounts.kcp.io/admission-relay":"{\"token\":\"forged\"}","keep":"me"}},` +
		`"webhooks":[{"name":"a.example.com","clientConfig":{"url":"https://hook.example.com/a","caBundle":"aG9vay1jYQ=="}},{"name":"b.example.com","clientConfig":{"url":"https://hook.example.com/b"}}]}`
	out, err := Register(cfg, hookOfM, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a.example.com", "b.example.com"} {
		u := gjson.GetBytes(out, "webhooks."+string(rune('0'+i))+".clientConfig.url").String()
		hook, err := record.ParsePath(strings.TrimPrefix(u, "https://relay.example.com:6444"))
		if err != nil || hook.Webhook != name || hook.Config != "c" || hook.Mount != "m" || hook.UID != "uid-m" || hook.Kind != record.Validating {
			t.Errorf("webhook %d's relay URL %q: %+v, %v", i, u, hook, err)
		}
		if ca := gjson.GetBytes(out, "webhooks."+string(rune('0'+i))+".clientConfig.caBundle").String(); ca != "cmVsYXktY2E=" {
			t.Errorf("webhook %d's caBundle %q, want the relay's", i, ca)
		}
	}
	rec, err := record.ParseRecord(map[string]string{record.Annotation: gjson.GetBytes(out, annotationPath).String()})
	if err != nil || rec.Token == "forged" || *rec.Webhooks["a.example.com"].URL != "https://hook.example.com/a" || string(rec.Webhooks["a.example.com"].CABundle) != "hook-ca" {
		t.Errorf("record %+v, %v", rec, err)
	}
	back := Restore(out)
	if gjson.GetBytes(back, "webhooks.0.clientConfig").Raw != `{"url":"https://hook.example.com/a","caBundle":"aG9vay1jYQ=="}` ||
		gjson.GetBytes(back, "webhooks.1.clientConfig").Raw != `{"url":"https://hook.example.com/b"}` ||
		gjson.GetBytes(back, annotationPath).Exists() || gjson.GetBytes(back, "metadata.annotations.keep").String() != "me" {
		t.Errorf("read back: %s", back)
	}

	// Lists and watch events read back alike.
	list := `{"kind":"ValidatingWebhookConfigurationList","items":[` + string(out) + `]}`
	data, err := io.ReadAll(RestoreStream(strings.NewReader(list), false))
	if err != nil || strings.Contains(string(data), "relay.example.com") || !strings.Contains(string(data), "hook.example.com/a") {
		t.Errorf("list read back: %s, %v", data, err)
	}
	events := `{"type":"ADDED","object":` + string(out) + "}\n" + `{"type":"BOOKMARK","object":{"kind":"ValidatingWebhookConfiguration","metadata":{"resourceVersion":"5"}}}` + "\n"
	data, err = io.ReadAll(RestoreStream(strings.NewReader(events), true))
	if err != nil || strings.Contains(string(data), "relay.example.com") || strings.Count(string(data), "\n") != 2 || !strings.Contains(string(data), `"resourceVersion":"5"`) {
		t.Errorf("watch read back: %s, %v", data, err)
	}
}

func TestRegisterRefuses(t *testing.T) {
	cfg := &Config{URL: "https://relay", CABundle: []byte("ca")}
	for name, c := range map[string]struct {
		cfg  *Config
		body string
		code int32
		want string
	}{
		"no relay":   {nil, `{"metadata":{"name":"c"},"webhooks":[]}`, 422, "no admission relay"},
		"no name":    {cfg, `{"metadata":{"generateName":"c-"},"webhooks":[]}`, 422, "need metadata.name"},
		"service":    {cfg, `{"metadata":{"name":"c"},"webhooks":[{"name":"a","clientConfig":{"service":{"namespace":"n","name":"s"}}}]}`, 422, "clientConfig.service is not relayed, since the target's service proxy"},
		"no URL":     {cfg, `{"metadata":{"name":"c"},"webhooks":[{"name":"a","clientConfig":{}}]}`, 422, "clientConfig.url only"},
		"same name":  {cfg, `{"metadata":{"name":"c"},"webhooks":[{"name":"a","clientConfig":{"url":"https://x"}},{"name":"a","clientConfig":{"url":"https://y"}}]}`, 422, "must be set and unique"},
		"no JSON cc": {cfg, `{"metadata":{"name":"c"},"webhooks":[{"name":"a","clientConfig":"x"}]}`, 422, "does not decode"},
		"deep":       {cfg, `{"metadata":{"name":"c"},"webhooks":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, 400, "nested too deeply"},
	} {
		_, err := Register(c.cfg, hookOfM, []byte(c.body))
		if s := StatusOf(err); err == nil || s.Code != c.code || !strings.Contains(s.Message, c.want) {
			t.Errorf("%s: %v, want %d saying %q", name, err, c.code, c.want)
		}
	}
}

func TestApplyPatchRefuses(t *testing.T) {
	current := []byte(`{"metadata":{"name":"c","resourceVersion":"7"},"webhooks":[]}`)
	for _, ct := range []string{"application/apply-patch+yaml", "application/apply-patch+cbor", "text/plain"} {
		_, err := ApplyPatch(current, record.Validating, ct, []byte(`{}`))
		if s := StatusOf(err); err == nil || s.Code != http.StatusUnsupportedMediaType || !strings.Contains(s.Message, "server-side apply is not supported") {
			t.Errorf("%s: %v, want a 415 saying server-side apply is not supported", ct, err)
		}
	}
	patched, err := ApplyPatch(current, record.Validating, "application/merge-patch+json", []byte(`{"metadata":{"labels":{"a":"b"}}}`))
	if err != nil || gjson.GetBytes(patched, "metadata.resourceVersion").String() != "7" || gjson.GetBytes(patched, "metadata.labels.a").String() != "b" {
		t.Errorf("merge patch: %s, %v", patched, err)
	}
	deep := []byte(strings.Repeat("[", 20000) + strings.Repeat("]", 20000))
	if _, err := ApplyPatch(deep, record.Validating, "application/merge-patch+json", []byte(`{}`)); StatusOf(err).Code != http.StatusBadRequest {
		t.Errorf("a deeply nested configuration: %v", err)
	}
}

// TestRestoreStreamBounds: a target's watch event or list larger than the bound, or nested
// deeper than encoding/json allows, ends the stream with an error instead of growing memory
// or recursing.
func TestRestoreStreamBounds(t *testing.T) {
	deep := strings.Repeat("[", 200000)
	if _, err := io.ReadAll(RestoreStream(strings.NewReader(`{"type":"ADDED","object":`+deep+"}\n"), true)); err == nil {
		t.Error("a deeply nested watch event passed")
	}
	if _, err := io.ReadAll(RestoreStream(strings.NewReader(deep), false)); err == nil {
		t.Error("a deeply nested list passed")
	}
	big := strings.Repeat(" ", MaxConfigBytes+10)
	if _, err := io.ReadAll(RestoreStream(strings.NewReader(`{"type":"ADDED","object":{}`+big+"}\n"), true)); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("a huge watch event: %v", err)
	}
}
