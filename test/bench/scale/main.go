// Command scale measures the status controller at scale: a mount-apiserver process (delegated
// mode, embedded etcd) against a real host kube-apiserver, with N Mounts of which most point at
// one real remote kube-apiserver and some at an unreachable address. It reports the time until
// all reachable mounts are Ready, the server's RSS, the latency of a LIST of all mounts, and
// status writes per minute in steady state.
//
//	go run ./test/bench/scale [-mounts 10000] [-unreachable-percent 1]
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/bench/measure"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

func main() {
	n := flag.Int("mounts", 10000, "number of mounts")
	unreachablePercent := flag.Int("unreachable-percent", 1, "percentage of mounts whose target is unreachable")
	steady := flag.Duration("steady", 5*time.Minute, "how long to count status writes and sample RSS after the LISTs, with nothing changing")
	flag.StringVar(&heapProfile, "heapprofile", "", "write the server's heap profile (in use) after the steady state to this file")
	flag.BoolVar(&externalEtcd, "external-etcd", false, "run etcd as its own process (--etcd-servers), to report the server's and etcd's RSS apart")
	flag.BoolVar(&withCBOR, "cbor", false, "serve CBOR too (--feature-gates=CBORServingAndStorage=true, off by default) and read the LISTs in CBOR as well")
	flag.StringVar(&serverBinary, "server-binary", "", "run this mount-apiserver binary (e.g. one built from another commit) instead of building ./cmd/mount-apiserver")
	flag.StringVar(&saveMount, "save-mount", "", "write one Ready Mount, as the server answers a GET in JSON, to this file (test/bench/lists/testdata/mount.json)")
	flag.StringVar(&serverFlags, "server-flags", "", "extra flags for mount-apiserver, space separated (e.g. \"--feature-gates=ListFromCacheSnapshot=false\")")
	flag.Parse()
	clientfeatures.ReplaceFeatureGates(allowCBOR{clientfeatures.FeatureGates()})
	if err := run(*n, *unreachablePercent, *steady); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

var (
	externalEtcd bool
	heapProfile  string
	serverFlags  string
	serverBinary string
	saveMount    string
	withCBOR     bool
)

func run(n, unreachablePercent int, steady time.Duration) error {
	ctx := klog.NewContext(context.Background(), klog.Background())
	dir, err := os.MkdirTemp("", "mount-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The aggregated in-process server applies the bundle and yields the service account
	// kubeconfig; it stays idle (no status controller). The measured server is a process.
	clusters, err := framework.StartClusters(ctx, dir, func(o *options.Options) { o.StatusController = false; o.Audit.LogOptions.Path = "" })
	if err != nil {
		return err
	}
	defer clusters.Stop()
	host, agg, remote := clusters.Host, clusters.Agg, clusters.Remote
	if err := secrets(ctx, host, remote); err != nil {
		return err
	}

	bin := serverBinary
	if bin == "" {
		if bin, err = framework.BuildMountAPIServer(); err != nil {
			return err
		}
		defer framework.RemoveBuilds()
	}
	port, err := framework.FreePort()
	if err != nil {
		return err
	}
	root := filepath.Join(dir, "scale")
	args := []string{"--kubeconfig", agg.Kubeconfig, "--root-directory", root, "--secure-port", strconv.Itoa(port),
		"--leader-elect-resource-name", "scale-status", "--apiservice-name", ""}
	etcdPid := 0
	if externalEtcd {
		url, pid, stop, err := startEtcd(dir)
		if err != nil {
			return err
		}
		defer stop()
		etcdPid = pid
		args = append(args, "--etcd-servers", url)
	}
	if withCBOR {
		args = append(args, "--feature-gates=CBORServingAndStorage=true")
	}
	args = append(args, strings.Fields(serverFlags)...)
	server := exec.Command(bin, args...)
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return err
	}
	server.Stdout, server.Stderr = logFile, logFile
	server.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := server.Start(); err != nil {
		return err
	}
	defer func() { _ = server.Process.Signal(syscall.SIGTERM); _ = server.Wait() }()

	admin := rest.CopyConfig(host.AdminConfig)
	admin.Host = fmt.Sprintf("https://127.0.0.1:%d", port)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		ca, err := os.ReadFile(filepath.Join(root, "pki", "ca.crt"))
		if err != nil {
			return false, nil
		}
		admin.CAData = ca
		c, err := rest.HTTPClientFor(admin)
		if err != nil {
			return false, err
		}
		resp, err := c.Get(admin.Host + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return fmt.Errorf("server not ready: %w", err)
	}
	admin.QPS, admin.Burst = 5000, 10000
	client, err := clientset.NewForConfig(admin)
	if err != nil {
		return err
	}
	fmt.Printf("mount-apiserver pid %d, RSS idle %d MiB\n", server.Process.Pid, rssMiB(server.Process.Pid))

	unreachable := n * unreachablePercent / 100
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var createErr error
	var once sync.Once
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				secret := "scale"
				if i < unreachable {
					secret = "unreachable"
				}
				m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m-%05d", i)},
					Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: secret}}}
				if _, err := client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
					once.Do(func() { createErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if createErr != nil {
		log, _ := os.ReadFile(logFile.Name())
		return fmt.Errorf("%w\nserver log:\n%s", createErr, log)
	}
	fmt.Printf("created %d mounts (%d unreachable) in %v\n", n, unreachable, time.Since(start).Round(time.Millisecond))

	var counts map[v1alpha1.MountPhase]int
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 20*time.Minute, false, func(ctx context.Context) (bool, error) {
		list, err := client.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		counts = map[v1alpha1.MountPhase]int{}
		for _, m := range list.Items {
			counts[m.Status.Phase]++
		}
		return counts[v1alpha1.MountPhaseReady] == n-unreachable, nil
	}); err != nil {
		return fmt.Errorf("waiting for Ready: %v (%v)", err, counts)
	}
	fmt.Printf("all %d reachable mounts Ready %v after the first create; phases %v\n", n-unreachable, time.Since(start).Round(time.Second), counts)
	if etcdPid != 0 {
		fmt.Printf("RSS with %d mounts: mount-apiserver %d MiB, etcd (own process) %d MiB\n", n, rssMiB(server.Process.Pid), rssMiB(etcdPid))
	} else {
		fmt.Printf("RSS with %d mounts: %d MiB (includes the embedded etcd)\n", n, rssMiB(server.Process.Pid))
	}
	memory(admin, server.Process.Pid)
	if saveMount != "" {
		body, err := client.MountsV1alpha1().RESTClient().Get().Resource("mounts").Name(fmt.Sprintf("m-%05d", n-1)).SetHeader("Accept", "application/json").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("reading a Mount to save: %w", err)
		}
		if err := os.WriteFile(saveMount, body, 0o644); err != nil {
			return err
		}
	}

	for _, rv := range []string{"", "0"} {
		var samples []time.Duration
		for range 10 {
			t0 := time.Now()
			list, err := client.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				return err
			}
			samples = append(samples, time.Since(t0))
			if len(list.Items) != n {
				return fmt.Errorf("listed %d mounts, want %d", len(list.Items), n)
			}
		}
		slices.Sort(samples)
		fmt.Printf("LIST of all %d mounts, decoded by client-go (resourceVersion %q): p50 %v, max %v\n", n, rv, samples[len(samples)/2].Round(time.Millisecond), samples[len(samples)-1].Round(time.Millisecond))
	}
	// With -cbor, the same LISTs in CBOR: client-go asked for application/cbor (its
	// ClientsAllowCBOR gate is on in this process; only this client sets the content type).
	cborConfig := rest.CopyConfig(admin)
	cborConfig.ContentType = "application/cbor"
	cborClient, err := clientset.NewForConfig(cborConfig)
	if err != nil {
		return err
	}
	for _, rv := range []string{"", "0"} {
		if !withCBOR {
			break
		}
		var samples []time.Duration
		for range 10 {
			t0 := time.Now()
			list, err := cborClient.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				return err
			}
			samples = append(samples, time.Since(t0))
			if len(list.Items) != n {
				return fmt.Errorf("listed %d mounts in CBOR, want %d", len(list.Items), n)
			}
		}
		slices.Sort(samples)
		fmt.Printf("LIST of all %d mounts in CBOR, decoded by client-go (resourceVersion %q): p50 %v, max %v\n", n, rv, samples[len(samples)/2].Round(time.Millisecond), samples[len(samples)-1].Round(time.Millisecond))
	}

	// The same LIST read as bytes: what the server takes, without the client's JSON decoding.
	raw, err := rest.HTTPClientFor(admin)
	if err != nil {
		return err
	}
	var samples []time.Duration
	reads := []struct{ what, accept string }{
		{"LIST", "application/json"},
		{"Table (kubectl's format, one page)", "application/json;as=Table;v=v1;g=meta.k8s.io"},
	}
	if withCBOR {
		reads = append(reads, struct{ what, accept string }{"LIST in CBOR", "application/cbor"})
	}
	for _, read := range reads {
		samples, size, err := measure.TimeReads(ctx, raw, admin.Host+"/apis/mounts.kcp.io/v1alpha1/mounts?resourceVersion=0", read.accept, 10)
		if err != nil {
			return err
		}
		slices.Sort(samples)
		fmt.Printf("%s of all %d mounts, read as bytes (%.1f MB): p50 %v, max %v\n", read.what, n, float64(size)/1e6, samples[len(samples)/2].Round(time.Millisecond), samples[len(samples)-1].Round(time.Millisecond))
	}

	// What a user sees: kubectl get mounts, a server-side table read in pages of 500 (kubectl's
	// default), and in one page.
	kubeconfig, err := framework.KubeconfigBytes(admin)
	if err != nil {
		return err
	}
	kubeconfigPath := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return err
	}
	kubeBin, err := framework.KubeBinDir()
	if err != nil {
		return err
	}
	for _, chunk := range []string{"500", "0"} {
		samples = samples[:0]
		for range 5 {
			t0 := time.Now()
			out, err := exec.CommandContext(ctx, filepath.Join(kubeBin, "kubectl"), "--kubeconfig", kubeconfigPath, "get", "mounts", "--no-headers", "--chunk-size", chunk).Output()
			if err != nil {
				return fmt.Errorf("kubectl get mounts: %w", err)
			}
			samples = append(samples, time.Since(t0))
			if rows := strings.Count(string(out), "\n"); rows != n {
				return fmt.Errorf("kubectl get mounts printed %d rows, want %d", rows, n)
			}
		}
		slices.Sort(samples)
		fmt.Printf("kubectl get mounts --chunk-size %s (%d rows): p50 %v, max %v\n", chunk, n, samples[len(samples)/2].Round(time.Millisecond), samples[len(samples)-1].Round(time.Millisecond))
	}

	w0, err := statusWrites(admin)
	if err != nil {
		return err
	}
	// The steady state starts right after the LISTs above, whose garbage the Go runtime returns
	// to the OS only after later GC cycles (it forces one every two minutes when idle).
	first, peak, last := rssMiB(server.Process.Pid), 0, 0
	for t0 := time.Now(); time.Since(t0) < steady; time.Sleep(5 * time.Second) {
		last = rssMiB(server.Process.Pid)
		peak = max(peak, last)
	}
	w1, err := statusWrites(admin)
	if err != nil {
		return err
	}
	fmt.Printf("status writes in steady state: %d in %v (%.1f per minute)\n", w1-w0, steady, float64(w1-w0)/steady.Minutes())
	fmt.Printf("RSS in steady state, sampled every 5s for %v: %d MiB at its start, %d MiB at most, %d MiB at its end\n", steady, first, peak, last)
	memory(admin, server.Process.Pid)
	if heapProfile != "" {
		return framework.Profile(admin, "heap?gc=1", heapProfile)
	}
	return nil
}

