package embeddedetcd

import (
	"maps"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// etcd logs through zap; newZapLogger gives it a zap logger whose entries go to a klog logger,
// so that they come out in the server's format (--logging-format) and verbosity (-v) rather
// than as etcd's own JSON. Structured logging has no warning level: errors stay errors,
// warnings become V(0) infos, etcd's infos V(3) and its debug messages V(5).
func newZapLogger(logger klog.Logger, level zap.AtomicLevel) *zap.Logger {
	return zap.New(&klogCore{logger: logger, level: level}, zap.AddCaller())
}

// verbosity is the klog verbosity of each zap level below error.
func verbosity(l zapcore.Level) int {
	switch {
	case l >= zapcore.WarnLevel:
		return 0
	case l >= zapcore.InfoLevel:
		return 3
	default:
		return 5
	}
}

// quietWarnings are warnings of etcd that do not apply to an etcd that serves one process on
// loopback; they are logged at V(3) like infos.
var quietWarnings = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

// klogCore is a zapcore.Core that writes to a klog logger.
type klogCore struct {
	logger klog.Logger
	// level is the least etcd level logged at all; Close raises it to silence etcd.
	level zap.AtomicLevel
	// fields are those of zap's With, before the entry's own.
	fields []zapcore.Field
}

func (c *klogCore) Enabled(l zapcore.Level) bool {
	return c.level.Enabled(l) && (l >= zapcore.ErrorLevel || c.logger.V(verbosity(l)).Enabled())
}

func (c *klogCore) With(fields []zapcore.Field) zapcore.Core {
	return &klogCore{logger: c.logger, level: c.level, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *klogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *klogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	logger := c.logger
	if e.LoggerName != "" {
		logger = logger.WithName(e.LoggerName)
	}
	var err error
	kvs := make([]any, 0, 2*(len(c.fields)+len(fields))+2)
	if e.Caller.Defined {
		// The klog header names this file; the caller in etcd is the one that tells something
		// (under another key than the JSON format's own "caller").
		kvs = append(kvs, "etcdCaller", e.Caller.TrimmedPath())
	}
	for _, group := range [][]zapcore.Field{c.fields, fields} {
		for _, f := range group {
			if f.Type == zapcore.ErrorType && err == nil {
				if fe, ok := f.Interface.(error); ok {
					err = fe
					continue
				}
			}
			enc := zapcore.NewMapObjectEncoder()
			f.AddTo(enc)
			for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
				kvs = append(kvs, k, enc.Fields[k])
			}
		}
	}
	switch {
	case e.Level >= zapcore.ErrorLevel:
		logger.Error(err, e.Message, kvs...)
	default:
		v := verbosity(e.Level)
		if e.Level == zapcore.WarnLevel && quietWarnings[e.Message] {
			v = verbosity(zapcore.InfoLevel)
		}
		if err != nil {
			kvs = append(kvs, "err", err)
		}
		logger.V(v).Info(e.Message, kvs...)
	}
	return nil
}

func (c *klogCore) Sync() error { return nil }
