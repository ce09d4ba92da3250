// Command fanout measures one request across many mounts (mounts/*/proxy, pkg/fanout): a
// standalone mount-apiserver process with N mounts over a few real target kube-apiservers,
// each mount's target holding objects/N ConfigMaps, so that a fan-out LIST returns about
// `objects` ConfigMaps. It reports, in one run:
//   - the fan-out LIST read as bytes, against the same mounts' LISTs one after another through
//     mounts/<name>/proxy, and against a single direct LIST of as many ConfigMaps from one
//     target (the floor: one kube-apiserver encoding them);
//   - the peak RSS that one fan-out LIST adds to the hub (VmHWM, reset before it);
//   - a merged watch of all mounts with events at a given rate, the delay of each event from
//     its write to its arrival through the fan-out, p50 and p99, against a direct watch of one
//     target at the same time;
//   - the cost of a member's outage: the fan-out LIST with one target down, and with one more
//     mount whose target accepts connections and never answers (the member deadline).
//
// Run it when the machine is quiet; it prints the load average before and after.
//
//	go run ./test/bench/fanout [-mounts 100] [-targets 4] [-objects 100000] [-rounds 5] [-events 100] [-member-timeout 10s] [-page-limit 500] [-request-timeout 5m]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/bench/measure"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// sentAnnotation carries the time an update was sent, in Unix nanoseconds.
const sentAnnotation = "bench.mounts.kcp.io/sent"

