// Command tunnel measures requests through a mount's reverse tunnel against the same target
// reached without one, in the same run, on real servers on loopback: a host kube-apiserver
// with mount-apiserver (the built binary) aggregated into it, a remote kube-apiserver with the
// test kubelet and a pod, and mount-agent processes that attach through the host's
// aggregator. Paths: direct to the remote; a plain URL mount (the server dials the remote);
// a tunnel mount with Server credentials (TLS end to end through the tunnel); a tunnel mount
// with Agent credentials (plain HTTP through the tunnel, the agent adds its credentials). It
// reports small GET p50/p99, the throughput of a ~10 MB LIST, the time of a whole exec
// (WebSocket, `echo`) and the round trip of a line through `cat` in one exec session.
//
// The target is on the host's loopback here (no network namespace): the tunnel's cost is what
// is measured, and the plain mount shows the same target without it.
//
//	go run ./test/bench/tunnel [-requests 2000] [-list-mb 10] [-lists 20] [-execs 30] [-rounds 1]
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/bench/measure"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

func main() {
	requests := flag.Int("requests", 2000, "small GETs per path and round")
	listMB := flag.Int("list-mb", 10, "size of the LIST response in MB")
	lists := flag.Int("lists", 20, "LISTs per path")
	execs := flag.Int("execs", 30, "whole execs per path, and line round trips per exec session (x10)")
	rounds := flag.Int("rounds", 1, "how often to repeat every measurement")
	flag.Parse()
	if err := run(*requests, *listMB, *lists, *execs, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type path struct {
	name string
	cfg  *rest.Config
	// base is the URL below which the remote's API is served on this path.
	base   string
	client *http.Client
}

func run(requests, listMB, lists, execs, rounds int) error {
	ctx := klog.NewContext(context.Background(), klog.Background())
	dir, err := os.MkdirTemp("", "mount-bench-tunnel-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := framework.BuildMountAPIServer()
	if err != nil {
		return err
	}
	defer framework.RemoveBuilds()
	if _, err := framework.BuildAgentBinary(); err != nil {
		return err
	}
	// No audit log: the bench measures the proxy and the tunnel, not the audit writer.
	clusters, err := framework.StartClustersProcess(ctx, dir, bin, "--audit-log-path=")
	if err != nil {
		return err
	}
	defer clusters.Stop()
	host, agg, remote := clusters.Host, clusters.Agg, clusters.Remote
	kubelet, err := framework.StartKubelet(ctx, remote, "bench-node")
	if err != nil {
		return err
	}
	defer kubelet.Stop()
	if err := kubelet.CreatePod(ctx, "default", "app"); err != nil {
		return err
	}
	if err := setup(ctx, host, remote, listMB); err != nil {
		return err
	}

	// The agents: on the hub a user that may attach (a client certificate of the host's CA),
	// on the remote the impersonator's credentials for Agent mode.
	hubUser, err := host.UserConfig("bench-agent")
	if err != nil {
		return err
	}
	hubKubeconfig, err := host.WriteKubeconfig(hubUser, "bench-agent")
	if err != nil {
		return err
	}
	remoteAgent, err := remote.UserConfig("mount-proxy")
	if err != nil {
		return err
	}
	remoteAgentKubeconfig, err := remote.WriteKubeconfig(remoteAgent, "bench-agent")
	if err != nil {
		return err
	}
	target := strings.TrimPrefix(remote.URL, "https://")
	for _, a := range []struct{ mount, log string }{{"bench-tunnel", "agent-server.log"}, {"bench-agent", "agent-agent.log"}} {
		args := []string{"--hub-kubeconfig", hubKubeconfig, "--mount", a.mount, "--target", target, "--health-bind-address", ""}
		if a.mount == "bench-agent" {
			args = append(args, "--kubeconfig", remoteAgentKubeconfig)
		}
		agent, err := framework.RunAgentIn(nil, filepath.Join(dir, a.log), args...)
		if err != nil {
			return err
		}
		defer agent.Kill()
	}

	bencherHost, err := host.UserConfig("bencher")
	if err != nil {
		return err
	}
	bencherRemote, err := remote.UserConfig("bencher")
	if err != nil {
		return err
	}
	direct := agg.DirectConfig(bencherHost)
	mountBase := func(name string) string {
		return agg.Mount.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/" + name + "/proxy"
	}
	paths := []*path{
		{name: "direct to the remote", cfg: bencherRemote, base: remote.URL},
		{name: "plain mount", cfg: direct, base: mountBase("bench")},
		{name: "tunnel, Server creds", cfg: direct, base: mountBase("bench-tunnel")},
		{name: "tunnel, Agent creds", cfg: direct, base: mountBase("bench-agent")},
	}
	for _, p := range paths {
		if p.client, err = measure.Client(p.cfg); err != nil {
			return err
		}
		if err := waitOK(ctx, p.client, p.base+"/api"); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	fmt.Println("mount-apiserver aggregated into a host kube-apiserver; requests sent to mount-apiserver directly (not through the host); agents attached through the host's aggregator")

	ratio := func(v, base float64) string { return fmt.Sprintf("%.2fx", v/base) }
	for round := range rounds {
		if rounds > 1 {
			fmt.Printf("round %d\n", round+1)
		}
		fmt.Printf("small GET (/api/v1/namespaces/default), %d sequential; ratios: against direct, against the plain mount\n", requests)
		var p50s, p99s []time.Duration
		for i, p := range paths {
			samples, err := measure.TimeGets(p.client, p.base+"/api/v1/namespaces/default", requests)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			p50, p99 := samples[len(samples)/2], samples[len(samples)*99/100]
			p50s, p99s = append(p50s, p50), append(p99s, p99)
			line := fmt.Sprintf("  %-22s p50 %8v  p99 %8v  p50 %s  p99 %s", p.name, p50.Round(time.Microsecond), p99.Round(time.Microsecond),
				ratio(float64(p50), float64(p50s[0])), ratio(float64(p99), float64(p99s[0])))
			if i >= 2 {
				line += fmt.Sprintf("  | p50 %s  p99 %s of the plain mount", ratio(float64(p50), float64(p50s[1])), ratio(float64(p99), float64(p99s[1])))
			}
			fmt.Println(line)
		}

		fmt.Printf("LIST of ~%d MB (/api/v1/namespaces/bench/configmaps), %d each\n", listMB, lists)
		var mbs []float64
		for i, p := range paths {
			mbps, size, err := measure.ListThroughput(p.client, p.base+"/api/v1/namespaces/bench/configmaps", lists)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			mbs = append(mbs, mbps)
			line := fmt.Sprintf("  %-22s %7.1f MB/s (%.1f MB per list)  %s", p.name, mbps, float64(size)/1e6, ratio(mbps, mbs[0]))
			if i >= 2 {
				line += fmt.Sprintf("  | %s of the plain mount", ratio(mbps, mbs[1]))
			}
			fmt.Println(line)
		}

		fmt.Printf("exec (WebSocket) in pod default/app: %d whole execs of `echo`, and %d line round trips through `cat` in one session\n", execs, 10*execs)
		var whole, lines []time.Duration
		for i, p := range paths {
			w, err := timeExecs(ctx, p, execs)
			if err != nil {
				return fmt.Errorf("%s: exec: %w", p.name, err)
			}
			l, err := timeLines(ctx, p, 10*execs)
			if err != nil {
				return fmt.Errorf("%s: exec session: %w", p.name, err)
			}
			whole, lines = append(whole, w), append(lines, l)
			line := fmt.Sprintf("  %-22s exec p50 %8v  %s   line round trip p50 %8v  %s", p.name, w.Round(time.Microsecond), ratio(float64(w), float64(whole[0])),
				l.Round(time.Microsecond), ratio(float64(l), float64(lines[0])))
			if i >= 2 {
				line += fmt.Sprintf("  | %s, %s of the plain mount", ratio(float64(w), float64(whole[1])), ratio(float64(l), float64(lines[1])))
			}
			fmt.Println(line)
		}
	}
	return nil
}

// setup: the remote lets "mount-proxy" impersonate and "bencher" do anything; the host lets
// "bencher" proxy and "bench-agent" attach, holds the Secret of the plain and the Server
// tunnel mount, and the three Mounts; the remote gets ~listMB MB of ConfigMaps in namespace
// bench.
func setup(ctx context.Context, host, remote *framework.KubeAPIServer, listMB int) error {
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"users", "groups"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}}}
	if _, err := remote.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "impersonator"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		return err
	}
	bind := func(k *framework.KubeAPIServer, user, role string) error {
		_, err := k.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
		}, metav1.CreateOptions{})
		return err
	}
	for _, b := range []struct {
		k          *framework.KubeAPIServer
		user, role string
	}{{remote, "mount-proxy", "impersonator"}, {remote, "bencher", "cluster-admin"}, {host, "bencher", "cluster-admin"}} {
		if err := bind(b.k, b.user, b.role); err != nil {
			return err
		}
	}
	if _, err := host.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bench-agent"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/attach"}, ResourceNames: []string{"bench-tunnel", "bench-agent"}, Verbs: []string{"get", "create"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := bind(host, "bench-agent", "bench-agent"); err != nil {
		return err
	}
	proxyUser, err := remote.UserConfig("mount-proxy")
	if err != nil {
		return err
	}
	kubeconfig, err := framework.KubeconfigBytes(proxyUser)
	if err != nil {
		return err
	}
	if _, err := host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	mounts, err := clientset.NewForConfig(host.AdminConfig)
	if err != nil {
		return err
	}
	for _, m := range []*v1alpha1.Mount{
		{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: "bench"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bench-tunnel"}, Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: "bench"},
			Tunnel: &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bench-agent"}, Spec: v1alpha1.MountSpec{Tunnel: &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsAgent}}},
	} {
		if _, err := mounts.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := remote.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	value := strings.Repeat("x", 100*1024)
	for i := range listMB * 10 {
		if _, err := remote.Client.CoreV1().ConfigMaps("bench").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i)},
			Data: map[string]string{"v": value}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// waitOK waits until url answers 200 (an agent attaches a moment after it starts).
func waitOK(ctx context.Context, c *http.Client, url string) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := c.Get(url)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s does not answer: last %s", url, last)
	}
	return nil
}

