package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// docEnv is what the blocks of one page run against in one mode: real servers on loopback,
// started once for the page, and the user's working directory.
type docEnv struct {
	t   *testing.T
	ctx context.Context
	// Work is the user's working directory: a copy of the repository's artifacts, as in a
	// clone, never the repository itself. Home is the user's $HOME.
	Work, Home string
	// Env is added to the shell's environment (KUBECONFIG, TARGET_KUBECONFIG, ...).
	Env []string
	// hooks are the mode's hooks (docHooks), run on the test's goroutine between blocks.
	hooks map[string]func() error
}

// docMode starts a mode's servers for a page.
type docMode struct {
	// Doc says what the mode is, for the error of an unknown mode.
	Doc   string
	start func(e *docEnv)
}

// docModes are the modes blocks run in. Every mode has a real target kube-apiserver, whose
// admin kubeconfig is $TARGET_KUBECONFIG (the cluster a page mounts), kubectl, mount-apiserver
// and mount-agent on $PATH (the binaries this test built, as `go install ./cmd/...` puts them
// on a user's), and $HOME in a temporary directory.
var docModes = map[string]docMode{
	"standalone": {
		Doc: "the standalone server binary on a fresh root directory .mount-apiserver in the working directory (as `go run ./cmd/mount-apiserver` in a clone); KUBECONFIG unset",
		start: func(e *docEnv) {
			e.startTarget()
			root := filepath.Join(e.Work, ".mount-apiserver")
			bin := framework.BuildBinary(e.t)
			p := bin.Start(e.t, root)
			u, err := url.Parse(p.URL)
			if err != nil {
				e.t.Fatal(err)
			}
			port, err := strconv.Atoi(u.Port())
			if err != nil {
				e.t.Fatal(err)
			}
			e.hooks["stop-server"] = func() error { return p.Stop() }
			e.hooks["start-server"] = func() error { p = bin.StartOnPort(e.t, root, port); return nil }
		},
	},
	"aggregated": {
		Doc: "a host kube-apiserver with mount-apiserver aggregated into it by artifacts/apiservice (framework.StartClusters); KUBECONFIG is the host's admin (system:masters)",
		start: func(e *docEnv) {
			c, err := framework.StartClusters(e.ctx, e.t.TempDir(), nil)
			if err != nil {
				e.t.Fatal(err)
			}
			e.t.Cleanup(c.Stop)
			e.Env = append(e.Env, "KUBECONFIG="+c.Host.AdminKubeconfig, "TARGET_KUBECONFIG="+c.Remote.AdminKubeconfig)
			e.hooks["agent-pod"] = func() error { return docAgentPod(e, c.Remote) }
		},
	},
	"kubernetes": {
		Doc: "a host kube-apiserver without mount-apiserver, which the page installs; KUBECONFIG is the host's admin (system:masters)",
		start: func(e *docEnv) {
			e.startTarget()
			host, err := framework.StartKubeAPIServer(e.ctx, e.t.TempDir())
			if err != nil {
				e.t.Fatal(err)
			}
			e.t.Cleanup(host.Stop)
			e.Env = append(e.Env, "KUBECONFIG="+host.AdminKubeconfig)
			e.hooks["apiservice-pod"] = func() error { return docAPIServicePod(e, host) }
		},
	},
}

// startTarget starts the cluster a page mounts: a real kube-apiserver, $TARGET_KUBECONFIG.
func (e *docEnv) startTarget() {
	target, err := framework.StartKubeAPIServer(e.ctx, e.t.TempDir())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(target.Stop)
	e.Env = append(e.Env, "TARGET_KUBECONFIG="+target.AdminKubeconfig)
}

// docHooks are the hooks of each mode and what they stand in for.
var docHooks = map[string]map[string]string{
	"standalone": {
		"stop-server":  "Ctrl-C in the server's terminal: the server stops (SIGINT) and the test waits for its exit",
		"start-server": "the server's command again: the same binary on the same root directory and port",
	},
	"aggregated": {
		"agent-pod": "the pod of artifacts/agent's Deployment on the target: mount-agent with the args of the Deployment that the page applied to the target, its hub kubeconfig from the Secret the page generated, its ServiceAccount's token",
	},
	"kubernetes": {
		"apiservice-pod": "the pod of artifacts/apiservice's Deployment and the Service routing to it: mount-apiserver as the bundle's ServiceAccount with --apiservice-name, behind an ExternalName Service of localhost (EndpointSlices cannot point at loopback)",
	},
}