func main() {
	mounts := flag.Int("mounts", 100, "number of mounts")
	targets := flag.Int("targets", 4, "number of target kube-apiservers the mounts share")
	objects := flag.Int("objects", 100000, "ConfigMaps a fan-out LIST returns in all")
	rounds := flag.Int("rounds", 5, "rounds of each LIST measurement")
	events := flag.Int("events", 100, "events per second the merged watch delivers")
	watchFor := flag.Duration("watch", 30*time.Second, "how long each watch measurement runs")
	memberTimeout := flag.Duration("member-timeout", 10*time.Second, "the hub's --fanout-member-timeout (its default)")
	flag.DurationVar(&requestTimeout, "request-timeout", 5*time.Minute, "the hub's --request-timeout")
	flag.Int64Var(&pageLimit, "page-limit", 500, "limit of the paged fan-out LIST measured once (kubectl's --chunk-size); 0: none")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write the hub's CPU profile over 10 s of fan-out LISTs to this file")
	flag.Parse()
	if err := run(*mounts, *targets, *objects, *rounds, *events, *watchFor, *memberTimeout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

var (
	cpuProfile     string
	pageLimit      int64
	requestTimeout time.Duration
)

func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func run(nMounts, nTargets, nObjects, rounds, eventRate int, watchFor, memberTimeout time.Duration) (err error) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	fmt.Printf("load average at start: %s (2 cores)\n", loadavg())
	dir, err := os.MkdirTemp("", "fanout-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	perMount := nObjects / nMounts

	// Targets: each holds perMount ConfigMaps in namespace bench; the first also nObjects in
	// namespace direct, for the single direct LIST.
	targets := make([]*framework.KubeAPIServer, nTargets)
	kubeconfigs := make([][]byte, nTargets)
	for i := range targets {
		t, err := framework.StartKubeAPIServer(ctx, filepath.Join(dir, fmt.Sprintf("target-%d", i)))
		if err != nil {
			return err
		}
		defer t.Stop()
		targets[i] = t
		if kubeconfigs[i], err = prepareTarget(ctx, t); err != nil {
			return err
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, nTargets+1)
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fill(ctx, t, "bench", perMount); err != nil {
				errs <- err
			}
			if i == 0 {
				if err := fill(ctx, t, "direct", nObjects); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("filled %d targets (%d ConfigMaps each, and %d on the first) in %v\n", nTargets, perMount, nObjects, time.Since(start).Round(time.Second))

	bin, err := framework.BuildMountAPIServer()
	if err != nil {
		return err
	}
	defer framework.RemoveBuilds()
	// --request-timeout: on a loaded machine an unpaged LIST of 100,000 objects may take longer
	// than the default minute, which would cut it off (as kube-apiserver cuts its own LISTs).
	hub, pid, err := framework.StartProcess(ctx, bin, filepath.Join(dir, "hub"), "--status-controller=false", "--fanout-member-timeout="+memberTimeout.String(), "--request-timeout="+requestTimeout.String())
	if err != nil {
		return err
	}
	defer hub.Stop()
	defer func() {
		if err != nil {
			printFanoutLog(filepath.Join(dir, "mount-apiserver.log"))
		}
	}()
	core, err := kubernetes.NewForConfig(hub.Config)
	if err != nil {
		return err
	}
	names := make([]string, nMounts)
	for i := range nMounts {
		names[i] = fmt.Sprintf("bench-%03d", i)
		if err := addMount(ctx, hub, core, names[i], kubeconfigs[i%nTargets]); err != nil {
			return err
		}
	}
	client, err := measure.Client(hub.Config)
	if err != nil {
		return err
	}
	client.Timeout = 5 * time.Minute
	base := hub.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/"
	fanURL := base + "*/proxy/api/v1/namespaces/bench/configmaps"

	// Warm up: the hub's transports to every target, and the targets' caches.
	if n, err := countItems(ctx, client, fanURL); err != nil || n != perMount*nMounts {
		return fmt.Errorf("fan-out LIST: %d items, %v; want %d", n, err, perMount*nMounts)
	}
	fmt.Printf("hub pid %d, RSS after the warm-up %d MiB; load %s\n", pid, rss(pid, "VmRSS"), loadavg())

	// Peak RSS one fan-out LIST adds.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("resetting the hub's peak RSS: %w", err)
	}
	before := rss(pid, "VmRSS")
	if _, _, out, err := timeFanout(ctx, client, fanURL, 1); err != nil || out > 0 {
		return fmt.Errorf("fan-out LIST for the peak RSS: %v, %d members left out", err, out)
	}
	peak := rss(pid, "VmHWM")
	fmt.Printf("peak RSS added by one fan-out LIST of %d objects: %d MiB (RSS %d MiB before, peak %d MiB)\n", perMount*nMounts, peak-before, before, peak)

	fan, size, fanOut, err := timeFanout(ctx, client, fanURL, rounds)
	if err != nil {
		return err
	}
	var paged time.Duration
	var pages int
	if pageLimit > 0 {
		if paged, pages, err = pagedList(ctx, client, fanURL, pageLimit, perMount*nMounts); err != nil {
			return err
		}
	}
	var sequential []time.Duration
	for range rounds {
		var total time.Duration
		for _, n := range names {
			s, _, err := measure.TimeReads(ctx, client, base+n+"/proxy/api/v1/namespaces/bench/configmaps", "application/json", 1)
			if err != nil {
				return err
			}
			total += s[0]
		}
		sequential = append(sequential, total)
	}
	direct, err := measure.Client(targets[0].AdminConfig)
	if err != nil {
		return err
	}
	direct.Timeout = 5 * time.Minute
	single, directSize, err := measure.TimeReads(ctx, direct, targets[0].URL+"/api/v1/namespaces/direct/configmaps", "application/json", rounds)
	if err != nil {
		return err
	}
	fmt.Printf("LIST of %d ConfigMaps, JSON read as bytes, p50 (min-max) of %d:\n", perMount*nMounts, rounds)
	fmt.Printf("  fan-out across %d mounts (%.1f MB):     %v (%v-%v), members left out in all rounds: %d\n", nMounts, float64(size)/1e6, p50(fan), slices.Min(fan).Round(time.Millisecond), slices.Max(fan).Round(time.Millisecond), fanOut)
	if pageLimit > 0 {
		fmt.Printf("  fan-out paged, limit %d (%d pages, once): %v\n", pageLimit, pages, paged.Round(time.Millisecond))
	}
	fmt.Printf("  the %d mounts one after another:        %v (%v-%v)\n", nMounts, p50(sequential), slices.Min(sequential).Round(time.Millisecond), slices.Max(sequential).Round(time.Millisecond))
	fmt.Printf("  one direct LIST of as many (%.1f MB): %v (%v-%v)\n", float64(directSize)/1e6, p50(single), slices.Min(single).Round(time.Millisecond), slices.Max(single).Round(time.Millisecond))
	fmt.Printf("  load %s; hub RSS %d MiB\n", loadavg(), rss(pid, "VmRSS"))
	if cpuProfile != "" {
		done := make(chan error, 1)
		go func() { done <- framework.Profile(hub.Config, "profile?seconds=10", cpuProfile) }()
		for t0 := time.Now(); time.Since(t0) < 10*time.Second; {
			if _, _, _, err := timeFanout(ctx, client, fanURL, 1); err != nil {
				return err
			}
		}
		if err := <-done; err != nil {
			return err
		}
	}

	if err := watchDelay(ctx, hub, targets, names, eventRate, watchFor); err != nil {
		return err
	}

	// Outages: one target down (refused at once), then one more mount that never answers.
	targets[nTargets-1].Down()
	down, _, downOut, err := timeFanout(ctx, client, fanURL, rounds)
	if err != nil {
		return err
	}
	hole, err := blackHole()
	if err != nil {
		return err
	}
	defer hole.Close()
	holeKubeconfig, err := framework.KubeconfigBytes(&rest.Config{Host: "https://" + hole.Addr().String(), BearerToken: "x", TLSClientConfig: rest.TLSClientConfig{CAData: targets[0].AdminConfig.CAData}})
	if err != nil {
		return err
	}
	if err := addMount(ctx, hub, core, "bench-silent", holeKubeconfig); err != nil {
		return err
	}
	silent, _, silentOut, err := timeFanout(ctx, client, fanURL, rounds)
	if err != nil {
		return err
	}
	fmt.Printf("member outages, fan-out LIST p50 (max) of %d, member deadline %v; members named in Warnings per round:\n", rounds, memberTimeout)
	fmt.Printf("  all up (above):                         %v (%v)\n", p50(fan), slices.Max(fan).Round(time.Millisecond))
	fmt.Printf("  target %d down (%d mounts refused):          %v (%v), %d named\n", nTargets-1, nMounts/nTargets, p50(down), slices.Max(down).Round(time.Millisecond), downOut/rounds)
	fmt.Printf("  and a mount whose target never answers: %v (%v), %d named\n", p50(silent), slices.Max(silent).Round(time.Millisecond), silentOut/rounds)
	fmt.Printf("load average at the end: %s\n", loadavg())
	return nil
}

// prepareTarget lets the mount's credentials (mount-lender) impersonate on t, and the hub's
// admin, impersonated, read everything; it returns mount-lender's kubeconfig.
func prepareTarget(ctx context.Context, t *framework.KubeAPIServer) ([]byte, error) {
	lender, err := t.UserConfig("mount-lender")
	if err != nil {
		return nil, err
	}
	rbac := t.Client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bench-impersonator"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
	}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	for name, b := range map[string]struct{ role, user string }{
		"bench-impersonator": {"bench-impersonator", "mount-lender"},
		"bench-admin":        {"cluster-admin", pki.AdminUser},
	} {
		if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: b.user}}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	return framework.KubeconfigBytes(lender)
}

// fill creates n ConfigMaps in namespace ns of t, each with 100 bytes of data.
func fill(ctx context.Context, t *framework.KubeAPIServer, ns string, n int) error {
	cfg := rest.CopyConfig(t.AdminConfig)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	data := strings.Repeat("x", 100)
	var next atomic.Int64
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%06d", i), Labels: map[string]string{"app": "bench"}}, Data: map[string]string{"data": data}}
				if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func addMount(ctx context.Context, hub *framework.Server, core kubernetes.Interface, name string, kubeconfig []byte) error {
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := hub.Client.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: name}}}, metav1.CreateOptions{})
	return err
}

