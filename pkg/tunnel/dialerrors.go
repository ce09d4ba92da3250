package tunnel

import (
	"errors"
	"net"
	"strings"
	"syscall"
)

// agentDialError is an agent's failure to connect to its target as remotedialer passes it on:
// the first 100 bytes of the agent's error text, as a plain error. Go's dialer words each
// failure the same way ("dial tcp 10.0.0.1:6443: connect: connection refused"), so the text
// says which failure it was, and agentDialError says so to errors.Is and errors.As: the proxy
// then answers as for a target it dials itself (unreachable, timed out, no such host) instead
// of saying that the target did not answer as a Kubernetes API server. The agent is a tenant
// and chooses the text: it picks one fixed message over another for its own mount's callers,
// and no word of the text reaches them.
type agentDialError struct {
	text    string
	cause   error
	timeout bool
}

func (e *agentDialError) Error() string   { return e.text }
func (e *agentDialError) Unwrap() error   { return e.cause }
func (e *agentDialError) Timeout() bool   { return e.timeout }
func (e *agentDialError) Temporary() bool { return e.timeout }

var _ net.Error = &agentDialError{}

// fromAgent returns err, an error of a connection through a session, as the failure it names
// when it is the text of an agent's failed dial; anything else as it is.
func fromAgent(err error) error {
	text := err.Error()
	if !strings.HasPrefix(text, "dial ") || errors.Unwrap(err) != nil {
		return err
	}
	e := &agentDialError{text: text}
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
	default:
		return err
	}
	return e
}
