// Command lists measures LISTs of many Mounts without the scale bench's status controller and
// host clusters: a standalone mount-apiserver process (embedded etcd, no status controller)
// with N Mounts. It reports the whole LIST read as bytes and decoded by client-go in JSON and
// in CBOR; where the time of a paginated `kubectl get mounts` goes (the server's time per page
// of kubectl's Table, first and later pages apart, and each of kubectl's requests at -v=6); and
// kubectl itself in pages of 500 and in one page.
//
//	go run ./test/bench/lists [-mounts 10000] [-rounds 5] [-server-flags "..."] [-cpuprofile-cbor file]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/bench/measure"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

func main() {
	n := flag.Int("mounts", 10000, "number of mounts")
	serverFlags := flag.String("server-flags", "", "extra flags for mount-apiserver, space separated")
	rounds := flag.Int("rounds", 5, "rounds of each measurement")
	flag.StringVar(&cborProfile, "cpuprofile-cbor", "", "write the server's CPU profile over CBOR LISTs to this file")
	flag.Parse()
	clientfeatures.ReplaceFeatureGates(allowCBOR{clientfeatures.FeatureGates()})
	if err := run(*n, *rounds, strings.Fields(*serverFlags)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

var cborProfile string

// allowCBOR turns on client-go's ClientsAllowCBOR (alpha) in this process, so that a client
// that asks for application/cbor may decode it; clients that set no content type stay JSON.
type allowCBOR struct{ clientfeatures.Gates }

func (g allowCBOR) Enabled(f clientfeatures.Feature) bool {
	return f == clientfeatures.ClientsAllowCBOR || g.Gates.Enabled(f)
}

func run(n, rounds int, serverFlags []string) error {
	ctx := klog.NewContext(context.Background(), klog.Background())
	dir, err := os.MkdirTemp("", "mount-paging-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := framework.BuildMountAPIServer()
	if err != nil {
		return err
	}
	defer framework.RemoveBuilds()
	s, pid, err := framework.StartProcess(ctx, bin, filepath.Join(dir, "root"), append([]string{"--status-controller=false", "--feature-gates=CBORServingAndStorage=true"}, serverFlags...)...)
	if err != nil {
		return err
	}
	defer s.Stop()
	fmt.Printf("mount-apiserver pid %d\n", pid)

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
				m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m-%05d", i)},
					Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: "scale"}}}
				if _, err := s.Client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
					once.Do(func() { createErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if createErr != nil {
		return createErr
	}
	fmt.Printf("created %d mounts in %v; RSS %d MiB\n", n, time.Since(start).Round(time.Millisecond), rssMiB(pid))

	raw, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		return err
	}
	if err := lists(ctx, s, raw, n, rounds, pid); err != nil {
		return err
	}
	// kubectl's Accept for tables.
	const table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
	get := func(limit int, cont string) (time.Duration, string, int64, error) {
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if cont != "" {
			q.Set("continue", cont)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/apis/mounts.kcp.io/v1alpha1/mounts?"+q.Encode(), nil)
		if err != nil {
			return 0, "", 0, err
		}
		req.Header.Set("Accept", table)
		t0 := time.Now()
		resp, err := raw.Do(req)
		if err != nil {
			return 0, "", 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		d := time.Since(t0)
		if err != nil || resp.StatusCode != http.StatusOK {
			return 0, "", 0, fmt.Errorf("GET page: %d %v %s", resp.StatusCode, err, body)
		}
		var t metav1.Table
		if err := json.Unmarshal(body, &t); err != nil {
			return 0, "", 0, err
		}
		return d, t.Continue, int64(len(body)), nil
	}
	var firsts, laters, wholes []time.Duration
	for range rounds {
		d, cont, _, err := get(500, "")
		if err != nil {
			return err
		}
		firsts = append(firsts, d)
		var total time.Duration
		pages := 1
		for t0 := time.Now(); cont != ""; pages++ {
			if d, cont, _, err = get(500, cont); err != nil {
				return err
			}
			laters = append(laters, d)
			total += d
			_ = t0
		}
		d, _, size, err := get(0, "")
		if err != nil {
			return err
		}
		wholes = append(wholes, d)
		fmt.Printf("round: %d pages; first %v, later pages %v in all; one page %v (%.1f MB)\n", pages, firsts[len(firsts)-1].Round(time.Millisecond), total.Round(time.Millisecond), d.Round(time.Millisecond), float64(size)/1e6)
	}
	maxLater := time.Duration(0)
	if len(laters) > 0 {
		maxLater = slices.Max(laters)
	}
	fmt.Printf("Table pages of 500 as kubectl asks, read by the client: first page p50 %v, later pages p50 %v (max %v); one page of all p50 %v; server's RSS %d MiB\n", p50(firsts), p50(laters), maxLater.Round(time.Millisecond), p50(wholes), rssMiB(pid))

	kubeBin, err := framework.KubeBinDir()
	if err != nil {
		return err
	}
	// One paged run at -v=6: kubectl logs each request with the time to its response headers.
	cmd := exec.CommandContext(ctx, filepath.Join(kubeBin, "kubectl"), "--kubeconfig", s.Kubeconfig, "get", "mounts", "--no-headers", "--chunk-size", "500", "-v=6")
	cmd.Stdout = io.Discard
	logs, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	logData, _ := io.ReadAll(logs)
	if err := cmd.Wait(); err != nil {
		return err
	}
	fmt.Printf("kubectl -v=6, pages of 500, %v:\n", time.Since(t0).Round(time.Millisecond))
	for _, line := range strings.Split(string(logData), "\n") {
		if strings.Contains(line, "GET ") || strings.Contains(line, "Response") {
			fmt.Println("  " + line)
		}
	}
	for _, chunk := range []string{"500", "0"} {
		var samples []time.Duration
		for range rounds {
			t0 := time.Now()
			out, err := exec.CommandContext(ctx, filepath.Join(kubeBin, "kubectl"), "--kubeconfig", s.Kubeconfig, "get", "mounts", "--no-headers", "--chunk-size", chunk).Output()
			if err != nil {
				return fmt.Errorf("kubectl get mounts: %w", err)
			}
			samples = append(samples, time.Since(t0))
			if rows := strings.Count(string(out), "\n"); rows != n {
				return fmt.Errorf("kubectl get mounts printed %d rows, want %d", rows, n)
			}
		}
		fmt.Printf("kubectl get mounts --chunk-size %s (%d rows): p50 %v, max %v\n", chunk, n, p50(samples), slices.Max(samples).Round(time.Millisecond))
	}
	return nil
}

func p50(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond)
}

// lists times the whole LIST as bytes and decoded by client-go, in JSON and in CBOR.
func lists(ctx context.Context, s *framework.Server, raw *http.Client, n, rounds, pid int) error {
	for _, accept := range []string{"application/json", "application/cbor"} {
		samples, size, err := measure.TimeReads(ctx, raw, s.URL+"/apis/mounts.kcp.io/v1alpha1/mounts", accept, rounds)
		if err != nil {
			return err
		}
		fmt.Printf("LIST of %d mounts as %s, read as bytes (%.1f MB): p50 %v\n", n, accept, float64(size)/1e6, p50(samples))

		cfg := rest.CopyConfig(s.Config)
		cfg.ContentType = accept
		client, err := clientset.NewForConfig(cfg)
		if err != nil {
			return err
		}
		samples = samples[:0]
		for range rounds {
			t0 := time.Now()
			list, err := client.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			samples = append(samples, time.Since(t0))
			if len(list.Items) != n {
				return fmt.Errorf("listed %d mounts as %s, want %d", len(list.Items), accept, n)
			}
		}
		fmt.Printf("LIST of %d mounts as %s, decoded by client-go: p50 %v; server's RSS %d MiB\n", n, accept, p50(samples), rssMiB(pid))
	}
	if cborProfile == "" {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- framework.Profile(s.Config, "profile?seconds=5", cborProfile) }()
	for t0 := time.Now(); time.Since(t0) < 5*time.Second; {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/apis/mounts.kcp.io/v1alpha1/mounts", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "application/cbor")
		resp, err := raw.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return <-done
}

func rssMiB(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return -1
}
