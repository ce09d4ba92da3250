package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// statusForError says what failed in a fixed vocabulary, with the codes the design requires,
// and never the root cause, for failures produced by real listeners.
func TestStatusForErrorSaysWhatFailed(t *testing.T) {
	closed, _ := acceptCounter(t)
	closedURL := "https://" + closed.Addr().String()
	closed.Close()
	plain, _ := countingServer(t, false, "")
	untrusted, _ := countingServer(t, true, "")
	tests := []struct {
		name, host string
		code       int32
		message    string
	}{
		{"closed port", closedURL, http.StatusServiceUnavailable, "cannot connect to the mount's target"},
		{"open port without TLS", strings.Replace(plain.URL, "http:", "https:", 1), http.StatusBadGateway, "did not answer as a Kubernetes API server over TLS"},
		{"untrusted certificate", untrusted.URL, http.StatusBadGateway, "presented a certificate that does not verify: no authority the mount trusts signed it"},
	}
	tr := NewTransports(TransportOptions{ConnectTimeout: 5 * time.Second}, nil)
	for _, tt := range tests {
		tgt, err := tr.Get(context.Background(), types.UID(tt.name), TargetKey{SecretName: tt.name}, func() (*rest.Config, error) {
			return &rest.Config{Host: tt.host, BearerToken: "mount-token"}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = get(t, tgt, "/version")
		if err == nil {
			t.Fatalf("%s: no error", tt.name)
		}
		s := statusForError(tgt.Base.Host, err)
		if s.Code != tt.code || !strings.Contains(s.Message, tt.message) {
			t.Errorf("%s: %v -> %d %q, want %d %q", tt.name, err, s.Code, s.Message, tt.code, tt.message)
		}
		for _, cause := range []string{"refused", "connect:", "tls:", "x509", "first record", "HTTP", "EOF", "mount-token"} {
			if strings.Contains(s.Message, cause) {
				t.Errorf("%s: %q carries the root cause %q", tt.name, s.Message, cause)
			}
		}
	}
	for code, want := range map[int]string{401: "did not accept the mount's credentials", 403: "did not accept the mount's credentials",
		404: "did not answer as a Kubernetes API server", 302: "did not answer as a Kubernetes API server", 500: "reports that it is not ready"} {
		if err := probeAnswerError("t:443", code); !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), strconv.Itoa(code)) {
			t.Errorf("probe answer %d: %q, want %q without the code", code, err, want)
		}
	}
}
