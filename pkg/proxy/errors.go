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

// statusForError maps a failure to reach the target onto a Status: 403 when the target
// policy refuses the target (at dial time or in the TLS handshake), 504 for timeouts, 503
// (retry later) when the target refuses or cannot be routed to, 502 for other dial and TLS
// failures. Messages name the target's address, never credentials.
func statusForError(target string, err error) *metav1.Status {
	var policyErr *targetpolicy.Error
	var netErr net.Error
	switch {
	case errors.As(err, &policyErr):
		return newStatus(http.StatusForbidden, metav1.StatusReasonForbidden, policyErr.Error())
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return newStatus(http.StatusGatewayTimeout, metav1.StatusReasonTimeout, fmt.Sprintf("timed out reaching the mount's target %s", target))
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ECONNRESET):
		return newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf("the mount's target %s is unreachable: %v", target, rootCause(err)))
	}
	var certErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	if errors.As(err, &certErr) || errors.As(err, &unknownAuthority) || errors.As(err, &hostnameErr) {
		return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("the mount's target %s presented a certificate that does not verify: %v", target, rootCause(err)))
	}
	return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("cannot reach the mount's target %s: %v", target, rootCause(err)))
}

func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Err != nil {
			return opErr.Err
		}
		err = next
	}
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
