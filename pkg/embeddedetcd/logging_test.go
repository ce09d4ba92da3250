package embeddedetcd

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/zap"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

func bufferLogger(v int) (klog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&buf), textlogger.Verbosity(v))), &buf
}

func TestZapLoggerWritesThroughKlog(t *testing.T) {
	for _, c := range []struct {
		name      string
		v         int
		level     string
		want, not []string
	}{
		{"verbosity 0", 0, "debug",
			[]string{`"compaction failed" err="disk full" etcdCaller="embeddedetcd/logging_test.go:`, `"slow fdatasync" logger="raft"`, `took="1s"`},
			[]string{"applied index", "single port", "debug detail"}},
		{"verbosity 3", 3, "debug",
			[]string{`"applied index"`, `index=5`, `"Running http and grpc server on single port. This is not recommended for production."`},
			[]string{"debug detail"}},
		{"verbosity 5", 5, "debug", []string{`"debug detail"`}, nil},
		{"level error", 5, "error", []string{`"compaction failed"`}, []string{"slow fdatasync", "applied index", "debug detail"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			logger, buf := bufferLogger(c.v)
			level := zap.NewAtomicLevel()
			if err := level.UnmarshalText([]byte(c.level)); err != nil {
				t.Fatal(err)
			}
			lg := newZapLogger(logger, level)
			lg.Error("compaction failed", zap.Error(errors.New("disk full")))
			lg.Named("raft").Warn("slow fdatasync", zap.Duration("took", 1e9))
			lg.Warn("Running http and grpc server on single port. This is not recommended for production.")
			lg.With(zap.Int("index", 5)).Info("applied index")
			lg.Debug("debug detail")
			out := buf.String()
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("log lacks %s:\n%s", w, out)
				}
			}
			for _, n := range c.not {
				if strings.Contains(out, n) {
					t.Errorf("log has %s:\n%s", n, out)
				}
			}
			// Errors stay errors.
			if !regexp.MustCompile(`(?m)^E\d+ .*"compaction failed"`).MatchString(out) {
				t.Errorf("etcd's error is no klog error:\n%s", out)
			}
			if strings.Contains(out, `"level"`) {
				t.Errorf("zap's own encoding leaked:\n%s", out)
			}
		})
	}
}

// TestEtcdLogsThroughKlog starts a real etcd with a klog logger: what it logs arrives there.
func TestEtcdLogsThroughKlog(t *testing.T) {
	logger, buf := bufferLogger(3)
	s, err := Start(klog.NewContext(context.Background(), logger), Options{Directory: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	out := buf.String()
	// etcd's info about its own start, through the logger, with etcd's caller.
	if !strings.Contains(out, `logger="embedded-etcd"`) || !strings.Contains(out, `etcdCaller="embed/etcd.go:`) {
		t.Errorf("etcd's logs did not reach klog:\n%s", out)
	}
	if strings.Contains(out, `{"level"`) {
		t.Errorf("etcd logged in its own JSON:\n%s", out)
	}
}
