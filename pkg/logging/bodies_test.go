package logging

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// TestWithoutBodies: a context's logger logs up to -v=7 whatever the verbosity, keep the cap
// through names, values and call depth, and report their callers' lines.
func TestWithoutBodies(t *testing.T) {
	var buf bytes.Buffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(10), textlogger.Output(&buf)))
	ctx := WithoutBodies(klog.NewContext(context.Background(), logger))

	l := klog.FromContext(ctx)
	l.V(7).Info("seven")
	l.V(8).Info("Response Body", "body", "s3cr3t")
	l.WithName("reflector").WithValues("k", "v").V(10).Info("Request Body", "body", "s3cr3t")
	l.WithCallDepth(0).V(9).Info("curl", "body", "s3cr3t")
	l.V(8).WithName("x").Info("nested", "body", "s3cr3t")
	l.Error(errors.New("boom"), "failed")
	if l.V(8).Enabled() {
		t.Error("V(8) is enabled")
	}

	out := buf.String()
	if strings.Contains(out, "s3cr3t") {
		t.Errorf("a message above -v=7 was written:\n%s", out)
	}
	for _, want := range []string{"seven", "failed", "boom"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing from the log:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "bodies_test.go:") {
		t.Errorf("the log does not name the caller's file:\n%s", out)
	}
}
