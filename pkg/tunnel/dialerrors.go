package tunnel

import (
	"errors"
	"net"
	"strings"
	"syscall"
)

// TargetDialError is an agent's failure to connect to its target, as remotedialer passes it
// on: the first 100 bytes of the agent's error text, as a plain error. The proxy answers it as
// a failure of the agent's hop to the target (a 502 naming the agent), as an agent that adds
// its own credentials does itself, not as the target's answer. Go's dialer words each failure
// the same way ("dial tcp 10.0.0.1:6443: connect: connection refused"), so the text also says
// which failure it was: Unwrap and Timeout tell errors.Is and errors.As. The agent is a tenant
// and chooses the text: it picks one fixed message over another for its own mount's callers,
// and no word of the text reaches them.
type TargetDialError struct {
	text    string
	cause   error
	timeout bool
}

func (e *TargetDialError) Error() string   { return e.text }
func (e *TargetDialError) Unwrap() error   { return e.cause }
func (e *TargetDialError) Timeout() bool   { return e.timeout }
func (e *TargetDialError) Temporary() bool { return e.timeout }

// Reason is what failed, in a fixed vocabulary: "it is unreachable" (refused, no route),
// "it timed out", "no such host", or "" when the text does not say.
func (e *TargetDialError) Reason() string {
	var dnsErr *net.DNSError
	switch {
	case e.timeout:
		return "it timed out"
	case errors.As(e.cause, &dnsErr):
		return "no such host"
	case e.cause != nil:
		return "it is unreachable"
	}
	return ""
}

var _ net.Error = &TargetDialError{}

// fromAgent returns err, an error of a connection through a session, as a TargetDialError
// when it is the text of an agent's failed dial; anything else as it is.
func fromAgent(err error) error {
	text := err.Error()
	if !strings.HasPrefix(text, "dial ") || errors.Unwrap(err) != nil {
		return err
	}
	e := &TargetDialError{text: text}
	switch {
	case strings.HasSuffix(text, "connection refused"):
		e.cause = syscall.ECONNREFUSED
	case strings.HasSuffix(text, "no route to host"):
		e.cause = syscall.EHOSTUNREACH
	case strings.HasSuffix(text, "network is unreachable"):
		e.cause = syscall.ENETUNREACH
	case strings.HasSuffix(text, "i/o timeout"):
		e.timeout = true
	case strings.HasSuffix(text, "no such host"):
		e.cause = &net.DNSError{Err: "no such host", IsNotFound: true}
	}
	return e
}
