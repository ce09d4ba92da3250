package integration

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// docBlock is a marked shell block of docs/kcp.md.
type docBlock struct {
	mark, body string
}

// docBlocks returns the shell blocks of the page that follow a "<!-- test: <mark> -->" line.
func docBlocks(t *testing.T, page string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	mark, in := "", false
	var body strings.Builder
	scanner := bufio.NewScanner(strings.NewReader(string(data)))
	for scanner.Scan() {
		line := scanner.Text()
		switch {
		case in && line == "```":
			blocks = append(blocks, docBlock{mark: mark, body: body.String()})
			mark, in = "", false
			body.Reset()
		case in:
			body.WriteString(line + "\n")
		case mark != "" && line == "```sh":
			in = true
		case strings.HasPrefix(line, "<!-- test: ") && strings.HasSuffix(line, " -->"):
			mark = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- test: "), " -->")
		case strings.TrimSpace(line) != "":
			mark = ""
		}
	}
	return blocks
}

// listenExtending listens on two loopback ports, p and one whose decimal string starts with
// p's, as kcp v0.32.3's rule needs: the endpoint URL must start with the shard's
// virtual-workspace URL (the docs use 6443 and 64430).
func listenExtending(t *testing.T) (shard, extended net.Listener) {
	t.Helper()
	for range 200 {
		p := 1100 + rand.IntN(5400)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		for d := range 10 {
			if e, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p*10+d)); err == nil {
				return l, e
			}
		}
		_ = l.Close()
	}
	t.Fatal("no free pair of loopback ports p and p*10+d")
	return nil, nil
}

