package tunnel

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/gorilla/websocket"
	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

// BridgeLogrus sends remotedialer's logs, which it writes through the global logrus logger,
// to logger. Call it once as the process starts, before any session: logrus is global state
// of the library, not of this code. remotedialer logs client keys (a mount's logical cluster
// and UID, never a credential), addresses and errors; its Info lines (one per connect) go to
// V(2), debug and trace to V(6), warnings and errors to the default level, except those about
// writing to a WebSocket that closed (every session's end), which go to V(4).
func BridgeLogrus(logger klog.Logger) {
	logrus.SetOutput(io.Discard)
	logrus.SetLevel(logrus.TraceLevel)
	if !logger.V(6).Enabled() {
		// Skip formatting what nobody reads.
		logrus.SetLevel(logrus.InfoLevel)
	}
	logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.AddHook(&klogHook{logger: logger.WithName("remotedialer")})
}

type klogHook struct {
	logger klog.Logger
}

func (h *klogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *klogHook) Fire(e *logrus.Entry) error {
	kv := make([]any, 0, 2*len(e.Data))
	for k, v := range e.Data {
		if err, ok := v.(error); ok {
			v = err.Error()
		}
		kv = append(kv, k, v)
	}
	msg := strings.TrimSpace(e.Message)
	switch {
	case e.Level <= logrus.WarnLevel && closedConnection(msg, e.Data):
		// Every session's end: remotedialer writes (pings, a connection's error) on the
		// WebSocket that just closed. Nothing for an operator to act on.
		h.logger.V(4).Info(msg, kv...)
	case e.Level <= logrus.WarnLevel:
		h.logger.Info(msg, append(kv, "level", e.Level.String())...)
	case e.Level == logrus.InfoLevel:
		h.logger.V(2).Info(msg, kv...)
	default:
		h.logger.V(6).Info(msg, kv...)
	}
	return nil
}

// closedConnection says whether a warning or error of remotedialer is about writing to a
// WebSocket that closed, as at the end of every session.
func closedConnection(msg string, data logrus.Fields) bool {
	closed := func(s string) bool {
		return strings.Contains(s, net.ErrClosed.Error()) || strings.Contains(s, websocket.ErrCloseSent.Error()) || strings.Contains(s, "websocket: close ")
	}
	if closed(msg) {
		return true
	}
	for _, v := range data {
		if err, ok := v.(error); ok && (errors.Is(err, net.ErrClosed) || errors.Is(err, websocket.ErrCloseSent) || closed(err.Error())) {
			return true
		}
	}
	return false
}
