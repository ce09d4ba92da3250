package tunnel

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestFromAgent: the texts of Go's dialer that an agent's failed dial arrives as name their
// failures; other texts, and errors that are more than a text, stay as they are.
func TestFromAgent(t *testing.T) {
	for _, c := range []struct {
		text    string
		errno   syscall.Errno
		timeout bool
		dns     bool
	}{
		{text: "dial tcp 10.0.0.1:6443: connect: connection refused", errno: syscall.ECONNREFUSED},
		{text: "dial tcp [fd00::1]:6443: connect: no route to host", errno: syscall.EHOSTUNREACH},
		{text: "dial tcp 10.0.0.1:6443: connect: network is unreachable", errno: syscall.ENETUNREACH},
		{text: "dial tcp 10.0.0.1:6443: i/o timeout", timeout: true},
		{text: "dial tcp: lookup api.example.com on 10.96.0.10:53: no such host", dns: true},
		{text: "dial tcp 10.0.0.1:6443: something else"},
		{text: "connection refused"},
		{text: "EOF from the target, connection refused"},
	} {
		got := fromAgent(errors.New(c.text))
		var netErr net.Error
		var dnsErr *net.DNSError
		timeout := errors.As(got, &netErr) && netErr.Timeout()
		if got.Error() != c.text || timeout != c.timeout || errors.As(got, &dnsErr) != c.dns ||
			(c.errno != 0) != errors.Is(got, c.errno) {
			t.Errorf("%q: %#v (timeout %v)", c.text, got, timeout)
		}
		for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH} {
			if errno != c.errno && errors.Is(got, errno) {
				t.Errorf("%q is %v", c.text, errno)
			}
		}
	}
	wrapped := &net.OpError{Op: "dial", Err: errors.New("dial tcp: connection refused")}
	if got := fromAgent(wrapped); got != error(wrapped) {
		t.Errorf("an error with a cause of its own became %#v", got)
	}
}
