package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// Config is one soak run.
type Config struct {
	// Duration is how long the load lasts.
	Duration time.Duration
	// Watches are held open through the proxy all along; RPS plain GETs per second are sent
	// next to them.
	Watches, RPS int
	// Binary is the mount-apiserver binary; empty builds ./cmd/mount-apiserver.
	Binary string
	// Dir holds the servers' data; empty makes (and removes) a temporary directory.
	Dir string
	// Settle bounds the wait, after the load, for the figures to return (default 2 minutes:
	// idle connections of the aggregator and the server's HTTP/2 connections close after
	// 90 s).
	Settle time.Duration
	// Out gets the report as the run goes; nil discards it.
	Out io.Writer
}

// Result is what a run measured.
type Result struct {
	Requests, RequestErrors int64
	P50, P99                time.Duration
	// WatchEvents is how many events the watches received; WatchErrors counts watches that
	// did not start or ended before the load did. WatchRetries counts watch opens answered
	// 429 and sent again after their Retry-After, as client-go does: 500 watches opened at
	// once meet priority and fairness (of the host or the server), which answers 429 to what
	// is beyond its seats for the moment; that is flow control, not an error.
	WatchEvents, WatchErrors, WatchRetries int64
	// FirstErrors are the first few errors, to say what failed.
	FirstErrors []string
	// Baseline is before the load, Peak the highest of each figure during it, After the last
	// figures taken after it (once they met the goal, or when Settle ran out), Settled how
	// long after the load's end they were taken.
	Baseline, Peak, After framework.Figures
	Settled               time.Duration
}

// Goal says whether the run met the goal of issue #16: no errors; after the load,
// goroutines and fds within 5 % of the baseline and RSS within 20 %.
func (r *Result) Goal() error {
	var errs []error
	if r.RequestErrors > 0 || r.WatchErrors > 0 {
		errs = append(errs, fmt.Errorf("%d request errors, %d watch errors (first: %v)", r.RequestErrors, r.WatchErrors, r.FirstErrors))
	}
	if !within(int64(r.After.Goroutines), int64(r.Baseline.Goroutines), 0.05) {
		errs = append(errs, fmt.Errorf("goroutines %d after the load, baseline %d (goal: within 5 %%)", r.After.Goroutines, r.Baseline.Goroutines))
	}
	if !within(int64(r.After.FDs), int64(r.Baseline.FDs), 0.05) {
		errs = append(errs, fmt.Errorf("open fds %d after the load, baseline %d (goal: within 5 %%)", r.After.FDs, r.Baseline.FDs))
	}
	if !within(r.After.RSS, r.Baseline.RSS, 0.20) {
		errs = append(errs, fmt.Errorf("RSS %.1f MiB after the load, baseline %.1f MiB (goal: within 20 %%)", mib(r.After.RSS), mib(r.Baseline.RSS)))
	}
	return errors.Join(errs...)
}

