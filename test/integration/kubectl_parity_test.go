package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// parityCommand is one row of docs/kubectl.md's table: a kubectl command run once directly
// against a target and once through a mount of it, in a namespace of its own each time (ns is
// replaced by it), after setup.
type parityCommand struct {
	name  string
	setup [][]string
	// pod: a running pod p in the namespace, on the test kubelet.
	pod   bool
	args  []string
	stdin string
	// until, for commands that run until stopped (logs -f, port-forward, proxy): kubectl is
	// stopped once its output matches; the output up to the match is compared.
	until *regexp.Regexp
	// probe, with until, uses what kubectl serves (the match's groups) and says what it got.
	probe func(match []string, ns string) string
	// then says what the command left behind in its directory TMP (kubectl cp).
	then func(dir string) string
	// unordered: the output's lines come from streams that race each other (stdout and
	// stderr of exec), in any order either way; they are compared sorted.
	unordered bool
}

// parityCommands are kubectl's everyday commands. Pods run on the framework's kubelet (exec
// runs on this machine).
var parityCommands = []parityCommand{
	{name: "get with a label selector", setup: [][]string{{"create", "configmap", "a", "-n", "NS"}, {"label", "configmap", "a", "app=x", "-n", "NS"}}, args: []string{"get", "configmaps", "-n", "NS", "-l", "app=x", "-o", "name"}},
	{name: "get in chunks", setup: [][]string{{"create", "configmap", "a", "-n", "NS"}, {"create", "configmap", "b", "-n", "NS"}}, args: []string{"get", "configmaps", "-n", "NS", "--chunk-size=1", "-o", "name"}},
	{name: "get -o yaml", setup: [][]string{{"create", "configmap", "a", "--from-literal=k=v", "-n", "NS"}}, args: []string{"get", "configmap", "a", "-n", "NS", "-o", "jsonpath={.data}"}},
	{name: "get a missing object", args: []string{"get", "configmap", "missing", "-n", "NS"}},
	{name: "watch", setup: [][]string{{"create", "configmap", "a", "-n", "NS"}}, args: []string{"get", "configmaps", "-n", "NS", "-w", "--request-timeout=2s", "-o", "name"}},
	{name: "create", args: []string{"create", "configmap", "c", "--from-literal=k=v", "-n", "NS"}},
	{name: "create --dry-run=server", args: []string{"create", "configmap", "c", "--from-literal=k=v", "-n", "NS", "--dry-run=server"}},
	{name: "apply (client-side)", stdin: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: NS}\ndata: {k: v}\n", args: []string{"apply", "-f", "-"}},
	{name: "apply --server-side", stdin: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: NS}\ndata: {k: v}\n", args: []string{"apply", "--server-side", "-f", "-"}},
	{name: "apply --dry-run=server", stdin: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: NS}\ndata: {k: v}\n", args: []string{"apply", "--dry-run=server", "-f", "-"}},
	{name: "diff", setup: [][]string{{"create", "configmap", "c", "--from-literal=k=v", "-n", "NS"}}, stdin: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: NS}\ndata: {k: w}\n", args: []string{"diff", "-f", "-"}},
	{name: "patch --type=merge", setup: [][]string{{"create", "configmap", "c", "-n", "NS"}}, args: []string{"patch", "configmap", "c", "-n", "NS", "--type=merge", "-p", `{"data":{"k":"v"}}`}},
	{name: "patch --type=json", setup: [][]string{{"create", "configmap", "c", "-n", "NS"}}, args: []string{"patch", "configmap", "c", "-n", "NS", "--type=json", "-p", `[{"op":"add","path":"/data","value":{"k":"v"}}]`}},
	{name: "patch --type=strategic", setup: [][]string{{"create", "configmap", "c", "-n", "NS"}}, args: []string{"patch", "configmap", "c", "-n", "NS", "-p", `{"data":{"k":"v"}}`}},
	{name: "label", setup: [][]string{{"create", "configmap", "c", "-n", "NS"}}, args: []string{"label", "configmap", "c", "-n", "NS", "app=x"}},
	{name: "annotate", setup: [][]string{{"create", "configmap", "c", "-n", "NS"}}, args: []string{"annotate", "configmap", "c", "-n", "NS", "note=x"}},
	{name: "delete", setup: [][]string{{"create", "configmap", "c", "-n", "NS"}}, args: []string{"delete", "configmap", "c", "-n", "NS"}},
	{name: "delete --dry-run=server", setup: [][]string{{"create", "configmap", "c", "-n", "NS"}}, args: []string{"delete", "configmap", "c", "-n", "NS", "--dry-run=server"}},
	{name: "wait", setup: [][]string{{"create", "configmap", "c", "-n", "NS"}}, args: []string{"wait", "configmap/c", "-n", "NS", "--for=jsonpath={.metadata.name}=c", "--timeout=20s"}},
	{name: "explain", args: []string{"explain", "configmap.data"}},
	{name: "api-resources", args: []string{"api-resources", "--api-group=apps", "-o", "name"}},
	{name: "auth can-i", args: []string{"auth", "can-i", "create", "configmaps", "-n", "NS"}},
	{name: "auth can-i --list", args: []string{"auth", "can-i", "--list", "-n", "NS"}},
	{name: "auth whoami", args: []string{"auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"}},
	{name: "events", setup: [][]string{{"create", "configmap", "c", "-n", "NS"}}, args: []string{"events", "-n", "NS"}},
	{name: "rollout status", setup: [][]string{{"create", "deployment", "d", "--image=x", "-n", "NS"}}, args: []string{"rollout", "status", "deployment/d", "-n", "NS", "--timeout=1s"}},
	{name: "version", args: []string{"version", "-o", "json"}},
	{name: "get --raw", args: []string{"get", "--raw", "/api/v1/namespaces/NS"}},
	{name: "logs", pod: true, args: []string{"logs", "p", "-n", "NS"}},
	{name: "exec", pod: true, args: []string{"exec", "p", "-n", "NS", "--", "echo", "hello"}},
	// The kubelet sends more than three lines only to a follower.
	{name: "logs -f", pod: true, args: []string{"logs", "-f", "p", "-n", "NS"}, until: regexp.MustCompile(`log line 5\n`)},
	// The test kubelet's container echoes what is attached to its stdin.
	{name: "attach", pod: true, stdin: "hello\n", args: []string{"attach", "p", "-n", "NS", "-i"}},
	{name: "exec with stderr and exit code", pod: true, unordered: true, args: []string{"exec", "p", "-n", "NS", "--", "sh", "-c", "echo out; echo err >&2; exit 3"}},
	// kubectl cp runs tar in the pod (on this machine) and unpacks its output. It exits when
	// the archive ends, without waiting for tar's stderr ("Removing leading '/'"), which
	// then shows in whole, in part or not at all, either way: only the copy is compared.
	{name: "cp", pod: true, args: []string{"cp", "NS/p:SRC", "TMP/copied"}, then: func(dir string) string {
		data, err := os.ReadFile(filepath.Join(dir, "copied"))
		if err != nil {
			return err.Error()
		}
		return "copied: " + string(data)
	}},
	// The test kubelet forwards to 127.0.0.1 of this machine: an echo server there.
	{name: "port-forward", pod: true, args: []string{"port-forward", "pod/p", "-n", "NS", ":ECHO"},
		until: regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> \d+\n`), probe: probeEcho},
	{name: "debug", pod: true, args: []string{"debug", "p", "-n", "NS", "--image=busybox", "--container=dbg"}},
	// The target serves no metrics: both ways must say so alike.
	{name: "top", pod: true, args: []string{"top", "pod", "-n", "NS"}},
	// kubectl proxy drops the kubeconfig's server path unless told to keep it (it warns).
	{name: "proxy", args: []string{"proxy", "--port=0"}, until: regexp.MustCompile(`Starting to serve on 127\.0\.0\.1:(\d+)\n`), probe: probeProxy},
	{name: "proxy --append-server-path", args: []string{"proxy", "--port=0", "--append-server-path"}, until: regexp.MustCompile(`Starting to serve on 127\.0\.0\.1:(\d+)\n`), probe: probeProxy},
}

// probeEcho sends a line through a port-forward's local port and reads what came back.
func probeEcho(match []string, _ string) string {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+match[1], 10*time.Second)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		return "write: " + err.Error()
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "read: " + err.Error()
	}
	return "echoed: " + line
}

// probeProxy reads the namespace through kubectl proxy's local port.
func probeProxy(match []string, ns string) string {
	resp, err := http.Get("http://127.0.0.1:" + match[1] + "/api/v1/namespaces/" + ns)
	if err != nil {
		return "get: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return fmt.Sprintf("proxied: %d %s", resp.StatusCode, body)
}

// runKubectlUntil runs kubectl until its output matches until (at most a minute), then calls
// probe with the match, stops kubectl and returns the output up to the match and what probe
// said. Exit code 0 means the output matched.
func runKubectlUntil(bin, cache, kubeconfig string, until *regexp.Regexp, probe func([]string) string, args ...string) kubectlResult {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+cache)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return kubectlResult{out: err.Error(), exitCode: -1}
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	for ctx.Err() == nil {
		text := out.String()
		if loc := until.FindStringSubmatchIndex(text); loc != nil {
			r := kubectlResult{out: text[:loc[1]], took: time.Since(start)}
			if probe != nil {
				r.out += probe(until.FindStringSubmatch(text))
			}
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	return kubectlResult{out: out.String(), exitCode: -1, took: time.Since(start)}
}

// parityNoise is what differs between any two runs, not between the ways: times, ages, UIDs,
// resourceVersions, the namespace's name, the server's address.
var parityNoise = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"(uid|resourceVersion|creationTimestamp|time)":"[^"]*"`), `"$1":"X"`},
	{regexp.MustCompile(`\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?( [+-]\d{4}|Z)?`), "TIME"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ms|s|m|h|d)\b`), "AGE"},
	{regexp.MustCompile(`https://127\.0\.0\.1:\d+\S*`), "URL"},
	{regexp.MustCompile(`/tmp/\S+`), "FILE"},
	{regexp.MustCompile(`127\.0\.0\.1:\d+`), "ADDR"},
	{regexp.MustCompile(`debugger-[a-z0-9]+`), "debugger-X"},
	// tar's stderr in kubectl cp races the archive's end: none, all, or its first write
	// ("tar: ") shows, either way.
	{regexp.MustCompile(`(?m)^tar:.*$`), ""},
	{regexp.MustCompile(`\s+`), " "},
}

