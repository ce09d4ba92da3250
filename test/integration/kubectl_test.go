package integration

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// kubectl runs the real kubectl against the server's admin kubeconfig.
func kubectl(t *testing.T, s *framework.Server, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is required on PATH: %v", err)
	}
	cmd := exec.Command(path, append([]string{"--kubeconfig", s.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustKubectl(t *testing.T, s *framework.Server, args ...string) string {
	t.Helper()
	out, err := kubectl(t, s, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func examples(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "artifacts", "examples")
}

func TestKubectl(t *testing.T) {
	s := framework.StartInProcess(t, "", apiOnly)

	// Start a watch first and read it last.
	kubectlPath, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is required on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watchCmd := exec.CommandContext(ctx, kubectlPath, "--kubeconfig", s.Kubeconfig, "get", "mounts", "--watch", "--output-watch-events", "-o", "custom-columns=EVENT:.type,NAME:.object.metadata.name,PHASE:.object.status.phase", "--no-headers")
	watchOut, err := watchCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watchCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watchCmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		scanner := bufio.NewScanner(watchOut)
		for scanner.Scan() {
			lines <- strings.Join(strings.Fields(scanner.Text()), " ")
		}
		close(lines)
	}()
	// The watch is established once kubectl has listed; give it a moment before changing
	// anything, and then rely on resourceVersions to see every later change.
	waitForWatch(t, s)

	out := mustKubectl(t, s, "apply", "-f", examples(t))
	if !strings.Contains(out, "mount.mounts.kcp.io/prod created") || !strings.Contains(out, "mount.mounts.kcp.io/team-a created") {
		t.Errorf("apply: %s", out)
	}

	out = mustKubectl(t, s, "get", "mounts")
	if header := strings.Fields(strings.SplitN(out, "\n", 2)[0]); strings.Join(header, " ") != "NAME TYPE PHASE READY REASON AGE" {
		t.Errorf("table header: %q", header)
	}
	// A new mount is Initializing; the status controller may already have probed it (and
	// set its Ready condition) by the time kubectl lists.
	if !regexpMatch(`(?m)^prod\s+URL\s+(Initializing|Connecting)\s+(\S+\s+){0,2}\d+s$`, out) || !regexpMatch(`(?m)^team-a\s+Workspace\s+(Initializing|Connecting)\s+(\S+\s+){0,2}\d+s$`, out) {
		t.Errorf("table rows:\n%s", out)
	}
	out = mustKubectl(t, s, "get", "mnt", "-o", "wide")
	if !regexpMatch(`(?m)^NAME\s+TYPE\s+PHASE\s+READY\s+REASON\s+AGE\s+URL\s+TARGET\s+AGENT\s+IDENTITY$`, out) || !strings.Contains(out, "Secret/prod/remote-kubeconfig") || !strings.Contains(out, "Workspace/root:org:team-a") {
		t.Errorf("wide table:\n%s", out)
	}

	out = mustKubectl(t, s, "explain", "mount.spec.type")
	for _, want := range []string{"KIND:       Mount", "FIELD: type <string>", "Redirect", "Workspace", "URL"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	out = mustKubectl(t, s, "explain", "mount.spec")
	for _, want := range []string{`ref\s+<\w+>\n`, `identity\s+<MountIdentity>`, `caBundle\s+<string>`, `timeouts\s+<MountTimeouts>`} {
		if !regexpMatch(want, out) {
			t.Errorf("explain mount.spec lacks %s:\n%s", want, out)
		}
	}
	if out := mustKubectl(t, s, "api-resources", "--api-group", "mounts.kcp.io"); !regexpMatch(`mounts\s+mnt\s+mounts.kcp.io/v1alpha1\s+false\s+Mount`, out) {
		t.Errorf("api-resources:\n%s", out)
	}

	// Server-side apply with kubectl, then a second field manager without --force-conflicts.
	out = mustKubectl(t, s, "apply", "--server-side", "--field-manager", "platform", "-f", filepath.Join(examples(t), "mount-url.yaml"))
	if !strings.Contains(out, "serverside-applied") {
		t.Errorf("server-side apply: %s", out)
	}

	// A status patch through the subresource; spec in it is ignored.
	mustKubectl(t, s, "patch", "mount", "prod", "--subresource=status", "--type=merge",
		"-p", `{"status":{"phase":"Ready","URL":"https://hub.example/apis/mounts.kcp.io/v1alpha1/mounts/prod/proxy"}}`)
	out = mustKubectl(t, s, "get", "mounts", "--field-selector", "status.phase=Ready", "-o", "name")
	if strings.TrimSpace(out) != "mount.mounts.kcp.io/prod" {
		t.Errorf("field selector status.phase=Ready: %q", out)
	}
	out = mustKubectl(t, s, "get", "mounts", "--field-selector", "spec.type=Workspace", "-o", "name")
	if strings.TrimSpace(out) != "mount.mounts.kcp.io/team-a" {
		t.Errorf("field selector spec.type=Workspace: %q", out)
	}

	// kubectl wait on the phase, as users and kcp tooling do.
	mustKubectl(t, s, "wait", "--for=jsonpath={.status.phase}=Ready", "mount/prod", "--timeout=10s")

	// Invalid input: kubectl shows the field path.
	out, err = kubectl(t, s, "patch", "mount", "prod", "--type=merge", "-p", `{"spec":{"ref":{"kind":"ConfigMap"}}}`)
	if err == nil || !strings.Contains(out, `spec.ref.kind: Unsupported value: "ConfigMap"`) {
		t.Errorf("invalid patch: err %v\n%s", err, out)
	}

	mustKubectl(t, s, "delete", "mount", "team-a")

	want := []string{"ADDED prod", "ADDED team-a", "MODIFIED prod Ready", "DELETED team-a"}
	var got []string
	timeout := time.After(30 * time.Second)
	for _, w := range want {
		for {
			var line string
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("kubectl watch ended early; got %v", got)
				}
				line = l
			case <-timeout:
				t.Fatalf("kubectl watch: got %v, want %v in order", got, want)
			}
			got = append(got, line)
			if strings.HasPrefix(line, w) {
				break
			}
		}
	}
}

// waitForWatch waits until the server serves a watch on mounts, visible in its
// apiserver_longrunning_requests metric.
func waitForWatch(t *testing.T, s *framework.Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		raw, err := s.Client.MountsV1alpha1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
		if err == nil && regexpMatch(`apiserver_longrunning_requests\{[^}]*resource="mounts"[^}]*verb="WATCH"[^}]*\} [1-9]`, string(raw)) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("kubectl --watch did not register a watch within 30s")
}
