// Command bench measures the mount proxy against a direct baseline in the same run, on real
// servers on loopback: a host kube-apiserver with mount-apiserver aggregated into it, and a
// remote kube-apiserver that a Mount points at. It reports p50/p99 of a small GET (direct to
// the remote, through mount-apiserver's proxy, through the host aggregator and the proxy),
// throughput of a ~10 MB LIST, and new upstream TCP connections per 1,000 proxied requests.
//
// mount-apiserver (built from ./cmd/mount-apiserver) and the bare Go reverse proxy each run as
// their own process, so that the bench also reports their CPU time per request (from
// /proc/<pid>/stat, less the process's idle rate) and Go heap allocations per request (the
// runtime's malloc count), the proxy's against the bare proxy's in the same run.
//
//	go run ./test/bench [-requests 2000] [-list-mb 10] [-rounds n] [-shared-etcd] [-compare-binary b] [-cpuprofile f] [-allocprofile f]
package main

import (
	"context"
	"flag"
	"fmt"
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
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/bench/measure"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

func main() {
	requests := flag.Int("requests", 2000, "GETs per path")
	listMB := flag.Int("list-mb", 10, "size of the LIST response in MB")
	lists := flag.Int("lists", 20, "LISTs per path (0: no LISTs, nor the connection count)")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of mount-apiserver during extra proxied GETs to this file")
	flag.StringVar(&allocProfile, "allocprofile", "", "write mount-apiserver's allocation profiles before and after extra proxied GETs to this file with suffixes .before and .after (go tool pprof -sample_index=alloc_objects -base f.before f.after)")
	flag.StringVar(&binary, "binary", "", "the mount-apiserver binary to measure (default: built from ./cmd/mount-apiserver), e.g. an older version's")
	flag.StringVar(&compareBinary, "compare-binary", "", "also measure this mount-apiserver binary (e.g. an older version), as a second server with its own etcd, in the same rounds")
	flag.IntVar(&rounds, "rounds", 1, "how often to repeat the small GETs of every path")
	flag.BoolVar(&sharedEtcd, "shared-etcd", false, "also measure a mount-apiserver whose etcd is not its own (--etcd-servers), as HA replicas run: it reads each Mount with a quorum read")
	flag.IntVar(&profileSeconds, "profile-seconds", 10, "how long to profile")
	flag.Parse()
	if kubeconfig := os.Getenv(bareProxyEnv); kubeconfig != "" {
		if err := serveBareProxy(kubeconfig); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := run(*requests, *listMB, *lists); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

var (
	cpuProfile, allocProfile string
	profileSeconds, rounds   int
	binary, compareBinary    string
	sharedEtcd               bool
)

func run(requests, listMB, lists int) error {
	ctx := klog.NewContext(context.Background(), klog.Background())
	dir, err := os.MkdirTemp("", "mount-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := binary
	if bin == "" {
		if bin, err = framework.BuildMountAPIServer(); err != nil {
			return err
		}
		defer framework.RemoveBuilds()
	}
	// No audit log: the benchmark measures the proxy, not the harness's audit writer.
	clusters, err := framework.StartClustersProcess(ctx, dir, bin, "--audit-log-path=")
	if err != nil {
		return err
	}
	defer clusters.Stop()
	host, agg, remote := clusters.Host, clusters.Agg, clusters.Remote

	if err := setup(ctx, host, remote, listMB); err != nil {
		return err
	}
	bencherHost, err := host.UserConfig("bencher")
	if err != nil {
		return err
	}
	bencherRemote, err := remote.UserConfig("bencher")
	if err != nil {
		return err
	}
	floor, err := startBareProxy(dir, remote)
	if err != nil {
		return err
	}
	defer floor.stop()
	var stops []func()
	admin := agg.DirectConfig(host.AdminConfig)
	mountProc := &process{pid: agg.Pid, heap: goHeap(admin)}
	paths := []struct {
		name   string
		cfg    *rest.Config
		client *http.Client
		base   string
		// proc is the proxy process whose CPU and allocations the path reports.
		proc *process
		// url, if set, is GET instead of base's small GET.
		url string
	}{
		{name: "direct", cfg: bencherRemote, base: remote.URL},
		{name: "bare Go proxy", client: floor.client, base: floor.url, proc: floor.process},
		{name: "mount proxy", cfg: agg.DirectConfig(bencherHost), base: agg.Mount.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/bench/proxy", proc: mountProc},
		{name: "host + mount proxy", cfg: bencherHost, base: host.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/bench/proxy", proc: mountProc},
		// Not a proxy path: the cheapest request mount-apiserver serves through its whole
		// handler chain (authentication, authorization, audit, max-in-flight, timeout, metrics,
		// go-restful), a GET of the Mount from the watch cache. The bare proxy's CPU plus this
		// is the floor of a proxied GET that keeps the chain.
		{name: "GET of the Mount", cfg: agg.DirectConfig(bencherHost), url: agg.Mount.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/bench?resourceVersion=0", proc: mountProc},
		// Not a proxy path either: the bare proxy's process answering by itself, what serving
		// a request costs without a hop and without an apiserver's chain.
		{name: "bare Go server", client: floor.client, url: floor.url + localPath, proc: floor.process},
	}
	// extra starts another mount-apiserver process with the Mount "bench" and returns its path,
	// inserted after the mount proxy.
	extra := func(name, bin, subdir string, args ...string) error {
		other, pid, err := framework.StartProcess(ctx, bin, filepath.Join(dir, subdir), append([]string{"--kubeconfig", agg.Kubeconfig, "--audit-log-path="}, args...)...)
		if err != nil {
			return err
		}
		stops = append(stops, func() { _ = other.Stop() })
		direct := func(cfg *rest.Config) *rest.Config {
			cfg = rest.CopyConfig(cfg)
			cfg.Host, cfg.CAData = other.URL, other.CAData
			return cfg
		}
		if err := createBenchMount(ctx, direct(host.AdminConfig)); err != nil {
			return err
		}
		otherAdmin := direct(host.AdminConfig)
		otherProc := &process{pid: pid, heap: goHeap(otherAdmin)}
		if err := otherProc.measureIdle(3 * time.Second); err != nil {
			return err
		}
		fmt.Printf("%s: %s %s (idle CPU %v/s)\n", name, bin, strings.Join(args, " "), otherProc.idle.Round(time.Microsecond))
		paths = slices.Insert(paths, 3, paths[2])
		paths[3].name, paths[3].cfg, paths[3].base, paths[3].proc = name, direct(bencherHost), other.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/bench/proxy", otherProc
		return nil
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	if sharedEtcd {
		// An etcd of its own process would be shared by replicas; this one runs in the bench's
		// process, so the server's CPU below leaves out etcd's side of its reads.
		etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Options{Directory: filepath.Join(dir, "shared-etcd"), LogLevel: "error"})
		if err != nil {
			return err
		}
		stops = append(stops, etcd.Close)
		if err := extra("mount, shared etcd", bin, "shared", "--etcd-servers", etcd.ClientURL); err != nil {
			return err
		}
	}
	if compareBinary != "" {
		if err := extra("compared mount proxy", compareBinary, "compare"); err != nil {
			return err
		}
	}
	clientOf := func(i int) (*http.Client, error) {
		if paths[i].client != nil {
			return paths[i].client, nil
		}
		return measure.Client(paths[i].cfg)
	}

	for _, proc := range []*process{floor.process, mountProc} {
		if err := proc.measureIdle(3 * time.Second); err != nil {
			return err
		}
	}
	fmt.Printf("small GET (/api/v1/namespaces/default), %d requests each, sequential; CPU and allocations of the proxy process\n", requests)
	for round := range rounds {
		if rounds > 1 {
			fmt.Printf(" round %d\n", round+1)
		}
		var p50s, p99s []time.Duration
		var bareCPU, serveCPU, mountCPU, getCPU time.Duration
		var bareP50, serveP50, mountP50, getP50 time.Duration
		for i, p := range paths {
			c, err := clientOf(i)
			if err != nil {
				return err
			}
			var before usage
			if p.proc != nil {
				if before, err = p.proc.usage(); err != nil {
					return err
				}
			}
			start := time.Now()
			url := p.base + "/api/v1/namespaces/default"
			if p.url != "" {
				url = p.url
			}
			samples, err := measure.TimeGets(c, url, requests)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			elapsed := time.Since(start)
			p50, p99 := samples[len(samples)/2], samples[len(samples)*99/100]
			p50s, p99s = append(p50s, p50), append(p99s, p99)
			line := fmt.Sprintf("  %-20s p50 %8v  p99 %8v  p50 %.2fx  p99 %.2fx", p.name, p50.Round(time.Microsecond), p99.Round(time.Microsecond),
				float64(p50)/float64(p50s[0]), float64(p99)/float64(p99s[0]))
			if i > 1 {
				line += fmt.Sprintf("  p50 %.2fx bare", float64(p50)/float64(p50s[1]))
			}
			if p.proc != nil {
				after, err := p.proc.usage()
				if err != nil {
					return err
				}
				// The warm-up GETs count too: timeGets sends 50 before the timed ones.
				n := requests + 50
				cpu, allocs, bytes := p.proc.perRequest(before, after, elapsed, n)
				line += fmt.Sprintf("  CPU %v/req", cpu.Round(time.Microsecond))
				switch p.name {
				case "bare Go proxy":
					bareCPU, bareP50 = cpu, p50
				case "bare Go server":
					serveCPU, serveP50 = cpu, p50
				case "GET of the Mount":
					getCPU, getP50 = cpu, p50
				case "mount proxy":
					mountCPU, mountP50 = cpu, p50
				}
				switch {
				case i == 1 || p.url != "":
				case bareCPU > 0:
					line += fmt.Sprintf(" (%.2fx bare)", float64(cpu)/float64(bareCPU))
				}
				line += fmt.Sprintf("  %.0f allocs/req  %.1f KB/req", allocs, bytes/1024)
			}
			fmt.Println(line)
		}
		if serveCPU > 0 && getCPU > 0 {
			// The floor of a proxied GET that keeps the apiserver's chain: serving the caller's
			// request and the chain (the GET of the Mount), plus the hop (the bare proxy less
			// its serving).
			floorCPU, floorP50 := getCPU+bareCPU-serveCPU, getP50+bareP50-serveP50
			fmt.Printf("  floor of a proxied GET through the chain (GET of the Mount + bare proxy - bare server): CPU %v/req, p50 %v; mount proxy CPU %.2fx floor, p50 %.2fx floor\n",
				floorCPU.Round(time.Microsecond), floorP50.Round(time.Microsecond), float64(mountCPU)/float64(floorCPU), float64(mountP50)/float64(floorP50))
		}
	}
	fmt.Printf("  (idle CPU subtracted: bare %v/s, mount-apiserver %v/s; mount-apiserver's CPU includes its embedded etcd)\n",
		floor.idle.Round(time.Microsecond), mountProc.idle.Round(time.Microsecond))

	if cpuProfile != "" || allocProfile != "" {
		if err := profile(admin, paths[2].cfg, paths[2].base+"/api/v1/namespaces/default", profileSeconds); err != nil {
			return err
		}
	}
	if lists == 0 {
		return nil
	}

	fmt.Printf("LIST of ~%d MB (/api/v1/namespaces/bench/configmaps), %d lists each\n", listMB, lists)
	var base float64
	for i, p := range paths {
		if p.url != "" {
			continue
		}
		c, err := clientOf(i)
		if err != nil {
			return err
		}
		mbps, size, err := measure.ListThroughput(c, p.base+"/api/v1/namespaces/bench/configmaps", lists)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		if i == 0 {
			base = mbps
		}
		fmt.Printf("  %-20s %7.1f MB/s  (%.1f MB per list)  %.2fx\n", p.name, mbps, float64(size)/1e6, mbps/base)
	}

	before, err := upstreamConnections(admin)
	if err != nil {
		return err
	}
	c, err := clientOf(2)
	if err != nil {
		return err
	}
	if _, err := measure.TimeGets(c, paths[2].base+"/api/v1/namespaces/default", 1000); err != nil {
		return err
	}
	after, err := upstreamConnections(admin)
	if err != nil {
		return err
	}
	fmt.Printf("new upstream TCP connections per 1,000 proxied requests: %d\n", after-before)
	return nil
}

// setup: the remote lets "mount-proxy" impersonate and "bencher" do anything; the host
// holds the Secret and the Mount "bench" and lets "bencher" proxy; the remote gets ~listMB MB
// of ConfigMaps in namespace bench.
func setup(ctx context.Context, host, remote *framework.KubeAPIServer, listMB int) error {
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"users", "groups"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}}}
	if _, err := remote.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "impersonator"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for user, role := range map[string]string{"mount-proxy": "impersonator", "bencher": "cluster-admin"} {
		if _, err := remote.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := host.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bencher"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "bencher"}},
	}, metav1.CreateOptions{}); err != nil {
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
	if err := createBenchMount(ctx, host.AdminConfig); err != nil {
		return err
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

// createBenchMount creates the Mount "bench" of the Secret clusters/bench on the server cfg
// reaches.
func createBenchMount(ctx context.Context, cfg *rest.Config) error {
	mounts, err := clientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = mounts.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: "bench"}}}, metav1.CreateOptions{})
	return err
}

// goHeap reads a mount-apiserver's allocations so far from its metrics.
func goHeap(admin *rest.Config) func() (int, int, error) {
	return func() (int, int, error) {
		n, err := framework.Metric(admin, "go_memstats_mallocs_total")
		if err != nil {
			return 0, 0, err
		}
		bytes, err := framework.Metric(admin, "go_memstats_alloc_bytes_total")
		return n, bytes, err
	}
}

func upstreamConnections(admin *rest.Config) (int, error) {
	return framework.Metric(admin, `mount_proxy_upstream_connections_total{mount="bench"}`)
}
