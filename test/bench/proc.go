package main

import (
	"bufio"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcp-dev/mount-apiserver/test/bench/measure"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// process is a proxy process whose CPU time and allocations the bench reads.
type process struct {
	pid int
	// heap reads the process's Go heap allocations so far: their count and bytes.
	heap func() (allocs, bytes int, err error)
	// idle is the process's CPU time per second without requests (probes, leases, the
	// embedded etcd), subtracted from what requests cost.
	idle time.Duration
	// scrape, scrapeBytes are the allocations of one heap call itself.
	scrape, scrapeBytes int
}

type usage struct {
	cpu            time.Duration
	mallocs, bytes int
}

func (p *process) usage() (usage, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return usage{}, err
	}
	// Fields after the command name, which is in parentheses and may contain spaces:
	// state is field 3, utime 14, stime 15.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) < 13 {
		return usage{}, fmt.Errorf("/proc/%d/stat: too few fields", p.pid)
	}
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return usage{}, err
	}
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	if err != nil {
		return usage{}, err
	}
	mallocs, bytes, err := p.heap()
	if err != nil {
		return usage{}, err
	}
	return usage{cpu: time.Duration(utime+stime) * clockTick, mallocs: mallocs, bytes: bytes}, nil
}

// measureIdle measures the idle CPU rate over d and what one reading allocates.
func (p *process) measureIdle(d time.Duration) error {
	before, err := p.usage()
	if err != nil {
		return err
	}
	start := time.Now()
	time.Sleep(d)
	after, err := p.usage()
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	p.idle = time.Duration(float64(after.cpu-before.cpu) / elapsed.Seconds())
	p.scrape, p.scrapeBytes = after.mallocs-before.mallocs, after.bytes-before.bytes
	return nil
}

// perRequest is the CPU time, allocations and allocated bytes of one of n requests between
// two readings.
func (p *process) perRequest(before, after usage, elapsed time.Duration, n int) (time.Duration, float64, float64) {
	cpu := after.cpu - before.cpu - time.Duration(float64(p.idle)*elapsed.Seconds())
	return cpu / time.Duration(n), float64(after.mallocs-before.mallocs-p.scrape) / float64(n), float64(after.bytes-before.bytes-p.scrapeBytes) / float64(n)
}

// bareProxyEnv makes the bench binary run the bare proxy instead: its value is the kubeconfig
// of the mount's credentials.
const bareProxyEnv = "MOUNT_BENCH_BARE_PROXY"

// mallocsPath answers the bare proxy's malloc count and allocated bytes instead of proxying.
const mallocsPath = "/bench-mallocs"

type bareProxy struct {
	*process
	url    string
	client *http.Client
	stop   func()
}

// startBareProxy runs this binary again as the bare proxy to the remote, in its own process.
func startBareProxy(dir string, remote *framework.KubeAPIServer) (*bareProxy, error) {
	creds, err := remote.UserConfig("mount-proxy")
	if err != nil {
		return nil, err
	}
	kubeconfig, err := framework.KubeconfigBytes(creds)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "bare-proxy.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), bareProxyEnv+"="+path)
	cmd.Stderr = os.Stderr
	// The bare proxy dies with the bench, however the bench ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	// The child prints its URL and its serving certificate (base64 DER) on one line.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return nil, fmt.Errorf("bare proxy: %w", err)
	}
	parts := strings.Fields(line)
	if len(parts) != 2 {
		stop()
		return nil, fmt.Errorf("bare proxy said %q", line)
	}
	der, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil {
		stop()
		return nil, err
	}
	caData := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	c, err := measure.Client(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: caData}})
	if err != nil {
		stop()
		return nil, err
	}
	b := &bareProxy{url: parts[0], client: c, stop: stop}
	b.process = &process{pid: cmd.Process.Pid, heap: func() (int, int, error) {
		resp, err := c.Get(b.url + mallocsPath)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		var n, bytes int
		_, err = fmt.Fscan(resp.Body, &n, &bytes)
		return n, bytes, err
	}}
	return b, nil
}

// serveBareProxy is the bare proxy's process: the floor any proxy hop pays on this machine, a
// plain Go TLS reverse proxy (httputil.ReverseProxy over HTTP/2) to the remote, with the
// mount's credentials and the same impersonation headers, so the remote does the same work as
// behind the mount proxy. It has no authentication, authorization or API machinery; it is a
// reference, not a product. It serves until killed.
//
// localPath is answered by the bare proxy's process itself, with a body of the size of the
// proxied small GET's answer.
const localPath = "/bench-local"

var localBody = []byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default","uid":"00000000-0000-0000-0000-000000000000","resourceVersion":"1","creationTimestamp":"2026-01-01T00:00:00Z","labels":{"kubernetes.io/metadata.name":"default"},"managedFields":[{"manager":"kube-apiserver","operation":"Update","apiVersion":"v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:kubernetes.io/metadata.name":{}}}}}]},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}}`)

func serveBareProxy(kubeconfig string) error {
	creds, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	tlsConfig, err := rest.TLSConfigFor(creds)
	if err != nil {
		return err
	}
	target, err := url.Parse(creds.Host)
	if err != nil {
		return err
	}
	upstream := &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16}
	proxy := &httputil.ReverseProxy{
		Transport: upstream,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Set("Impersonate-User", "bencher")
			r.Out.Header.Set("Impersonate-Group", "system:authenticated")
		},
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == localPath {
			// No hop: what serving a request costs the process (TLS, HTTP/2, a small body).
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(localBody)
			return
		}
		if req.URL.Path == mallocsPath {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			fmt.Fprintln(w, m.Mallocs, m.TotalAlloc)
			return
		}
		proxy.ServeHTTP(w, req)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	fmt.Println(srv.URL, base64.StdEncoding.EncodeToString(srv.Certificate().Raw))
	select {}
}

// profile takes the profiles asked for of mount-apiserver (admin reaches it) over seconds
// of GETs to url as cfg says, on a pass of their own so that profiling does not touch the
// measured one.
func profile(admin, cfg *rest.Config, url string, seconds int) error {
	c, err := measure.Client(cfg)
	if err != nil {
		return err
	}
	if allocProfile != "" {
		if err := framework.Profile(admin, "allocs", allocProfile+".before"); err != nil {
			return err
		}
	}
	var profileDone chan error
	if cpuProfile != "" {
		profileDone = make(chan error, 1)
		go func() {
			profileDone <- framework.Profile(admin, fmt.Sprintf("profile?seconds=%d", seconds), cpuProfile)
		}()
	}
	for end := time.Now().Add(time.Duration(seconds) * time.Second); time.Now().Before(end); {
		if _, err := measure.TimeGets(c, url, 100); err != nil {
			return err
		}
	}
	if profileDone != nil {
		if err := <-profileDone; err != nil {
			return err
		}
	}
	if allocProfile != "" {
		return framework.Profile(admin, "allocs", allocProfile+".after")
	}
	return nil
}
