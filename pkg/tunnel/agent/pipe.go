package agent

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// pipeListener serves an http.Handler in-process over pipes: each dial of tunnel.AddressAgent
// is one end of a net.Pipe, whose other end the handler's server accepts. Nothing listens on
// the network.
type pipeListener struct {
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	server *http.Server
}

func newPipeListener(handler http.Handler) *pipeListener {
	l := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	l.server = &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = l.server.Serve(l) }()
	return l
}

// dial returns a connection to the handler.
func (l *pipeListener) dial() (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, errors.New("the agent is stopping")
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting (the server closes its listener with this).
func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// stop stops the handler's server and closes its connections.
func (l *pipeListener) stop() {
	_ = l.Close()
	_ = l.server.Close()
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "agent" }