// TestDocs runs the shell blocks of every page under docs/ in the modes their marks say: per
// page and mode one shell session, in the page's order, against servers started for that page
// alone, in a temporary working directory holding a copy of the repository's artifacts and a
// temporary $HOME. A page must not change the repository (git status before and after).
func TestDocs(t *testing.T) {
	root := framework.RepoRoot()
	for _, page := range docPages(t, root) {
		if page == "README.md" {
			continue // TestReadmeTour
		}
		blocks, problems, err := parseDocBlocks(root, page)
		if err != nil {
			t.Fatal(err)
		}
		if len(problems) > 0 {
			t.Errorf("%s: %q (TestDocsBlocksAreMarked)", page, problems)
			continue
		}
		var modes []string
		byMode := map[string][]shellBlock{}
		for _, b := range blocks {
			if b.Mode == "" {
				continue
			}
			if byMode[b.Mode] == nil {
				modes = append(modes, b.Mode)
			}
			byMode[b.Mode] = append(byMode[b.Mode], b)
		}
		for _, mode := range modes {
			t.Run(strings.TrimSuffix(strings.TrimPrefix(page, "docs/"), ".md")+"/"+mode, func(t *testing.T) {
				t.Parallel()
				out := runDocBlocks(t, mode, byMode[mode])
				for _, want := range docExpectations[page+" "+mode] {
					if !strings.Contains(out, want) {
						t.Errorf("the output lacks %q", want)
					}
				}
			})
		}
	}
}

// docExpectations are lines the output of a page's blocks in a mode must hold, beyond their
// exit status: what shows that the page did what it says.
var docExpectations = map[string][]string{
	"docs/getting-started.md standalone": {"mounts.kcp.io/v1alpha1", "readyz check passed", "encryption-config.yaml"},
	"docs/mounting.md standalone": {
		"mount.mounts.kcp.io/staging condition met", "kube-system", // a namespace of the target, through the mount
		"staging:mount-admin", `spec.ref.kind: Unsupported value: "ConfigMap"`,
	},
	"docs/mounting.md kubernetes": {
		"apiservice.apiregistration.k8s.io/v1alpha1.mounts.kcp.io condition met", "mount.mounts.kcp.io/prod condition met",
		"kube-system",
	},
	"docs/users.md standalone": {
		`needs verb "lend"`, `"lend" on mounts.mounts.kcp.io team only to the group mount-apiserver:admins (see docs/users.md)`,
		`User "bob" cannot delete resource "mounts"`, "kube-system", "[mount-apiserver:viewers system:authenticated]", "selfsubjectaccessreviews.authorization.k8s.io",
	},
	"docs/users.md aggregated": {"yes\n", "no\n"},
	"docs/firewall.md standalone": {
		"mount.mounts.kcp.io/edge condition met", "An agent is connected", "kube-system", "AgentNotConnected",
	},
	"docs/renaming.md standalone": {
		"virtualmachine.kubevirt.io/alpine", "kubevirt.io/owner: team-a", "prefixedvirtualmachines.x.virtualization.example.org",
		"kind: PrefixedVirtualMachine", "x.virtualization.example.org/os: alpine", "KIND:       VirtualMachine",
	},
	"docs/production.md standalone": {
		"# HELP mount_status_writes_total", "[+]etcd ok", `mount.mounts.kcp.io "prod" deleted`,
		"prod   URL", // listed after the restore
	},
	"docs/troubleshooting.md standalone": {"CredentialsResolved\tFalse\tSecretNotFound", "mount.mounts.kcp.io/prod condition met"},
	"docs/fanout.md standalone": {
		"mount.mounts.kcp.io/eu condition met", "configmap/eu:hello", "configmap/us:hello",
	},
	"docs/firewall.md aggregated": {"deployment.apps/mount-agent created", "mount.mounts.kcp.io/prod condition met", "kube-system"},
}