func normalizeParity(out, ns string) string {
	out = strings.ReplaceAll(out, ns, "NS")
	for _, n := range parityNoise {
		out = n.re.ReplaceAllString(out, n.with)
	}
	return strings.TrimSpace(out)
}

// TestKubectlThroughMountAsDirect runs each of parityCommands directly against a real
// kube-apiserver and through a mount of it (the mount impersonates the caller as they are, so
// the target sees the same user both ways) and compares exit codes and output. The result is
// docs/kubectl.md's table, which must say what this run saw.
func TestKubectlThroughMountAsDirect(t *testing.T) {
	m := startMountedTarget(t)
	ctx := context.Background()
	kubelet, err := framework.StartKubelet(ctx, m.kube, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	echo := startEchoServer(t)
	src := filepath.Join(t.TempDir(), "src.txt")
	if err := os.WriteFile(src, []byte("copied through the pod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	results := map[string]string{}
	// seen keeps what each row printed both ways: a subtest's log is dropped when it passes,
	// and a row that contradicts the docs must say why.
	seen := map[string]string{}
	for i, c := range parityCommands {
		t.Run(c.name, func(t *testing.T) {
			run := func(way, kubeconfig string) (kubectlResult, string) {
				ns := fmt.Sprintf("p%d-%s", i, way)
				if r := runKubectlWith(ctx, m.kubectl, m.cache, m.direct, "", time.Minute, "create", "namespace", ns); r.exitCode != 0 {
					t.Fatalf("create namespace %s: %s", ns, r.out)
				}
				dir := t.TempDir()
				sub := func(args []string) []string {
					out := make([]string, len(args))
					for j, a := range args {
						out[j] = strings.NewReplacer("NS", ns, "TMP", dir, "SRC", src, "ECHO", echo).Replace(a)
					}
					return out
				}
				if c.pod {
					if err := kubelet.CreatePod(ctx, ns, "p"); err != nil {
						t.Fatal(err)
					}
				}
				for _, s := range c.setup {
					if r := runKubectlWith(ctx, m.kubectl, m.cache, m.direct, "", time.Minute, sub(s)...); r.exitCode != 0 {
						t.Fatalf("setup %v: %s", s, r.out)
					}
				}
				if c.until != nil {
					var probe func([]string) string
					if c.probe != nil {
						probe = func(match []string) string { return c.probe(match, ns) }
					}
					return runKubectlUntil(m.kubectl, t.TempDir(), kubeconfig, c.until, probe, sub(c.args)...), ns
				}
				r := runKubectlWith(ctx, m.kubectl, t.TempDir(), kubeconfig, strings.ReplaceAll(c.stdin, "NS", ns), time.Minute, sub(c.args)...)
				if c.then != nil {
					r.out += "\n" + c.then(dir)
				}
				return r, ns
			}
			direct, dns := run("direct", m.direct)
			via, vns := run("mount", m.viaMount)
			if c.unordered {
				direct.out, via.out = sortedLines(direct.out), sortedLines(via.out)
			}
			d, v := normalizeParity(direct.out, dns), normalizeParity(via.out, vns)
			seen[c.name] = fmt.Sprintf("direct: exit %d\n%s\nthrough the mount: exit %d\n%s", direct.exitCode, direct.out, via.exitCode, via.out)
			switch {
			case direct.exitCode == via.exitCode && d == v:
				results[c.name] = "works"
				t.Logf("both ways: exit %d, %.300s", via.exitCode, v)
			default:
				results[c.name] = "differs"
				t.Log(seen[c.name])
			}
		})
	}

	// docs/kubectl.md's table says what this run saw.
	doc, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "docs", "kubectl.md"))
	if err != nil {
		t.Error(err)
	}
	row := regexp.MustCompile("(?m)^\\| (.+?) \\| `kubectl ([^`]*)` \\| (works|differs)")
	documented := map[string]string{}
	for _, match := range row.FindAllStringSubmatch(string(doc), -1) {
		documented[match[1]] = match[3]
	}
	var table strings.Builder
	for _, c := range parityCommands {
		fmt.Fprintf(&table, "| %s | `kubectl %s` | %s |\n", c.name, strings.Join(c.args, " "), results[c.name])
		if documented[c.name] != results[c.name] {
			t.Errorf("docs/kubectl.md says %q for %q, the test saw %q:\n%s", documented[c.name], c.name, results[c.name], seen[c.name])
		}
	}
	t.Logf("the table of this run:\n%s", table.String())
}

// startEchoServer listens on loopback and echoes each connection's bytes; it returns the port.
func startEchoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_, _ = io.Copy(conn, conn)
			}()
		}
	}()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
