// Package netns tests the framework's network namespaces: a real kube-apiserver, its etcd and
// the test kubelet inside one are unreachable from the host except through the Unix-socket
// bridges, and the namespace is gone after the test.
package netns

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

func TestNetnsIsolatesATarget(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	bin, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(bin, "kubectl")

	ns := framework.NewNetns(t)
	kube, err := framework.StartKubeAPIServerWith(ctx, t.TempDir(), framework.KubeOptions{Netns: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	if kube.URL == kube.InnerURL {
		t.Fatalf("a server in a namespace has a bridge URL; both are %s", kube.URL)
	}

	readyz := func(dial func(context.Context, string, string) (net.Conn, error)) error {
		cfg := rest.CopyConfig(kube.AdminConfig)
		cfg.Host = kube.InnerURL
		cfg.Dial = dial
		cfg.Timeout = 5 * time.Second
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer client.CloseIdleConnections()
		resp, err := client.Get(kube.InnerURL + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("readyz inside: %d", resp.StatusCode)
		}
		return nil
	}
	// From the host, the target's own address is not there.
	var d net.Dialer
	if err := readyz(d.DialContext); err == nil {
		t.Fatalf("the host reached %s, the target's address inside its namespace", kube.InnerURL)
	} else {
		t.Logf("from the host: %v", err)
	}
	// From inside, it is.
	if err := readyz(ns.DialContext); err != nil {
		t.Fatalf("from inside the namespace: %v", err)
	}
	// A process inside reaches it too, and a process on the host does not.
	if out, err := ns.Command(kubectl, "--kubeconfig", kube.AdminKubeconfig, "--server", kube.InnerURL, "get", "--raw", "/readyz").CombinedOutput(); err != nil || string(out) != "ok" {
		t.Fatalf("kubectl inside the namespace: %v: %s", err, out)
	}
	if out, err := exec.Command(kubectl, "--kubeconfig", kube.AdminKubeconfig, "--server", kube.InnerURL, "--request-timeout", "5s", "get", "--raw", "/readyz").CombinedOutput(); err == nil {
		t.Fatalf("kubectl on the host reached the target inside: %s", out)
	}

	// The kubelet serves inside: kube-apiserver (inside) reaches it for logs and exec, and its
	// port-forwards dial the namespace's 127.0.0.1.
	kubelet, err := framework.StartKubelet(ctx, kube, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "default", "app"); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", kube.AdminKubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run("exec", "app", "--", "echo", "hello from exec"); out != "hello from exec\n" {
		t.Fatalf("exec: %q", out)
	}
	if out := run("logs", "app", "--tail=1"); out == "" {
		t.Fatal("logs: empty")
	}

	inside, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "inside") })}
	go func() { _ = srv.Serve(inside) }()
	t.Cleanup(func() { _ = srv.Close() })
	podPort := inside.Addr().(*net.TCPAddr).Port
	if _, err := d.DialContext(ctx, "tcp", inside.Addr().String()); err == nil {
		// Another process may own the same port on the host; what matters is the answer.
		t.Logf("something on the host listens on %s too", inside.Addr())
	}
	pf := exec.Command(kubectl, "--kubeconfig", kube.AdminKubeconfig, "port-forward", "pod/app", ":"+strconv.Itoa(podPort))
	stdout, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("port-forward: %v", err)
	}
	// "Forwarding from 127.0.0.1:<local> -> <port>"
	f := strings.Fields(line)
	if len(f) < 3 {
		t.Fatalf("port-forward said %q", line)
	}
	resp, err := http.Get("http://" + f[2] + "/")
	if err != nil {
		t.Fatalf("through port-forward: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "inside" {
		t.Fatalf("through port-forward: %q", body)
	}

	// ForwardIn: a host server reached from a process inside through the Unix-socket bridge,
	// and not otherwise.
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "host") }))
	t.Cleanup(host.Close)
	hostAddr := strings.TrimPrefix(host.URL, "http://")
	if c, err := ns.DialContext(ctx, "tcp", hostAddr); err == nil {
		c.Close()
		t.Fatalf("inside reached the host's %s", hostAddr)
	}
	in, err := ns.ForwardIn(hostAddr)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ns.Command(kubectl, "--server", "http://"+in, "get", "--raw", "/").CombinedOutput(); err != nil || string(out) != "host" {
		t.Fatalf("kubectl inside through the bridge to the host: %v: %s", err, out)
	}
}

// TestNetnsCleanup: a namespace and every process in it are gone after its test, even one the
// test left running.
func TestNetnsCleanup(t *testing.T) {
	var name string
	var pid int
	t.Run("leaves a process", func(t *testing.T) {
		ns := framework.NewNetns(t)
		name = ns.Name
		cmd := exec.Command("ip", "netns", "exec", ns.Name, "sleep", "600")
		// Should the cleanup miss it, it still dies with the test process.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait() }()
		pid = cmd.Process.Pid
		// ip netns exec joins the namespace a moment after it started (CI once asked before,
		// found none, and the cleanup then ran before the join: the process outlived it).
		var pids []int
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			var err error
			if pids, err = ns.Pids(); err != nil {
				t.Fatal(err)
			}
			if len(pids) > 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(pids) != 1 || pids[0] != pid {
			t.Fatalf("pids in %s: %v, want [%d]", ns.Name, pids, pid)
		}
	})
	if _, err := os.Stat(filepath.Join("/var/run/netns", name)); !os.IsNotExist(err) {
		t.Fatalf("namespace %s still there: %v", name, err)
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), name) {
		t.Fatalf("ip netns list still has %s:\n%s", name, out)
	}
	// Killed: gone, or a zombie until the Wait above collects it.
	if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(stat), ") Z") {
		t.Fatalf("process %d still running: %s", pid, stat)
	}
}

// TestNetnsSweepsOrphans: the namespace of a test process killed before its cleanup (named
// after that process's pid) is deleted by the next NewNetns, with what runs in it; the
// namespace of a live process is not.
func TestNetnsSweepsOrphans(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := fmt.Sprintf("mnt-%d-00000000", gone.Process.Pid)
	live := fmt.Sprintf("mnt-%d-00000001", os.Getpid())
	for _, name := range []string{orphan, live} {
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", name, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", live).Run() })
	left := exec.Command("ip", "netns", "exec", orphan, "sleep", "600")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = left.Wait(); close(exited) }()
	// Sweep only once sleep runs in the orphan: a sweep while ip is still entering it finds
	// no process there, and sleep then lives on in the deleted namespace.
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		out, err := exec.Command("ip", "netns", "pids", orphan).Output()
		if err == nil && strings.TrimSpace(string(out)) != "" {
			break
		}
		if time.Since(start) > 10*time.Second {
			_ = left.Process.Kill()
			t.Fatalf("sleep did not start in %s: %v %s", orphan, err, out)
		}
	}

	framework.NewNetns(t)
	if _, err := os.Stat(filepath.Join("/var/run/netns", orphan)); !os.IsNotExist(err) {
		t.Fatalf("the orphan %s is still there: %v", orphan, err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the process in the orphan was not killed")
	}
	if _, err := os.Stat(filepath.Join("/var/run/netns", live)); err != nil {
		t.Fatalf("the namespace of a live process was swept: %v", err)
	}
}