// within: v is at most base plus the fraction (less is fine: the load may have let go of
// what the baseline held).
func within(v, base int64, fraction float64) bool {
	return float64(v) <= float64(base)*(1+fraction)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// Run starts a host kube-apiserver with mount-apiserver (its own process) aggregated into it
// and a remote kube-apiserver that the Mount "soak" points at, then holds cfg.Watches proxied
// watches of ConfigMaps open and sends cfg.RPS proxied GETs per second next to them, all
// through the host's aggregator, for cfg.Duration, while a ConfigMap on the remote changes
// twice a second (each change an event on every watch). It reports to cfg.Out and returns
// the figures; the caller judges them with Result.Goal.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	if cfg.Settle == 0 {
		cfg.Settle = 2 * time.Minute
	}
	dir := cfg.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "mount-soak-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	bin := cfg.Binary
	if bin == "" {
		var err error
		if bin, err = framework.BuildMountAPIServer(); err != nil {
			return nil, err
		}
	}
	// No audit log: the soak measures the proxy, not the audit writer.
	clusters, err := framework.StartClustersProcess(ctx, dir, bin, "--audit-log-path=")
	if err != nil {
		return nil, err
	}
	defer clusters.Stop()
	host, agg, remote := clusters.Host, clusters.Agg, clusters.Remote
	if err := setup(ctx, host, remote); err != nil {
		return nil, err
	}
	scraper, err := framework.NewScraper(agg.DirectConfig(host.AdminConfig))
	if err != nil {
		return nil, err
	}
	soaker, err := host.UserConfig("soaker")
	if err != nil {
		return nil, err
	}
	tlsConfig, err := rest.TLSConfigFor(soaker)
	if err != nil {
		return nil, err
	}
	// The callers speak HTTP/2, as client-go does.
	transport := &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 100}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	base := host.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/soak/proxy/api/v1/namespaces/soak/configmaps"

	r := &Result{}
	var errMu sync.Mutex
	fail := func(counter *int64, format string, args ...any) {
		atomic.AddInt64(counter, 1)
		errMu.Lock()
		if len(r.FirstErrors) < 5 {
			r.FirstErrors = append(r.FirstErrors, fmt.Sprintf(format, args...))
		}
		errMu.Unlock()
	}
	get := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/cm-0", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET: %d", resp.StatusCode)
		}
		return nil
	}
	// Warm up: the paths are taken once before the baseline, watches too, so that what their
	// first use sets up (the streams' buffers, the target's connection) is not counted as load.
	for range 20 {
		if err := get(ctx); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	var warmUpRetries int64
	for range 20 {
		resp, err := openWatch(ctx, client, base+"?watch=true&timeoutSeconds=3600&fieldSelector=metadata.name%3Dtick", &warmUpRetries)
		if err != nil {
			return nil, fmt.Errorf("warm-up watch: %w", err)
		}
		resp.Body.Close()
	}
	if r.Baseline, err = settledFigures(ctx, scraper); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "baseline:    %v\n", r.Baseline)

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup

	// The ConfigMap "tick" on the remote changes twice a second.
	wg.Go(func() {
		ticker := time.NewTicker(500 * time.Millisecond)
		defer ticker.Stop()
		for i := 0; ; i++ {
			select {
			case <-loadCtx.Done():
				return
			case <-ticker.C:
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tick", Namespace: "soak"}, Data: map[string]string{"i": strconv.Itoa(i)}}
			if _, err := remote.Client.CoreV1().ConfigMaps("soak").Update(loadCtx, cm, metav1.UpdateOptions{}); err != nil && loadCtx.Err() == nil {
				fmt.Fprintf(out, "updating the remote's ConfigMap: %v\n", err)
			}
		}
	})

	// The watches: each started, then read until the load ends.
	var started sync.WaitGroup
	for i := range cfg.Watches {
		started.Add(1)
		wg.Go(func() {
			var once sync.Once
			defer once.Do(started.Done)
			resp, err := openWatch(loadCtx, client, base+"?watch=true&timeoutSeconds=3600&fieldSelector=metadata.name%3Dtick", &r.WatchRetries)
			if err != nil {
				fail(&r.WatchErrors, "watch %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			once.Do(started.Done)
			lines := bufio.NewScanner(resp.Body)
			lines.Buffer(make([]byte, 0, 64*1024), 1<<20)
			for lines.Scan() {
				atomic.AddInt64(&r.WatchEvents, 1)
			}
			if loadCtx.Err() == nil {
				fail(&r.WatchErrors, "watch %d ended during the load: %v", i, lines.Err())
			}
		})
	}
	started.Wait()
	fmt.Fprintf(out, "%d watches open\n", cfg.Watches)

	// The GETs: open loop, as many as are due at RPS since the start (a late tick sends the
	// ones it missed), each timed.
	var samplesMu sync.Mutex
	samples := make([]time.Duration, 0, int(cfg.Duration.Seconds()+1)*cfg.RPS)
	var requests sync.WaitGroup
	if cfg.RPS > 0 {
		wg.Go(func() {
			ticker := time.NewTicker(time.Second / time.Duration(cfg.RPS))
			defer ticker.Stop()
			start, sent := time.Now(), 0
			for {
				select {
				case <-loadCtx.Done():
					return
				case <-ticker.C:
				}
				due := int(time.Since(start).Seconds() * float64(cfg.RPS))
				for ; sent < due; sent++ {
					requests.Go(func() {
						ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
						defer cancel()
						start := time.Now()
						err := get(ctx)
						d := time.Since(start)
						atomic.AddInt64(&r.Requests, 1)
						if err != nil {
							fail(&r.RequestErrors, "%v", err)
							return
						}
						samplesMu.Lock()
						samples = append(samples, d)
						samplesMu.Unlock()
					})
				}
			}
		})
	}

	// Figures once a second while the load lasts.
	end := time.After(cfg.Duration)
	ticker := time.NewTicker(time.Second)
	for done := false; !done; {
		select {
		case <-end:
			done = true
		case <-ticker.C:
			f, err := scraper.Figures()
			if err != nil {
				fmt.Fprintf(out, "scraping: %v\n", err)
				continue
			}
			r.Peak.RSS = max(r.Peak.RSS, f.RSS)
			r.Peak.Goroutines = max(r.Peak.Goroutines, f.Goroutines)
			r.Peak.FDs = max(r.Peak.FDs, f.FDs)
		case <-ctx.Done():
			ticker.Stop()
			return nil, ctx.Err()
		}
	}
	ticker.Stop()
	// The watches end as the load does; the GETs in flight finish.
	stopLoad()
	wg.Wait()
	requests.Wait()
	transport.CloseIdleConnections()
	ended := time.Now()
	fmt.Fprintf(out, "peak:        %v (during %v of load)\n", r.Peak, cfg.Duration)

	slices.Sort(samples)
	if len(samples) > 0 {
		r.P50, r.P99 = samples[len(samples)/2], samples[len(samples)*99/100]
	}
	fmt.Fprintf(out, "GETs:        %d sent (%.0f/s), %d errors, p50 %v, p99 %v\n", r.Requests, float64(r.Requests)/cfg.Duration.Seconds(), r.RequestErrors, r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond))
	fmt.Fprintf(out, "watches:     %d, %d errors, %d events received, %d opens retried after 429\n", cfg.Watches, r.WatchErrors, r.WatchEvents, r.WatchRetries)
	for _, e := range r.FirstErrors {
		fmt.Fprintf(out, "  error: %s\n", e)
	}

	if f, err := scraper.Figures(); err == nil {
		fmt.Fprintf(out, "right after: %v\n", f)
	}
	// After: the figures once they meet the goal, or when Settle runs out.
	deadline := time.Now().Add(cfg.Settle)
	for {
		f, err := scraper.Figures()
		if err != nil {
			return nil, err
		}
		r.After, r.Settled = f, time.Since(ended)
		probe := *r
		if probe.RequestErrors, probe.WatchErrors = 0, 0; probe.Goal() == nil || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	fmt.Fprintf(out, "after:       %v (%v after the load)\n", r.After, r.Settled.Round(time.Second))
	return r, nil
}

// settledFigures takes the baseline once two scrapes a second apart agree on goroutines and
// fds (the start-up's informers and connections have settled), at most after 30 s.
func settledFigures(ctx context.Context, scraper *framework.Scraper) (framework.Figures, error) {
	prev, err := scraper.Figures()
	if err != nil {
		return prev, err
	}
	for range 30 {
		select {
		case <-ctx.Done():
			return prev, ctx.Err()
		case <-time.After(time.Second):
		}
		f, err := scraper.Figures()
		if err != nil {
			return f, err
		}
		if f.Goroutines == prev.Goroutines && f.FDs == prev.FDs {
			return f, nil
		}
		prev = f
	}
	return prev, nil
}

// setup: the remote lets "mount-proxy" impersonate and "soaker" read ConfigMaps in namespace
// soak, where "cm-0" and "tick" live; the host holds the Secret and the Mount "soak" and lets
// "soaker" proxy through it.
func setup(ctx context.Context, host, remote *framework.KubeAPIServer) error {
	roles := []*rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: "impersonator"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"users", "groups"}, Verbs: []string{"impersonate"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}},
	}
	for _, role := range roles {
		if _, err := remote.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	bind := func(k *framework.KubeAPIServer, user, role string) error {
		_, err := k.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
		}, metav1.CreateOptions{})
		return err
	}
	if err := bind(remote, "mount-proxy", "impersonator"); err != nil {
		return err
	}
	if err := bind(remote, "soaker", "configmap-reader"); err != nil {
		return err
	}
	// On the host: proxying through mounts (get for the GETs and watches).
	if _, err := host.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "mount-proxier"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.SchemeGroupVersion.Group}, Resources: []string{"mounts/proxy"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := bind(host, "soaker", "mount-proxier"); err != nil {
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
	for _, k := range []*framework.KubeAPIServer{host, remote} {
		for _, ns := range []string{"clusters", "soak"} {
			if _, err := k.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	if _, err := host.Client.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "soak"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	mounts, err := clientset.NewForConfig(host.AdminConfig)
	if err != nil {
		return err
	}
	if _, err := mounts.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "soak"},
		Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: "soak"}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, name := range []string{"cm-0", "tick"} {
		if _, err := remote.Client.CoreV1().ConfigMaps("soak").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "soak"},
			Data: map[string]string{"v": "soak"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// openWatch opens a watch, sending it again after the Retry-After of a 429 (at most 10 times,
// as client-go's rest client does), and counts those retries.
func openWatch(ctx context.Context, client *http.Client, url string, retries *int64) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || attempt == 10 {
			return nil, fmt.Errorf("%d", resp.StatusCode)
		}
		atomic.AddInt64(retries, 1)
		wait := time.Second
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 && secs <= 60 {
			wait = time.Duration(secs) * time.Second
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}