// TestKcpDocsSteps runs the kcp steps of docs/kcp.md, extracted from the page, against the
// kcp harness in its strict v0.32.3 mode with kcp's kinds (kcp itself cannot be built here;
// the harness refuses what real kcp refuses: "access", access reviews through kcp's chain,
// the provider's rights, the WorkspaceMounts gate, the binding window, the endpoint slice's
// rules, discovery names from the schema). In a temporary directory, never in the
// repository: the block marked ca runs first with the real mount-apiserver binary (the CA kcp
// is started with); the blocks marked run are one bash script; the users of the token file block are
// the harness's users; the server's block starts nothing but hands its arguments to the
// test, which starts mount-apiserver in process with exactly those flags (its port is the one
// that extends the harness's, as 64430 extends 6443 in the docs). What the page leaves to kcp
// and openssl (certificates, kcp's flags, the front-proxy's mapping) the harness stands in
// for: its CAs are written where the server's flags look for them. The steps end with
// kubectl get mounts in the consumer workspace and kubectl auth whoami and get namespaces
// through the mounted workspace, as alice.
func TestKcpDocsSteps(t *testing.T) {
	bin, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	binary, err := framework.BuildMountAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(framework.RepoRoot(), "docs", "kcp.md")
	blocks := docBlocks(t, page)
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.Symlink(filepath.Join(framework.RepoRoot(), "artifacts"), "artifacts"); err != nil {
		t.Fatal(err)
	}

	// Step 1 of the page, run with the real binary: the server's PKI and its CA, before kcp.
	path := filepath.Dir(binary) + string(os.PathListSeparator) + bin + string(os.PathListSeparator) + os.Getenv("PATH")
	var caBlock string
	for _, b := range blocks {
		if b.mark == "ca" {
			caBlock = b.body
		}
	}
	ca := exec.Command("bash", "-c", "set -euo pipefail\n"+caBlock)
	ca.Env = append(os.Environ(), "PATH="+path)
	if out, err := ca.CombinedOutput(); caBlock == "" || err != nil {
		t.Fatalf("docs/kcp.md's ca block %q: %v\n%s", caBlock, err, out)
	}
	serverCA, err := os.ReadFile("mount-apiserver-ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)

	shardListener, serverListener := listenExtending(t)
	k := framework.StartKcpWith(t, framework.KcpOptions{
		Version: framework.KcpV0323, WorkspaceMounts: true, BindingDelay: 2 * time.Second, Kinds: true,
		VirtualWorkspaceCA: serverCA, Listener: shardListener,
	})
	k.AddWorkspace("root", "root", startKubes(t, 1)[0], false)
	if err := os.MkdirAll("certs", 0o700); err != nil {
		t.Fatal(err)
	}
	for name, pem := range map[string][]byte{"shard-client-ca.crt": k.ShardCA.CertPEM, "front-proxy-ca.crt": k.FrontProxyCA.CertPEM} {
		if err := os.WriteFile(filepath.Join("certs", name), pem, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := k.Kubeconfig(framework.KcpAdminToken, "")
	if err != nil {
		t.Fatal(err)
	}

	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	var tokens, server bool
	for _, b := range blocks {
		switch b.mark {
		case "tokens":
			tokens = true
			addDocUsers(t, k, b.body)
		case "ca":
		case "server":
			server = true
			// The server's command hands its arguments to the test.
			script.WriteString("mount-apiserver() { printf '%s\\n' \"$@\" > server.args.tmp; mv server.args.tmp server.args; }\n")
			script.WriteString(b.body)
		case "run":
			script.WriteString(b.body)
		default:
			t.Fatalf("docs/kcp.md: unknown mark %q", b.mark)
		}
	}
	if !tokens || !server || strings.Count(script.String(), "\n") < 40 {
		t.Fatalf("docs/kcp.md: the marked blocks are missing (tokens %v, server %v)", tokens, server)
	}

	// The server starts when the script reaches its block.
	serverErr := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(8 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			data, err := os.ReadFile("server.args")
			if err != nil {
				continue
			}
			args := strings.Split(strings.TrimSpace(string(data)), "\n")
			s, err := framework.StartServer(ctx, filepath.Join(dir, "mounts"), serverListener, func(o *options.Options) {
				fs := pflag.NewFlagSet("mount-apiserver", pflag.ContinueOnError)
				for _, f := range o.Flags().FlagSets {
					fs.AddFlagSet(f)
				}
				if err := fs.Parse(args); err != nil {
					t.Errorf("the docs' server flags: %v", err)
				}
				if fs.NArg() > 0 {
					t.Errorf("the docs' server command has arguments %v", fs.Args())
				}
				// The docs' 64430 extends 6443; here the port that extends the harness's.
				o.SecureServing.BindPort = serverListener.Addr().(*net.TCPAddr).Port
			})
			if err == nil {
				t.Cleanup(func() { _ = s.Stop() })
			}
			serverErr <- err
			return
		}
		serverErr <- fmt.Errorf("the script never reached the server's block")
	}()

	runCtx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, "bash", "-c", script.String())
	cmd.Env = append(os.Environ(),
		"PATH="+path,
		"KCP="+k.URL, "KUBECONFIG="+admin, "BUNDLE=artifacts/kcp",
		"MOUNTS=https://"+serverListener.Addr().String(),
	)
	out, err := cmd.CombinedOutput()
	select {
	case serr := <-serverErr:
		if serr != nil {
			t.Fatalf("starting mount-apiserver with the docs' flags: %v", serr)
		}
	default:
	}
	if err != nil {
		t.Fatalf("the steps of docs/kcp.md failed: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		"prod   URL", // kubectl get mounts in root:team
		"alice",      // auth whoami through the mounted workspace
		"default",    // get namespaces through the mounted workspace
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the steps' output lacks %q:\n%s", want, text)
		}
	}
	t.Logf("the steps of docs/kcp.md:\n%s", text)
}

// addDocUsers makes the users of kcp's token file (a heredoc in the block) users of k.
func addDocUsers(t *testing.T, k *framework.Kcp, block string) {
	t.Helper()
	_, rest, ok := strings.Cut(block, "<<'EOF'\n")
	body, _, ok2 := strings.Cut(rest, "\nEOF")
	if !ok || !ok2 {
		t.Fatalf("docs/kcp.md: the token file block has no heredoc:\n%s", block)
	}
	records, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil {
		t.Fatalf("docs/kcp.md: the token file: %v", err)
	}
	for _, r := range records {
		if len(r) < 3 {
			t.Fatalf("docs/kcp.md: token file line %v", r)
		}
		u := framework.KcpUser{Name: r[1], UID: r[2]}
		if len(r) > 3 && r[3] != "" {
			u.Groups = strings.Split(r[3], ",")
		}
		k.AddUser(r[0], u)
	}
}

// TestKcpQuickstartFollowsDocs: hack/kcp-quickstart.sh, which cannot run here (it needs kcp's
// binaries), runs the same commands as the marked blocks of docs/kcp.md, which
// TestKcpDocsSteps runs against the harness: every line of those blocks is a line of the
// script, but the defaults the page gives its variables (the test sets them).
func TestKcpQuickstartFollowsDocs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "hack", "kcp-quickstart.sh"))
	if err != nil {
		t.Fatal(err)
	}
	background := regexp.MustCompile(`( > [a-z-]+\.log 2>&1)? &$`)
	lines := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		lines[background.ReplaceAllString(strings.TrimSpace(l), "")] = true
	}
	n := 0
	for _, b := range docBlocks(t, filepath.Join(framework.RepoRoot(), "docs", "kcp.md")) {
		for _, l := range strings.Split(b.body, "\n") {
			l = background.ReplaceAllString(strings.TrimSpace(l), "")
			if l == "" || strings.HasPrefix(l, "#") || strings.Contains(l, ":-") {
				continue
			}
			n++
			if !lines[l] {
				t.Errorf("docs/kcp.md's line is not in hack/kcp-quickstart.sh: %s", l)
			}
		}
	}
	if n < 60 {
		t.Errorf("only %d lines of docs/kcp.md compared", n)
	}
}
