package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/util/httpstream"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// RetryAfterSeconds is what a 429 (or a 503 of the rewrite memory budget) of this server's own
// bounds asks clients to wait. Failures
// of the hop to a target carry no Retry-After: client-go retries an answer with one ten
// times, sleeping as told, and kubectl waited 50 to 160 s for a dead mount's reason. Clients
// that run on (reflectors, work queues) back off by themselves.
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
// refuses the target, 504 for timeouts, 503 when nothing accepts the connection or no route
// leads to the target, 502 for other dial, TLS and protocol failures, among them a tunnel
// lost under the request (tunnel.ErrLost), an agent that could not connect to its target
// (tunnel.TargetDialError), and a target that accepted the connection and cut it (a reset
// then depends on whether the target had read all the request when it closed: it is no sign
// of an absent target). Messages name the target's address as the mount names it, never
// credentials.
func statusForError(target string, err error) *metav1.Status {
	var policyErr *targetpolicy.Error
	var netErr net.Error
	var agentDialErr *tunnel.TargetDialError
	switch {
	case errors.As(err, &policyErr):
		return newStatus(http.StatusForbidden, metav1.StatusReasonForbidden, policyErr.Error())
	case errors.Is(err, tunnel.ErrLost):
		return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("the tunnel to the mount's target %s was lost before the target answered: the agent's session ended (the agent went away or attached again) or the replica holding it went away; what the target did with the request is unknown", target))
	case errors.As(err, &agentDialErr):
		// The agent is there and its own connection to the target failed: the 502 of the
		// agent that adds its own credentials (pkg/tunnel/agent), not the 503 of no agent.
		message := fmt.Sprintf("the agent could not reach the mount's target %s", target)
		if reason := agentDialErr.Reason(); reason != "" {
			message += ": " + reason
		}
		return newStatus(http.StatusBadGateway, ReasonBadGateway, message)
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return newStatus(http.StatusGatewayTimeout, metav1.StatusReasonTimeout, fmt.Sprintf("timed out reaching the mount's target %s", target))
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf("cannot connect to the mount's target %s: it is unreachable", target))
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("the mount's target %s closed the connection before it answered", target))
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

// writeStatus writes s as JSON, with its kind: client-go decodes a Status only by its kind,
// and without it shows its generic text instead of the message.
func writeStatus(w http.ResponseWriter, s *metav1.Status) {
	s.Kind, s.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(s.Code))
	_ = json.NewEncoder(w).Encode(s)
}

// hopFailure is the answer to a request whose hop to the mount's target failed: the Status
// naming the mount, sent as JSON, or as text to a discovery root (isDiscoveryRoot).
type hopFailure struct {
	status    *metav1.Status
	innerPath string
}

// isDiscoveryRoot says whether a proxied request is a GET of a discovery root, /api or /apis.
// client-go's discovery client reads the answers to these with Result.Raw, which never
// decodes a Status: of an error answer it keeps only the text of a text/plain body, and that
// only for codes it has no message of its own for (among them 502, not 503 or 504). Every
// kubectl command begins there when its discovery cache is cold, so that is where kubectl
// users see a failure of the hop.
func isDiscoveryRoot(req *http.Request, innerPath string) bool {
	p := strings.Trim(innerPath, "/")
	return (req.Method == http.MethodGet || req.Method == http.MethodHead) && (p == "api" || p == "apis") && !httpstream.IsUpgradeRequest(req)
}

// newHopFailure returns the answer to a failed hop of mount: s, its message prefixed with the
// mount's name unless it names the mount already.
func newHopFailure(mount string, s *metav1.Status, innerPath string) hopFailure {
	named := *s
	if prefix := fmt.Sprintf("mount %q", mount); !strings.HasPrefix(named.Message, prefix) {
		named.Message = prefix + ": " + named.Message
	}
	return hopFailure{status: &named, innerPath: innerPath}
}

// parts returns the code, header and body of the answer to req: the Status
// as JSON, or for a discovery root its message as text/plain with code 502
// (isDiscoveryRoot), with single quotes for double ones, which client-go would escape when it
// quotes the message. Never a Retry-After (RetryAfterSeconds).
func (f hopFailure) parts(req *http.Request) (int, http.Header, []byte) {
	h := http.Header{}
	h.Set("X-Content-Type-Options", "nosniff")
	if isDiscoveryRoot(req, f.innerPath) {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		return http.StatusBadGateway, h, []byte(strings.ReplaceAll(f.status.Message, `"`, "'") + "\n")
	}
	h.Set("Content-Type", "application/json")
	f.status.Kind, f.status.APIVersion = "Status", "v1" // client-go decodes a Status by its kind
	body, _ := json.Marshal(f.status)
	return int(f.status.Code), h, append(body, '\n')
}

// ServeHTTP writes the answer.
func (f hopFailure) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	code, h, body := f.parts(req)
	for k, v := range h {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// response returns the answer as the response to req.
func (f hopFailure) response(req *http.Request) *http.Response {
	code, h, body := f.parts(req)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", code, http.StatusText(code)),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// credentialsRefused is the Status of a target that answered 401: the caller's own
// credentials never reach a target, so what it refused are the mount's (or the agent's, or
// this server's kcp credentials). Passed through, the 401 made kubectl say "You must be
// logged in to the server" about the caller's login to this server, and may start a
// credential plugin's login.
func credentialsRefused(m *mounts.Mount, target string) *metav1.Status {
	var msg string
	switch {
	case m.Spec.Type == mounts.MountTypeWorkspace:
		msg = fmt.Sprintf("kcp (%s) did not accept this server's kcp credentials (--kcp-kubeconfig)", target)
	case m.Spec.Tunnel != nil && m.Spec.Tunnel.Credentials == mounts.TunnelCredentialsAgent:
		msg = "the target did not accept the credentials of the mount's agent (its --kubeconfig or ServiceAccount)"
	default:
		msg = fmt.Sprintf("the mount's target %s did not accept the mount's credentials: the kubeconfig of Secret %s/%s needs credentials that the target accepts",
			target, m.Spec.Ref.Namespace, m.Spec.Ref.Name)
	}
	return newStatus(http.StatusBadGateway, ReasonBadGateway, msg)
}
