package integration

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

func readLog(t *testing.T, p *framework.Process) string {
	t.Helper()
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestBinaryLogs runs the binary as the README does, with --logging-format=json and with the
// default text format: every line comes through klog in the chosen format, the embedded
// etcd's too (at -v=3 etcd's infos show), and none in etcd's own JSON.
func TestBinaryLogs(t *testing.T) {
	bin := framework.BuildBinary(t)

	t.Run("json", func(t *testing.T) {
		p := bin.Start(t, t.TempDir(), "--logging-format=json", "-v=3", "--status-controller=false")
		if err := p.Stop(); err != nil {
			t.Fatalf("exit: %v", err)
		}
		var started, etcd bool
		for i, line := range strings.Split(strings.TrimSpace(readLog(t, p)), "\n") {
			var entry map[string]any
			if err := json.Unmarshal([]byte(line), &entry); err != nil {
				t.Fatalf("line %d is no JSON: %v\n%s", i+1, err, line)
			}
			if _, ok := entry["level"]; ok {
				t.Errorf("line %d is etcd's own JSON: %s", i+1, line)
			}
			if entry["msg"] == nil || entry["ts"] == nil {
				t.Errorf("line %d lacks msg or ts: %s", i+1, line)
			}
			started = started || entry["msg"] == "Starting mount-apiserver"
			etcd = etcd || (entry["logger"] == "mount-apiserver.embedded-etcd" && entry["etcdCaller"] != nil)
		}
		if !started || !etcd {
			t.Errorf("JSON log lacks the start (%v) or a message of etcd (%v)", started, etcd)
		}
	})

	t.Run("text", func(t *testing.T) {
		p := bin.Start(t, t.TempDir(), "-v=3", "--status-controller=false")
		if err := p.Stop(); err != nil {
			t.Fatalf("exit: %v", err)
		}
		log := readLog(t, p)
		if regexp.MustCompile(`(?m)^\{`).MatchString(log) {
			t.Errorf("JSON lines in the text log:\n%s", log)
		}
		if !regexp.MustCompile(`(?m)^I\d{4} .*logger="mount-apiserver\.embedded-etcd" etcdCaller="embed/`).MatchString(log) {
			t.Errorf("no message of etcd in klog's text format:\n%s", log)
		}
	})
}
