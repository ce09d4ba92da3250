package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestRootDirectoryInUse starts a second server on the root directory of a running one: it
// fails at once and names the directory and the first server's process. A server killed
// with SIGKILL leaves its lock file behind, which does not keep the next one out.
func TestRootDirectoryInUse(t *testing.T) {
	bin := framework.BuildBinary(t)
	root := t.TempDir()
	first := bin.Start(t, root, "--status-controller=false")

	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, string(bin), "--root-directory", root, "--secure-port", strconv.Itoa(port))
	start := time.Now()
	out, err := second.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("the second server was still running after %v:\n%s", took.Round(time.Millisecond), out)
	}
	var exit *exec.ExitError
	want := fmt.Sprintf("root directory %s in use (%s is locked by process %d)", root, filepath.Join(root, server.LockFile), first.Cmd.Process.Pid)
	if !errors.As(err, &exit) || !strings.Contains(string(out), want) {
		t.Fatalf("second server: %v, want an exit with %q:\n%s", err, want, out)
	}
	t.Logf("the second server exited after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(string(out)))
	if _, err := first.Client.MountsV1alpha1().Mounts().Create(context.Background(), urlMount("after"), metav1.CreateOptions{}); err != nil {
		t.Errorf("the first server after the second one's attempt: %v", err)
	}

	if err := first.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.Exited()
	if _, err := os.Stat(filepath.Join(root, server.LockFile)); err != nil {
		t.Fatalf("the killed server's lock file: %v", err)
	}
	third := bin.Start(t, root, "--status-controller=false")
	if _, err := third.Client.MountsV1alpha1().Mounts().Get(context.Background(), "after", metav1.GetOptions{}); err != nil {
		t.Errorf("after a SIGKILL and a restart: %v", err)
	}
}