// timeFanout times n unpaged fan-out LISTs of u, read as bytes, and counts the members their
// Warnings name (each Warning names one, or says "<n> more mounts").
func timeFanout(ctx context.Context, c *http.Client, u string, n int) ([]time.Duration, int64, int, error) {
	var samples []time.Duration
	var size int64
	named := 0
	for range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, 0, 0, err
		}
		req.Header.Set("Accept", "application/json")
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return nil, 0, 0, err
		}
		size, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, 0, 0, fmt.Errorf("fan-out LIST: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			return nil, 0, 0, fmt.Errorf("fan-out LIST: %d", resp.StatusCode)
		}
		samples = append(samples, time.Since(start))
		for _, w := range resp.Header.Values("Warning") {
			// 299 - "<n> more mounts did not take part: ..."
			if i := strings.Index(w, " more mounts did not take part"); i >= 0 {
				if f := strings.Fields(w[:i]); len(f) > 0 {
					k, _ := strconv.Atoi(strings.Trim(f[len(f)-1], `"`))
					named += k
				}
				continue
			}
			if strings.Contains(w, "did not take part") {
				named++
			}
		}
	}
	return samples, size, named, nil
}

// pagedList reads the fan-out LIST page by page, as kubectl --chunk-size does, and checks
// that it returns want items.
func pagedList(ctx context.Context, c *http.Client, u string, limit int64, want int) (time.Duration, int, error) {
	start := time.Now()
	cont, items, pages := "", 0, 0
	for {
		q := url.Values{"limit": {strconv.FormatInt(limit, 10)}}
		if cont != "" {
			q.Set("continue", cont)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"?"+q.Encode(), nil)
		if err != nil {
			return 0, 0, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, 0, err
		}
		var l struct {
			Metadata metav1.ListMeta   `json:"metadata"`
			Items    []json.RawMessage `json:"items"`
		}
		err = json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return 0, 0, fmt.Errorf("paged fan-out LIST, page %d: %d, %v", pages, resp.StatusCode, err)
		}
		pages++
		items += len(l.Items)
		if cont = l.Metadata.Continue; cont == "" {
			break
		}
	}
	if items != want {
		return 0, 0, fmt.Errorf("paged fan-out LIST: %d items, want %d", items, want)
	}
	return time.Since(start), pages, nil
}

