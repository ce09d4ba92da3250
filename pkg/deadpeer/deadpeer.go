package deadpeer

import (
	"context"
	"fmt"
	"net"
	"time"

	"k8s.io/klog/v2"
)

// After is how long a connection may go unanswered by its peer before it is given up: the
// same bound as the hub's silent agents and the proxy's HTTP/2 pings (10 s + 10 s).
const After = 20 * time.Second

// The keepalive probes of an idle connection: the first after idle, then every interval;
// idle + count x interval = After.
const (
	idle     = 10 * time.Second
	interval = 5 * time.Second
	count    = 2
)

// Tune makes conn (a TCP connection, or a TLS connection or other wrapper over one that has a
// NetConn method) end with an error once its peer has not answered for After: keepalive
// probes while it is idle, and, where the system has it, TCP_USER_TIMEOUT while data it sent
// is not acknowledged (a write to a vanished peer is otherwise retried for about 15 min).
// Other connections (Unix sockets, a tunnel's virtual connections) are left as they are.
func Tune(conn net.Conn) error {
	tcp, ok := tcpOf(conn)
	if !ok {
		return nil
	}
	if err := tcp.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: count}); err != nil {
		return fmt.Errorf("setting TCP keepalive: %w", err)
	}
	if err := setUserTimeout(tcp, After); err != nil {
		return fmt.Errorf("setting TCP_USER_TIMEOUT: %w", err)
	}
	return nil
}

// TuneOrLog is Tune for callers whose connection works without it (it is only given up later
// when its peer vanishes): a failure is logged and conn returned as it is.
func TuneOrLog(ctx context.Context, conn net.Conn) net.Conn {
	if err := Tune(conn); err != nil {
		klog.FromContext(ctx).V(2).Info("Connection keeps the system's dead-peer timeouts", "remote", conn.RemoteAddr().String(), "err", err.Error())
	}
	return conn
}

// tcpOf finds the TCP connection under conn.
func tcpOf(conn net.Conn) (*net.TCPConn, bool) {
	for range 8 { // wrappers nest a few deep at most
		switch c := conn.(type) {
		case *net.TCPConn:
			return c, true
		case interface{ NetConn() net.Conn }: // *tls.Conn among them
			conn = c.NetConn()
		default:
			return nil, false
		}
	}
	return nil, false
}
