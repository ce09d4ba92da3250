// Command rewrite measures what renaming costs (issue #15), in one run against one real
// target: a remote kube-apiserver with a CRD stored under target names, and the
// mount-apiserver binary (built from ./cmd/mount-apiserver, standalone) with two Mounts of it:
// "plain" without rewrites and "renamed" with a group rename, a kind prefix and a label key
// prefix rename. Both mounts read the same objects; only the renames differ. It reports the
// time of a LIST of ~10 MB (10,000 objects) through each mount, alternating, with the ratio
// renamed / plain (goal: at most 1.20), and mount-apiserver's CPU time for each; of a watch of 10,000 events (sendInitialEvents, up
// to the bookmark that ends them); and mount-apiserver's peak RSS (VmHWM, reset before each
// pass) while a ~100 MB LIST streams through each mount.
//
//	go run ./test/bench/rewrite [-lists 10] [-watches 5] [-big-mb 100]
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
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

const (
	presented = "kubevirt.io"
	target    = "x.virtualization.example.org"
)

func main() {
	lists := flag.Int("lists", 10, "LISTs of ~10 MB per mount")
	watches := flag.Int("watches", 5, "watches of 10,000 events per mount")
	bigMB := flag.Int("big-mb", 100, "size of the LIST whose peak RSS is measured (0: skip)")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of mount-apiserver during renamed LISTs and watches to this file (suffixes .list and .watch)")
	flag.Parse()
	if err := run(*lists, *watches, *bigMB); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

var cpuProfile string

// profiled runs f while a CPU profile of the server is taken into path.
func profiled(admin *rest.Config, path string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- framework.Profile(admin, "profile?seconds=5", path) }()
	time.Sleep(200 * time.Millisecond)
	err := f()
	if perr := <-done; err == nil {
		err = perr
	}
	return err
}

