package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
)

// RetryAfterSeconds is what a 503 asks clients to wait.
const RetryAfterSeconds = "5"

// ReasonBadGateway is the Status reason of a target that answered unusably or not at all
// for reasons a retry does not fix (name resolution, TLS verification).
const ReasonBadGateway metav1.StatusReason = "BadGateway"

// ReasonLoopDetected is the Status reason of a request refused for passing too many mount
// proxies.
const ReasonLoopDetected metav1.StatusReason = "LoopDetected"

// statusForError maps a failure to reach the target onto a Status in a fixed vocabulary that
// says what failed, never what answered: root causes ("connection refused", a TLS alert, the
// names a certificate is valid for) would make the proxy a scanner of every network it
// reaches. The root cause goes to the server's log. Codes: 403 when the target policy
// refuses the target, 504 for timeouts, 503 (retry later) when the target refuses or cannot
// be routed to, 502 for other dial, TLS and protocol failures. Messages name the target's
// address as the mount names it, never credentials.
func statusForError(target string, err error) *metav1.Status {
	var policyErr *targetpolicy.Error
	var netErr net.Error
	switch {
	case errors.As(err, &policyErr):
		return newStatus(http.StatusForbidden, metav1.StatusReasonForbidden, policyErr.Error())
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return newStatus(http.StatusGatewayTimeout, metav1.StatusReasonTimeout, fmt.Sprintf("timed out reaching the mount's target %s", target))
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ECONNRESET):
		return newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf("cannot connect to the mount's target %s: it is unreachable", target))
	}
	var certErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknownAuthority):
		return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("the mount's target %s presented a certificate that does not verify: no authority the mount trusts signed it", target))
	case errors.As(err, &hostnameErr):
		return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("the mount's target %s presented a certificate that does not verify: it is not valid for the target's name", target))
	case errors.As(err, &invalidErr) && invalidErr.Reason == x509.Expired:
		return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("the mount's target %s presented a certificate that does not verify: it has expired or is not valid yet", target))
	case errors.As(err, &certErr) || errors.As(err, &invalidErr):
		return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("the mount's target %s presented a certificate that does not verify", target))
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.As(err, &dnsErr), errors.As(err, &opErr) && opErr.Op == "dial":
		return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("cannot connect to the mount's target %s", target))
	case errors.As(err, &recordErr), errors.As(err, &opErr) && opErr.Op == "remote error":
		return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("the mount's target %s did not answer as a Kubernetes API server over TLS", target))
	}
	return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("the mount's target %s did not answer as a Kubernetes API server", target))
}

// probeAnswerError says why a probe's answer does not show a healthy Kubernetes API server,
// in the same fixed vocabulary: the status code that answered stays out of the status, which
// every reader of the Mount sees.
func probeAnswerError(target string, code int) error {
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return fmt.Errorf("the mount's target %s did not accept the mount's credentials", target)
	case code >= 500:
		return fmt.Errorf("the mount's target %s reports that it is not ready", target)
	}
	return fmt.Errorf("the mount's target %s did not answer as a Kubernetes API server", target)
}

func newStatus(code int32, reason metav1.StatusReason, message string) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     code,
		Reason:   reason,
		Message:  message,
	}
}

// writeStatus writes s as JSON, with Retry-After on 503.
func writeStatus(w http.ResponseWriter, s *metav1.Status) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if s.Code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", RetryAfterSeconds)
	}
	w.WriteHeader(int(s.Code))
	_ = json.NewEncoder(w).Encode(s)
}
