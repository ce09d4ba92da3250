package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay/record"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

func TestWebhookKind(t *testing.T) {
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
		if got := webhookKind(p); got != want {
			t.Errorf("webhookKind(%q) = %q, want %q", p, got, want)
		}
	}
}

func relayHandler(relay *AdmissionRelayConfig) *requestHandler {
	return &requestHandler{
		proxier: &Proxier{AdmissionRelay: relay},
		mount:   &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "uid-m"}},
	}
}

// TestRelayWebhooksRoundTrip: a configuration written through a renaming mount points at the
// relay, keeps what was written in its record (a caller's own record replaced), and reads back
// as written.
func TestRelayWebhooksRoundTrip(t *testing.T) {
	h := relayHandler(&AdmissionRelayConfig{URL: "https://relay.example.com:6444/", CABundle: []byte("relay-ca")})
	in := `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"c","annotations":{"mounts.kcp.io/admission-relay":"{\"token\":\"forged\"}","keep":"me"}},` +
		`"webhooks":[{"name":"a.example.com","clientConfig":{"url":"https://hook.example.com/a","caBundle":"aG9vay1jYQ=="}},{"name":"b.example.com","clientConfig":{"url":"https://hook.example.com/b"}}]}`
	out, err := h.relayWebhooks(context.Background(), record.Validating, []byte(in))
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
	rec, err := record.ParseRecord(map[string]string{record.Annotation: gjson.GetBytes(out, relayAnnotationPath).String()})
	if err != nil || rec.Token == "forged" || *rec.Webhooks["a.example.com"].URL != "https://hook.example.com/a" || string(rec.Webhooks["a.example.com"].CABundle) != "hook-ca" {
		t.Errorf("record %+v, %v", rec, err)
	}
	back := restoreWebhookConfig(out)
	if gjson.GetBytes(back, "webhooks.0.clientConfig").Raw != `{"url":"https://hook.example.com/a","caBundle":"aG9vay1jYQ=="}` ||
		gjson.GetBytes(back, "webhooks.1.clientConfig").Raw != `{"url":"https://hook.example.com/b"}` ||
		gjson.GetBytes(back, relayAnnotationPath).Exists() || gjson.GetBytes(back, "metadata.annotations.keep").String() != "me" {
		t.Errorf("read back: %s", back)
	}

	// Lists and watch events read back alike.
	list := `{"kind":"ValidatingWebhookConfigurationList","items":[` + string(out) + `]}`
	data, err := io.ReadAll(restoreWebhooks(strings.NewReader(list), false))
	if err != nil || strings.Contains(string(data), "relay.example.com") || !strings.Contains(string(data), "hook.example.com/a") {
		t.Errorf("list read back: %s, %v", data, err)
	}
	events := `{"type":"ADDED","object":` + string(out) + "}\n" + `{"type":"BOOKMARK","object":{"kind":"ValidatingWebhookConfiguration","metadata":{"resourceVersion":"5"}}}` + "\n"
	data, err = io.ReadAll(restoreWebhooks(strings.NewReader(events), true))
	if err != nil || strings.Contains(string(data), "relay.example.com") || strings.Count(string(data), "\n") != 2 || !strings.Contains(string(data), `"resourceVersion":"5"`) {
		t.Errorf("watch read back: %s, %v", data, err)
	}
}

func TestRelayWebhooksRefuses(t *testing.T) {
	relay := &AdmissionRelayConfig{URL: "https://relay", CABundle: []byte("ca")}
	for name, c := range map[string]struct {
		relay *AdmissionRelayConfig
		body  string
		want  string
	}{
		"no relay":   {nil, `{"metadata":{"name":"c"},"webhooks":[]}`, "no admission relay"},
		"no name":    {relay, `{"metadata":{"generateName":"c-"},"webhooks":[]}`, "need metadata.name"},
		"service":    {relay, `{"metadata":{"name":"c"},"webhooks":[{"name":"a","clientConfig":{"service":{"namespace":"n","name":"s"}}}]}`, "clientConfig.service is not relayed, since the target's service proxy"},
		"no URL":     {relay, `{"metadata":{"name":"c"},"webhooks":[{"name":"a","clientConfig":{}}]}`, "clientConfig.url only"},
		"same name":  {relay, `{"metadata":{"name":"c"},"webhooks":[{"name":"a","clientConfig":{"url":"https://x"}},{"name":"a","clientConfig":{"url":"https://y"}}]}`, "must be set and unique"},
		"no JSON cc": {relay, `{"metadata":{"name":"c"},"webhooks":[{"name":"a","clientConfig":"x"}]}`, "does not decode"},
	} {
		_, err := relayHandler(c.relay).relayWebhooks(context.Background(), record.Mutating, []byte(c.body))
		var refused *errWebhookRefused
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal saying %q", name, err, c.want)
		}
	}
}

func TestPatchWebhookConfigRefusesApply(t *testing.T) {
	h := relayHandler(&AdmissionRelayConfig{URL: "https://relay", CABundle: []byte("ca")})
	out := httptest.NewRequest(http.MethodPatch, "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/c", nil)
	for _, ct := range []string{"application/apply-patch+yaml", "application/apply-patch+cbor", "text/plain"} {
		_, err := h.patchWebhookConfig(context.Background(), out, url.URL{Scheme: "https", Host: "target.invalid"}, record.Validating, ct, []byte(`{}`))
		var refused *errWebhookPatch
		if !errors.As(err, &refused) || refused.status.Code != http.StatusUnsupportedMediaType || !strings.Contains(err.Error(), "server-side apply is not supported") {
			t.Errorf("%s: %v, want a 415 saying server-side apply is not supported", ct, err)
		}
	}
}