func run(lists, watches, bigMB int) error {
	ctx := klog.NewContext(context.Background(), klog.Background())
	dir, err := os.MkdirTemp("", "mount-bench-rewrite-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	remote, err := framework.StartKubeAPIServer(ctx, filepath.Join(dir, "remote"))
	if err != nil {
		return err
	}
	defer remote.Stop()
	bin, err := framework.BuildMountAPIServer()
	if err != nil {
		return err
	}
	defer framework.RemoveBuilds()
	root := filepath.Join(dir, "server", "root")
	if err := os.MkdirAll(filepath.Dir(root), 0o700); err != nil {
		return err
	}
	server, pid, err := framework.StartProcess(ctx, bin, root, "--status-controller=false", "--audit-log-path=")
	if err != nil {
		return err
	}
	defer server.Stop()
	admin, err := clientcmd.BuildConfigFromFlags("", filepath.Join(root, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	admin.QPS, admin.Burst = 1000, 2000
	if err := setup(ctx, admin, remote, bigMB); err != nil {
		return err
	}
	c, err := rest.HTTPClientFor(admin)
	if err != nil {
		return err
	}
	mountURL := func(mount string) string {
		return admin.Host + "/apis/mounts.kcp.io/v1alpha1/mounts/" + mount + "/proxy"
	}
	paths := []struct{ name, url string }{
		{"plain", mountURL("plain") + "/apis/" + target + "/v1/namespaces/%s/prefixedvirtualmachines"},
		{"renamed", mountURL("renamed") + "/apis/" + presented + "/v1/namespaces/%s/virtualmachines"},
	}

	fmt.Printf("LIST of ~10 MB (10,000 objects of ~1 KB), %d per mount, alternating\n", lists)
	times := make([][]time.Duration, len(paths))
	cpu := make([]time.Duration, len(paths))
	var sizes [2]int64
	for i := range lists + 1 {
		for j, p := range paths {
			before, err := cpuTime(pid)
			if err != nil {
				return err
			}
			start := time.Now()
			n, err := get(c, fmt.Sprintf(p.url, "small"), "")
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			if i > 0 { // one warm-up
				times[j] = append(times[j], time.Since(start))
				after, err := cpuTime(pid)
				if err != nil {
					return err
				}
				cpu[j] += after - before
			}
			sizes[j] = n
		}
	}
	// Wall times vary with the machine's load; the server's CPU time per request does less.
	report := func(what string, times [][]time.Duration, cpu []time.Duration) {
		med := make([]time.Duration, len(times))
		for j := range times {
			slices.Sort(times[j])
			med[j] = times[j][len(times[j])/2]
			fmt.Printf("  %-8s median %8v  min %8v  max %8v  mount-apiserver CPU %8v each\n", paths[j].name, med[j].Round(time.Millisecond), times[j][0].Round(time.Millisecond), times[j][len(times[j])-1].Round(time.Millisecond),
				(cpu[j] / time.Duration(len(times[j]))).Round(time.Millisecond))
		}
		fmt.Printf("  %s: renamed / plain = %.2f (wall, medians), %.2f (mount-apiserver CPU)\n", what, float64(med[1])/float64(med[0]), float64(cpu[1])/float64(cpu[0]))
	}
	fmt.Printf("  response: plain %.1f MB, renamed %.1f MB\n", float64(sizes[0])/1e6, float64(sizes[1])/1e6)
	report("LIST", times, cpu)

	fmt.Printf("watch of 10,000 events (sendInitialEvents until the bookmark), %d per mount, alternating\n", watches)
	times = make([][]time.Duration, len(paths))
	cpu = make([]time.Duration, len(paths))
	for i := range watches + 1 {
		for j, p := range paths {
			before, err := cpuTime(pid)
			if err != nil {
				return err
			}
			start := time.Now()
			events, err := watchInitial(c, fmt.Sprintf(p.url, "small"))
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			if events != 10000 {
				return fmt.Errorf("%s: %d events, want 10000", p.name, events)
			}
			if i > 0 {
				times[j] = append(times[j], time.Since(start))
				after, err := cpuTime(pid)
				if err != nil {
					return err
				}
				cpu[j] += after - before
			}
		}
	}
	report("watch", times, cpu)

	if cpuProfile != "" {
		renamed := fmt.Sprintf(paths[1].url, "small")
		if err := profiled(admin, cpuProfile+".list", func() error {
			for range 5 {
				if _, err := get(c, renamed, ""); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		if err := profiled(admin, cpuProfile+".watch", func() error {
			for range 2 {
				if _, err := watchInitial(c, renamed); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}

	if bigMB == 0 {
		return nil
	}
	fmt.Printf("peak RSS of mount-apiserver while a LIST of ~%d MB streams through (VmHWM reset before each)\n", bigMB)
	for _, p := range paths {
		for range 2 {
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
				return fmt.Errorf("resetting the peak RSS: %w", err)
			}
			before, err := rss(pid, "VmRSS")
			if err != nil {
				return err
			}
			start := time.Now()
			n, err := get(c, fmt.Sprintf(p.url, "big"), "")
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			elapsed := time.Since(start)
			peak, err := rss(pid, "VmHWM")
			if err != nil {
				return err
			}
			fmt.Printf("  %-8s %.1f MB in %v: RSS before %d MiB, peak %d MiB (+%d MiB)\n", p.name, float64(n)/1e6, elapsed.Round(time.Millisecond), before>>10, peak>>10, (peak-before)>>10)
		}
	}
	return nil
}

// setup: the CRD in target names on the remote, 10,000 objects of ~1 KB in namespace small
// and bigMB objects of ~1 MB in namespace big (labels under the renamed key prefix), the
// remote's kubeconfig as a Secret of the server, and the two Mounts.
func setup(ctx context.Context, admin *rest.Config, remote *framework.KubeAPIServer, bigMB int) error {
	crd := fmt.Sprintf(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"prefixedvirtualmachines.%[1]s"},
"spec":{"group":"%[1]s","scope":"Namespaced","names":{"kind":"PrefixedVirtualMachine","listKind":"PrefixedVirtualMachineList","plural":"prefixedvirtualmachines","singular":"prefixedvirtualmachine"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`, target)
	rc, err := rest.HTTPClientFor(remote.AdminConfig)
	if err != nil {
		return err
	}
	res, err := rc.Post(remote.URL+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", strings.NewReader(crd))
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		return fmt.Errorf("creating the CRD: %d %s", res.StatusCode, body)
	}
	for _, ns := range []string{"small", "big"} {
		if _, err := remote.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	dyn, err := dynamic.NewForConfig(remote.AdminConfig)
	if err != nil {
		return err
	}
	vms := dyn.Resource(schema.GroupVersionResource{Group: target, Version: "v1", Resource: "prefixedvirtualmachines"})
	// The CRD takes a moment to be served.
	for start := time.Now(); ; {
		if _, err := vms.Namespace("small").List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
			break
		} else if time.Since(start) > time.Minute {
			return fmt.Errorf("the CRD is not served: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := createObjects(ctx, vms.Namespace("small"), 10000, 700); err != nil {
		return err
	}
	if err := createObjects(ctx, vms.Namespace("big"), bigMB, 1000*1000); err != nil {
		return err
	}

	kubeconfig, err := framework.KubeconfigBytes(remote.AdminConfig)
	if err != nil {
		return err
	}
	core, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "remote"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	mc, err := clientset.NewForConfig(admin)
	if err != nil {
		return err
	}
	for name, rewrites := range map[string]*v1alpha1.MountRewrites{
		"plain": nil,
		"renamed": {
			Groups:              []v1alpha1.GroupRewrite{{Presented: presented, Target: target, KindPrefix: "Prefixed"}},
			MetadataKeyPrefixes: []v1alpha1.PrefixRewrite{{Presented: presented + "/", Target: target + "/"}},
		},
	} {
		if _, err := mc.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MountSpec{
			Ref:      v1alpha1.ObjectReference{Namespace: "clusters", Name: "remote"},
			Identity: v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeMountCredentials},
			Rewrites: rewrites,
		}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// createObjects creates n objects with a payload of size bytes, 8 at a time.
func createObjects(ctx context.Context, client dynamic.ResourceInterface, n, size int) error {
	payload := strings.Repeat("x", size)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				obj := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": target + "/v1", "kind": "PrefixedVirtualMachine",
					"metadata": map[string]any{"name": "vm-" + strconv.Itoa(i), "labels": map[string]any{target + "/os": "alpine", "app": "bench"},
						"annotations": map[string]any{target + "/owner": "team-a"}},
					"spec": map[string]any{"running": true, "cpus": int64(2), "payload": payload},
				}}
				if _, err := client.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			return err
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func get(c *http.Client, url, accept string) (int64, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	n, err := io.Copy(io.Discard, res.Body)
	if err != nil {
		return n, err
	}
	if res.StatusCode != http.StatusOK {
		return n, fmt.Errorf("GET %s: %d", url, res.StatusCode)
	}
	return n, nil
}

// watchInitial watches with sendInitialEvents and counts the ADDED events up to the bookmark
// that ends them.
func watchInitial(c *http.Client, url string) (int, error) {
	res, err := c.Get(url + "?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		return 0, fmt.Errorf("watch: %d %s", res.StatusCode, body)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	events := 0
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte(`{"type":"ADDED"`)):
			events++
		case bytes.HasPrefix(line, []byte(`{"type":"BOOKMARK"`)):
			return events, nil
		default:
			return events, fmt.Errorf("unexpected event: %.200s", line)
		}
	}
	return events, fmt.Errorf("the watch ended after %d events: %v", events, sc.Err())
}

// rss reads a size field (kB) of /proc/<pid>/status in bytes / 1024 (KiB).
func rss(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// cpuTime reads a process's CPU time (user and system) from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// After the command name in parentheses: utime and stime are fields 14 and 15.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil // USER_HZ is 100
}
