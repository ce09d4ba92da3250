package tunnel

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestFromAgent: the texts of an agent's failed dial become a TargetDialError that says which
// failure Go's dialer wrote; other texts, and errors that are more than a text, stay as
// they are.
func TestFromAgent(t *testing.T) {
	for _, c := range []struct {
		text, reason string
		errno        syscall.Errno
		timeout      bool
	}{
		{text: "dial tcp 10.0.0.1:6443: connect: connection refused", reason: "it is unreachable", errno: syscall.ECONNREFUSED},
		{text: "dial tcp [fd00::1]:6443: connect: no route to host", reason: "it is unreachable", errno: syscall.EHOSTUNREACH},
		{text: "dial tcp 10.0.0.1:6443: connect: network is unreachable", reason: "it is unreachable", errno: syscall.ENETUNREACH},
		{text: "dial tcp 10.0.0.1:6443: i/o timeout", reason: "it timed out", timeout: true},
		{text: "dial tcp: lookup api.example.com on 10.96.0.10:53: no such host", reason: "no such host"},
		{text: "dial tcp 10.0.0.1:6443: something else"},
	} {
		got := fromAgent(errors.New(c.text))
		var dialErr *TargetDialError
		var netErr net.Error
		if !errors.As(got, &dialErr) || got.Error() != c.text || dialErr.Reason() != c.reason ||
			(errors.As(got, &netErr) && netErr.Timeout()) != c.timeout || (c.errno != 0) != errors.Is(got, c.errno) {
			t.Errorf("%q: %#v", c.text, got)
		}
	}
	for _, err := range []error{
		errors.New("connection refused"),
		errors.New("EOF from the target, dial tcp: connection refused"),
		&net.OpError{Op: "dial", Err: errors.New("dial tcp: connection refused")},
	} {
		if got := fromAgent(err); got != err {
			t.Errorf("%v became %#v", err, got)
		}
	}
}
