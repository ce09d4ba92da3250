package deadpeer

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

func setUserTimeout(tcp *net.TCPConn, d time.Duration) error {
	raw, err := tcp.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	}); err != nil {
		return err
	}
	return serr
}

// Tuned reports whether Tune set conn's options (for tests of the places that must call it).
func Tuned(conn net.Conn) (bool, error) {
	tcp, ok := tcpOf(conn)
	if !ok {
		return false, nil
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return false, err
	}
	var user, keepIdle int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		if user, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT); serr != nil {
			return
		}
		keepIdle, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
	}); err != nil {
		return false, err
	}
	if serr != nil {
		return false, serr
	}
	return user == int(After.Milliseconds()) && keepIdle == int(idle.Seconds()), nil
}