// runDocBlocks runs blocks (of one page, in one mode) in one bash session (errexit, nounset,
// pipefail) and returns its output. Hooks run between blocks on the test's goroutine; the
// session's processes (and whatever a block left running in the background) are killed at
// the end.
func runDocBlocks(t *testing.T, mode string, blocks []shellBlock) string {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 6*time.Minute)
	defer cancel()
	root := framework.RepoRoot()
	statusBefore := gitStatus(t, root)
	kubeBin, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	e := &docEnv{t: t, ctx: ctx, Work: t.TempDir(), Home: t.TempDir(), hooks: map[string]func() error{}}
	if err := os.CopyFS(filepath.Join(e.Work, "artifacts"), os.DirFS(filepath.Join(root, "artifacts"))); err != nil {
		t.Fatal(err)
	}
	// mount-apiserver and mount-agent on $PATH, as `go install ./cmd/...` puts them.
	binDir := t.TempDir()
	for name, path := range map[string]string{"mount-apiserver": string(framework.BuildBinary(t)), "mount-agent": framework.BuildAgent(t)} {
		if err := os.Symlink(path, filepath.Join(binDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	started := time.Now()
	docModes[mode].start(e)
	t.Logf("%s: servers ready in %v", mode, time.Since(started).Round(time.Millisecond))

	var script strings.Builder
	script.WriteString(`set -euo pipefail
__doc_block=
trap 'echo ">>> failed in $__doc_block: line $LINENO: $BASH_COMMAND" >&2' ERR
__doc_hook() { echo "$1" >&3; local r; IFS= read -r r <&4; if [ "$r" != ok ]; then echo ">>> hook $1: $r" >&2; return 1; fi; }
`)
	for _, b := range blocks {
		for _, h := range b.Before {
			fmt.Fprintf(&script, "__doc_hook %s\n", h)
		}
		fmt.Fprintf(&script, "__doc_block=%q; printf '\\n>>> %%s\\n' \"$__doc_block\"\n", b.String())
		script.WriteString(b.Body)
		for _, h := range b.After {
			fmt.Fprintf(&script, "__doc_hook %s\n", h)
		}
	}
	script.WriteString("echo '>>> done'\n")

	reqR, reqW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer reqR.Close()
	defer ackW.Close()
	logPath := filepath.Join(t.TempDir(), "session.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command("bash", "-c", script.String())
	cmd.Dir = e.Work
	cmd.Env = append(docBaseEnv(), "HOME="+e.Home, "PATH="+binDir+string(os.PathListSeparator)+kubeBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, e.Env...)
	// Files, not pipes: a process a block leaves in the background must not hold Wait.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{reqW, ackR} // fds 3 and 4: __doc_hook
	// A process group of its own, as a terminal's session, killed as a whole at the end.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reqW.Close()
	ackR.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	killed := false
	kill := func() {
		if !killed {
			killed = true
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	t.Cleanup(kill)
	output := func() string {
		data, _ := os.ReadFile(logPath)
		return string(data)
	}
	requests := make(chan string)
	go func() {
		scanner := bufio.NewScanner(reqR)
		for scanner.Scan() {
			requests <- scanner.Text()
		}
		close(requests)
	}()
	var runErr error
wait:
	for {
		select {
		case name, ok := <-requests:
			if !ok {
				requests = nil
				continue
			}
			reply := "ok"
			if hook := e.hooks[name]; hook == nil {
				reply = "the mode has no such hook"
			} else if err := hook(); err != nil {
				reply = strings.ReplaceAll(err.Error(), "\n", " ")
			}
			if _, err := fmt.Fprintln(ackW, reply); err != nil {
				t.Errorf("answering hook %s: %v", name, err)
			}
		case runErr = <-exited:
			break wait
		case <-ctx.Done():
			kill()
			runErr = fmt.Errorf("the blocks did not finish in time: %w", <-exited)
			break wait
		}
	}
	kill()
	out := output()
	t.Logf("%d blocks in %v; output:\n%s", len(blocks), time.Since(start).Round(time.Millisecond), out)
	if runErr != nil {
		var exitErr *exec.ExitError
		if errors.As(runErr, &exitErr) {
			t.Fatalf("the blocks failed: %v (the output's last >>> line says where)", runErr)
		}
		t.Fatal(runErr)
	}
	if !strings.Contains(out, ">>> done") {
		t.Fatal("the session ended before its last block")
	}
	if after := gitStatus(t, root); after != statusBefore {
		t.Errorf("the blocks changed the repository: git status --porcelain was\n%s\nand is\n%s", statusBefore, after)
	}
	return out
}

// docBaseEnv is this process's environment without what would point the session's kubectl
// elsewhere.
func docBaseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "KUBECONFIG", "HOME", "PATH", "TARGET_KUBECONFIG":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "KUBECONFIG=")
}

// gitStatus is `git status --porcelain` of the repository.
func gitStatus(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "status", "--porcelain").CombinedOutput()
	if err != nil {
		t.Fatalf("git status of the repository: %v: %s", err, out)
	}
	return string(out)
}

// docAgentPod stands in for the pod of artifacts/agent's Deployment on the target: it reads
// the Deployment the page applied, the hub kubeconfig Secret its volume names and a token of
// its ServiceAccount, and runs mount-agent with the Deployment's --mount and --cluster, the
// target's address instead of KUBERNETES_SERVICE_HOST, and health on loopback.
func docAgentPod(e *docEnv, remote *framework.KubeAPIServer) error {
	const ns, name = "mount-agent", "mount-agent"
	d, err := remote.Client.AppsV1().Deployments(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the agent's Deployment: %w", err)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return fmt.Errorf("the agent's Deployment has %d containers", len(pod.Containers))
	}
	var secretName string
	for _, v := range pod.Volumes {
		if v.Name == "hub" && v.Secret != nil {
			secretName = v.Secret.SecretName
		}
	}
	secret, err := remote.Client.CoreV1().Secrets(ns).Get(e.ctx, secretName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the hub kubeconfig Secret %q of the Deployment: %w", secretName, err)
	}
	dir := e.t.TempDir()
	hub := filepath.Join(dir, "hub.kubeconfig")
	if err := os.WriteFile(hub, secret.Data["kubeconfig"], 0o600); err != nil {
		return err
	}
	var args []string
	var mount string
	for _, arg := range pod.Containers[0].Args {
		switch {
		case strings.HasPrefix(arg, "--mount="):
			mount = strings.TrimPrefix(arg, "--mount=")
		case strings.HasPrefix(arg, "--cluster="):
			args = append(args, arg)
		}
	}
	tr, err := remote.Client.CoreV1().ServiceAccounts(ns).CreateToken(e.ctx, pod.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("a token of the agent's ServiceAccount %q: %w", pod.ServiceAccountName, err)
	}
	own, err := remote.WriteKubeconfig(&rest.Config{Host: remote.URL, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: remote.AdminConfig.CAData}}, "mount-agent-pod")
	if err != nil {
		return err
	}
	framework.StartAgent(e.t, hub, mount, strings.TrimPrefix(remote.URL, "https://"), append(args, "--kubeconfig", own)...)
	return nil
}

// docAPIServicePod stands in for the pod of artifacts/apiservice's Deployment and for the
// Service that routes to it: the page applied the bundle to host; the Service (ClusterIP, no
// endpoints on loopback) is replaced by the framework's ExternalName Service of localhost,
// and mount-apiserver runs as the bundle's ServiceAccount with the bundle's --apiservice-name.
func docAPIServicePod(e *docEnv, host *framework.KubeAPIServer) error {
	err := host.Client.CoreV1().Services(framework.Namespace).Delete(e.ctx, "mount-apiserver", metav1.DeleteOptions{})
	if err != nil {
		return fmt.Errorf("the bundle's Service: %w", err)
	}
	a, err := framework.StartAggregated(e.ctx, host, e.t.TempDir(), nil)
	if err != nil {
		return err
	}
	e.t.Cleanup(func() { _ = a.Stop() })
	return nil
}