func secrets(ctx context.Context, host, remote *framework.KubeAPIServer) error {
	if _, err := host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	creds, err := remote.UserConfig("mount-prober")
	if err != nil {
		return err
	}
	reachable, err := framework.KubeconfigBytes(creds)
	if err != nil {
		return err
	}
	port, err := framework.FreePort()
	if err != nil {
		return err
	}
	down := rest.CopyConfig(creds)
	down.Host = fmt.Sprintf("https://127.0.0.1:%d", port) // nothing listens there
	unreachable, err := framework.KubeconfigBytes(down)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"scale": reachable, "unreachable": unreachable} {
		if _, err := host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"kubeconfig": data}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func statusWrites(admin *rest.Config) (int, error) {
	return framework.Metric(admin, "mount_status_writes_total")
}

// memory prints what the RSS is made of: anonymous memory (the Go heap and stacks) and file
// pages (the embedded etcd's memory-mapped database), and the Go heap's own accounting.
func memory(admin *rest.Config, pid int) {
	status := map[string]int{}
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[0], "Rss") {
				kb, _ := strconv.Atoi(f[1])
				status[strings.TrimSuffix(f[0], ":")] = kb / 1024
			}
		}
	}
	metric := func(name string) int {
		v, err := framework.Metric(admin, name)
		if err != nil {
			return -1
		}
		return v >> 20
	}
	fmt.Printf("  RSS anonymous %d MiB, file %d MiB; Go heap in use %d MiB, next GC at %d MiB, idle %d MiB (released %d MiB), stacks %d MiB\n",
		status["RssAnon"], status["RssFile"], metric("go_memstats_heap_inuse_bytes"), metric("go_memstats_next_gc_bytes"),
		metric("go_memstats_heap_idle_bytes"), metric("go_memstats_heap_released_bytes"), metric("go_memstats_stack_inuse_bytes"))
}

func rssMiB(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			return kb / 1024
		}
	}
	return -1
}

// startEtcd runs the etcd binary of hack/kube-binaries.sh on loopback ports.
func startEtcd(dir string) (url string, pid int, stop func(), err error) {
	bin, err := framework.KubeBinDir()
	if err != nil {
		return "", 0, nil, err
	}
	clientPort, err := framework.FreePort()
	if err != nil {
		return "", 0, nil, err
	}
	peerPort, err := framework.FreePort()
	if err != nil {
		return "", 0, nil, err
	}
	url = fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	cmd := exec.Command(filepath.Join(bin, "etcd"), "--data-dir", filepath.Join(dir, "etcd-data"),
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "default="+peer, "--log-level", "warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	return url, cmd.Process.Pid, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}

// allowCBOR turns on client-go's ClientsAllowCBOR (alpha) in this process, so that a client
// that asks for application/cbor may decode it; clients that set no content type stay JSON.
type allowCBOR struct{ clientfeatures.Gates }

func (g allowCBOR) Enabled(f clientfeatures.Feature) bool {
	return f == clientfeatures.ClientsAllowCBOR || g.Gates.Enabled(f)
}