// countItems LISTs url and counts its items.
func countItems(ctx context.Context, c *http.Client, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("%d %s", resp.StatusCode, body)
	}
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	err = json.NewDecoder(resp.Body).Decode(&l)
	return len(l.Items), err
}

// watchDelay measures the delay of events through a merged watch of all mounts, with
// updates at a rate that makes the merged watch deliver eventRate events per second (each
// update of a target reaches every mount of that target), against a direct watch of the first
// target at the same time.
func watchDelay(ctx context.Context, hub *framework.Server, targets []*framework.KubeAPIServer, names []string, eventRate int, d time.Duration) error {
	perUpdate := len(names) / len(targets)
	updateRate := max(eventRate/perUpdate, 1)
	fanCtx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	fanCfg := rest.CopyConfig(hub.Config)
	fanCfg.Host += "/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy"
	fanDelays, fanStarted, err := watchDelays(fanCtx, fanCfg, "bench")
	if err != nil {
		return err
	}
	directDelays, directStarted, err := watchDelays(fanCtx, targets[0].AdminConfig, "bench")
	if err != nil {
		return err
	}
	<-fanStarted
	<-directStarted
	clients := make([]kubernetes.Interface, len(targets))
	for i, t := range targets {
		cfg := rest.CopyConfig(t.AdminConfig)
		cfg.QPS, cfg.Burst = -1, 0
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		clients[i] = c
	}
	tick := time.NewTicker(time.Second / time.Duration(updateRate))
	defer tick.Stop()
	end := time.Now().Add(d)
	sent := 0
	var wg sync.WaitGroup
	for now := range tick.C {
		if now.After(end) {
			break
		}
		i := sent
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, sentAnnotation, strconv.FormatInt(time.Now().UnixNano(), 10))
			_, _ = clients[i%len(clients)].CoreV1().ConfigMaps("bench").Patch(ctx, fmt.Sprintf("cm-%06d", i%100), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second)
	cancel()
	fan := <-fanDelays
	direct := <-directDelays
	fmt.Printf("merged watch of %d mounts, %d updates/s of %d targets = %d events/s through the fan-out, %v:\n", len(names), updateRate, len(targets), updateRate*perUpdate, d)
	fmt.Printf("  through the fan-out: %d events, delay p50 %v p99 %v max %v\n", len(fan), pct(fan, 50), pct(fan, 99), pct(fan, 100))
	fmt.Printf("  direct watch of target 0: %d events, delay p50 %v p99 %v max %v\n", len(direct), pct(direct, 50), pct(direct, 99), pct(direct, 100))
	fmt.Printf("  load %s\n", loadavg())
	return nil
}

