package tunnel

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/sirupsen/logrus"
)

// TestBridgeLogrusQuietOnClosedSessions: what remotedialer warns of at every session's end
// (writing to the WebSocket that closed) is not logged at the default level; other warnings
// and errors are.
func TestBridgeLogrusQuietOnClosedSessions(t *testing.T) {
	var lines []string
	BridgeLogrus(funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 0}))
	t.Cleanup(func() { logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{}) })
	closed := &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}
	logrus.Warnf("[%d] encountered error %q while writing error %q to close remotedialer", 3, closed, "EOF")
	logrus.WithError(closed).Error("Error writing ping")
	logrus.WithError(fmt.Errorf("websocket: close 1006 (abnormal closure): unexpected EOF")).Error("Error writing ping")
	if len(lines) != 0 {
		t.Errorf("logged at the default level: %q", lines)
	}
	logrus.WithError(fmt.Errorf("tls: bad certificate")).Error("Failed to connect to peer")
	if len(lines) != 1 || !strings.Contains(lines[0], "tls: bad certificate") {
		t.Errorf("a real error: %q", lines)
	}
}
