package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
	results := map[string]string{}
	for i, c := range parityCommands {
		t.Run(c.name, func(t *testing.T) {
			run := func(way, kubeconfig string) (kubectlResult, string) {
				ns := fmt.Sprintf("p%d-%s", i, way)
				if r := runKubectlWith(ctx, m.kubectl, m.cache, m.direct, "", time.Minute, "create", "namespace", ns); r.exitCode != 0 {
					t.Fatalf("create namespace %s: %s", ns, r.out)
				}
				sub := func(args []string) []string {
					out := make([]string, len(args))
					for j, a := range args {
						out[j] = strings.ReplaceAll(a, "NS", ns)
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
				return runKubectlWith(ctx, m.kubectl, t.TempDir(), kubeconfig, strings.ReplaceAll(c.stdin, "NS", ns), time.Minute, sub(c.args)...), ns
			}
			direct, dns := run("direct", m.direct)
			via, vns := run("mount", m.viaMount)
			d, v := normalizeParity(direct.out, dns), normalizeParity(via.out, vns)
			switch {
			case direct.exitCode == via.exitCode && d == v:
				results[c.name] = "works"
			default:
				results[c.name] = "differs"
				t.Logf("direct: exit %d\n%s\nthrough the mount: exit %d\n%s", direct.exitCode, direct.out, via.exitCode, via.out)
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
			t.Errorf("docs/kubectl.md says %q for %q, the test saw %q", documented[c.name], c.name, results[c.name])
		}
	}
	t.Logf("the table of this run:\n%s", table.String())
}
