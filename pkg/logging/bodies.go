package logging

import (
	"context"

	"k8s.io/klog/v2"
)

// MaxVerbosityWithoutBodies is the highest verbosity at which client-go logs no request or
// response body: from -v=8 on it writes them whole (hex-dumped when they are protobuf),
// through the logger of the request's context.
const MaxVerbosityWithoutBodies = 7

// WithoutBodies returns ctx with a logger that drops every message above
// MaxVerbosityWithoutBodies, whatever -v says, for calls whose bodies carry credentials
// (the reads of Secrets).
func WithoutBodies(ctx context.Context) context.Context {
	logger := klog.FromContext(ctx)
	inner := logger.GetSink()
	if d, ok := inner.(callDepthSink); ok {
		inner = d.WithCallDepth(1) // the frame of cappedSink's Info or Error
	}
	return klog.NewContext(ctx, logger.WithSink(cappedSink{LogSink: inner, max: MaxVerbosityWithoutBodies}))
}

// callDepthSink is logr's CallDepthLogSink, which klog does not re-export.
type callDepthSink interface {
	WithCallDepth(depth int) klog.LogSink
}

// cappedSink passes on messages up to max verbosity, and errors. It keeps its cap through
// WithValues, WithName and WithCallDepth.
type cappedSink struct {
	klog.LogSink
	max int
}

func (s cappedSink) Enabled(level int) bool { return level <= s.max && s.LogSink.Enabled(level) }

func (s cappedSink) Info(level int, msg string, keysAndValues ...any) {
	if level <= s.max {
		s.LogSink.Info(level, msg, keysAndValues...)
	}
}

func (s cappedSink) Error(err error, msg string, keysAndValues ...any) {
	s.LogSink.Error(err, msg, keysAndValues...)
}

func (s cappedSink) WithValues(keysAndValues ...any) klog.LogSink {
	return cappedSink{LogSink: s.LogSink.WithValues(keysAndValues...), max: s.max}
}

func (s cappedSink) WithName(name string) klog.LogSink {
	return cappedSink{LogSink: s.LogSink.WithName(name), max: s.max}
}

// WithCallDepth keeps the callers' file and line in the log when the sink supports it.
func (s cappedSink) WithCallDepth(depth int) klog.LogSink {
	if d, ok := s.LogSink.(callDepthSink); ok {
		return cappedSink{LogSink: d.WithCallDepth(depth), max: s.max}
	}
	return s
}