// watchDelays watches ConfigMaps in ns at cfg's server and sends the delays of the events
// that carry the sent annotation once ctx ends; started is closed once the watch has begun.
func watchDelays(ctx context.Context, cfg *rest.Config, ns string) (<-chan []time.Duration, <-chan struct{}, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	// Watch from a LIST's resourceVersion: no initial events.
	lreq, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/api/v1/namespaces/"+ns+"/configmaps?limit=1", nil)
	if err != nil {
		return nil, nil, err
	}
	lresp, err := client.Do(lreq)
	if err != nil {
		return nil, nil, err
	}
	var l struct {
		Metadata metav1.ListMeta `json:"metadata"`
	}
	err = json.NewDecoder(lresp.Body).Decode(&l)
	lresp.Body.Close()
	if err != nil || l.Metadata.ResourceVersion == "" {
		return nil, nil, fmt.Errorf("list %s: no resourceVersion (%v)", cfg.Host, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/api/v1/namespaces/"+ns+"/configmaps?"+url.Values{"watch": {"true"}, "resourceVersion": {l.Metadata.ResourceVersion}}.Encode(), nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, nil, fmt.Errorf("watch %s: %d %s", cfg.Host, resp.StatusCode, body)
	}
	out := make(chan []time.Duration, 1)
	started := make(chan struct{})
	go func() {
		defer resp.Body.Close()
		var delays []time.Duration
		dec := json.NewDecoder(bufio.NewReader(resp.Body))
		var once sync.Once
		timer := time.AfterFunc(time.Second, func() { once.Do(func() { close(started) }) })
		defer timer.Stop()
		for {
			var ev struct {
				Type   string `json:"type"`
				Object struct {
					Metadata struct {
						Annotations map[string]string `json:"annotations"`
					} `json:"metadata"`
				} `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				break
			}
			if ev.Type != "MODIFIED" {
				continue
			}
			if s, ok := ev.Object.Metadata.Annotations[sentAnnotation]; ok {
				if ns, err := strconv.ParseInt(s, 10, 64); err == nil {
					delays = append(delays, time.Since(time.Unix(0, ns)))
				}
			}
		}
		once.Do(func() { close(started) })
		out <- delays
	}()
	return out, started, nil
}

// printFanoutLog prints what the hub's log says of fan-out members, after a failure.
func printFanoutLog(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "fan-out") || strings.Contains(l, "panic") || strings.Contains(l, "timeout") || strings.Contains(l, "Timeout") {
			lines = append(lines, l)
		}
	}
	fmt.Fprintln(os.Stderr, "the hub's log of fan-outs, panics and timeouts:")
	for _, l := range lines[max(len(lines)-20, 0):] {
		fmt.Fprintln(os.Stderr, l)
	}
}

// blackHole accepts connections and never answers.
func blackHole() (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		var held []net.Conn
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	return l, nil
}

func rss(pid int, field string) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return -1
}

func p50(d []time.Duration) time.Duration { return pct(d, 50) }

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(len(s)*p/100, len(s)-1)
	return s[i].Round(time.Millisecond / 10)
}
