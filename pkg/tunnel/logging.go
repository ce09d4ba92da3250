package tunnel

import (
	"io"
	"strings"

	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

// BridgeLogrus sends remotedialer's logs, which it writes through the global logrus logger,
// to logger. Call it once as the process starts, before any session: logrus is global state
// of the library, not of this code. remotedialer logs client keys (a mount's logical cluster
// and UID, never a credential), addresses and errors; its Info lines (one per connect) go to
// V(2), debug and trace to V(6), warnings and errors to the default level.
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
	switch e.Level {
	case logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel, logrus.WarnLevel:
		h.logger.Info(msg, append(kv, "level", e.Level.String())...)
	case logrus.InfoLevel:
		h.logger.V(2).Info(msg, kv...)
	default:
		h.logger.V(6).Info(msg, kv...)
	}
	return nil
}
