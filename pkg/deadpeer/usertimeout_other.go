//go:build !linux

package deadpeer

import (
	"net"
	"time"
)

// Elsewhere unacknowledged data is retried as long as the system does; keepalive still ends
// an idle connection.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }

// Tuned reports whether Tune set conn's options; elsewhere it cannot tell.
func Tuned(net.Conn) (bool, error) { return false, nil }