// executor returns a WebSocket exec of command in pod default/app on path p.
func executor(p *path, stdin bool, command ...string) (remotecommand.Executor, error) {
	q := "stdout=true"
	if stdin {
		q += "&stdin=true"
	}
	for _, c := range command {
		q += "&command=" + c
	}
	return remotecommand.NewWebSocketExecutor(p.cfg, "GET", p.base+"/api/v1/namespaces/default/pods/app/exec?"+q)
}

// timeExecs returns the p50 of n whole execs of `echo hi`: upgrade, command, output, end.
func timeExecs(ctx context.Context, p *path, n int) (time.Duration, error) {
	samples := make([]time.Duration, 0, n)
	for i := range n + 3 {
		exec, err := executor(p, false, "echo", "hi")
		if err != nil {
			return 0, err
		}
		var out bytes.Buffer
		start := time.Now()
		if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out}); err != nil {
			return 0, err
		}
		if out.String() != "hi\n" {
			return 0, fmt.Errorf("exec said %q", out.String())
		}
		if i >= 3 { // warm-up
			samples = append(samples, time.Since(start))
		}
	}
	slices.Sort(samples)
	return samples[len(samples)/2], nil
}

// timeLines returns the p50 of n round trips of a line through `cat` in one exec session.
func timeLines(ctx context.Context, p *path, n int) (time.Duration, error) {
	exec, err := executor(p, true, "cat")
	if err != nil {
		return 0, err
	}
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: stdoutW})
		stdoutW.CloseWithError(io.EOF)
		done <- err
	}()
	out := bufio.NewReader(stdoutR)
	samples := make([]time.Duration, 0, n)
	for i := range n + 10 {
		start := time.Now()
		if _, err := io.WriteString(stdinW, "ping\n"); err != nil {
			return 0, err
		}
		line, err := out.ReadString('\n')
		if err != nil {
			return 0, fmt.Errorf("reading the echo: %w", err)
		}
		if line != "ping\n" {
			return 0, fmt.Errorf("cat said %q", line)
		}
		if i >= 10 {
			samples = append(samples, time.Since(start))
		}
	}
	stdinW.Close()
	select {
	case err := <-done:
		if err != nil {
			return 0, err
		}
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("the exec session did not end after its stdin closed")
	}
	slices.Sort(samples)
	return samples[len(samples)/2], nil
}
