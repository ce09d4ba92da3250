package proxy

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
)

// TestWebhookClientFollowsNoRedirect: the admission relay calls a webhook at the URL it was
// registered with; a webhook answering 307 (to plain http, to an address of the operator's)
// gets its answer taken as it is, and the address it names never sees the AdmissionReview.
func TestWebhookClientFollowsNoRedirect(t *testing.T) {
	var elsewhere atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(internal.Close)
	hook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, internal.URL+"/internal", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(hook.Close)
	p := &Proxier{Transports: NewTransports(TransportOptions{Policy: targetpolicy.New(targetpolicy.Config{AllowPlainHTTP: true})}, nil)}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw})
	client, err := p.WebhookClient(ca, hook.URL)
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Post(hook.URL, "application/json", strings.NewReader(`{"kind":"AdmissionReview"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusTemporaryRedirect || elsewhere.Load() != 0 {
		t.Errorf("answer %d, requests at the redirect's address %d; want 307 and none", res.StatusCode, elsewhere.Load())
	}
}
