package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

func TestAttachURL(t *testing.T) {
	for _, c := range []struct{ server, cluster, want string }{
		{"https://hub.example:6443", "", "wss://hub.example:6443/apis/mounts.kcp.io/v1alpha1/mounts/edge/attach"},
		{"https://hub.example/", "root:org", "wss://hub.example/clusters/root:org/apis/mounts.kcp.io/v1alpha1/mounts/edge/attach"},
		{"https://front.example/base?x=1", "", "wss://front.example/base/apis/mounts.kcp.io/v1alpha1/mounts/edge/attach"},
		{"http://127.0.0.1:8080", "", "ws://127.0.0.1:8080/apis/mounts.kcp.io/v1alpha1/mounts/edge/attach"},
	} {
		got, err := AttachURL(c.server, c.cluster, "edge")
		if err != nil || got != c.want {
			t.Errorf("AttachURL(%q, %q) = %q, %v; want %q", c.server, c.cluster, got, err, c.want)
		}
	}
	if _, err := AttachURL("unix:///x", "", "edge"); err == nil {
		t.Error("a unix server URL was accepted")
	}
}

// TestOnlyTwoAddresses: the connects the agent accepts, and what its dialer does with others.
func TestOnlyTwoAddresses(t *testing.T) {
	for address, want := range map[string]bool{tunnel.AddressTarget: true, tunnel.AddressAgent: true, "127.0.0.1:6443": false, "target:80": false, "": false} {
		if got := allowed("tcp", address); got != want {
			t.Errorf("allowed(%q) = %v", address, got)
		}
	}
	if allowed("udp", tunnel.AddressTarget) {
		t.Error("udp allowed")
	}
	a := &Agent{cfg: &Config{Mount: "edge", Target: "127.0.0.1:1"}, metrics: tunnel.NewMetrics()}
	if _, err := a.dial(context.Background(), "tcp", "10.0.0.1:443"); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("dial of another address: %v", err)
	}
}

func TestValidate(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	o := NewOptions()
	o.Mount, o.MaxBackoff, o.SilenceTimeout = "Not_A_Name", time.Millisecond, 9*time.Second
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	for _, want := range []string{"--hub-kubeconfig", "--mount", "--target", "--max-backoff", "--hub-silence-timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no error about %s: %v", want, err)
		}
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	o = NewOptions()
	if c, _ = o.Complete(); c.Target != "10.96.0.1:443" {
		t.Errorf("in-cluster target %q", c.Target)
	}
}

func TestCheckHubConfig(t *testing.T) {
	ok := []*rest.Config{
		{Host: "https://hub", BearerToken: "t"},
		{Host: "https://hub", BearerTokenFile: "/var/run/token"},
		{Host: "https://hub", TLSClientConfig: rest.TLSClientConfig{CertData: []byte("c"), KeyData: []byte("k")}},
	}
	for _, c := range ok {
		if err := checkHubConfig(c); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []*rest.Config{
		{Host: "https://hub", BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{Insecure: true}},
		{Host: "https://hub"},
		{Host: "http://hub", BearerToken: "t"},
		{Host: "https://hub", Username: "u", Password: "p"},
		{Host: "https://hub", BearerToken: "t", Impersonate: rest.ImpersonationConfig{UserName: "x"}},
		{Host: "https://hub", ExecProvider: &clientcmdapi.ExecConfig{Command: "x"}},
	}
	for _, c := range bad {
		if err := checkHubConfig(c); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

// TestAgentComesBackWhenTheHubSays: an agent turned away by a busy hub (the hub's own
// tunnel.LimitAttaching, its one slot held) waits the Retry-After it was given instead of its
// own backoff (1 ms here): in a storm every attempt costs the hub a TLS handshake.
func TestAgentComesBackWhenTheHubSays(t *testing.T) {
	var mu sync.Mutex
	var attempts []time.Time
	hold := make(chan struct{})
	held := make(chan struct{}, 1)
	limited := tunnel.LimitAttaching(1, nil, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		held <- struct{}{}
		<-hold
		w.WriteHeader(http.StatusForbidden)
	}))
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Upgrade") == "websocket" && req.Header.Get("Authorization") == "" {
			limited.ServeHTTP(w, req) // the one holding the slot
			return
		}
		mu.Lock()
		attempts = append(attempts, time.Now())
		mu.Unlock()
		limited.ServeHTTP(w, req)
	}))
	t.Cleanup(hub.Close)
	// Before hub.Close, which waits for the request holding the slot.
	t.Cleanup(func() { close(hold) })
	attachURL, err := AttachURL(hub.URL, "", "edge")
	if err != nil {
		t.Fatal(err)
	}
	// Another agent's attach holds the slot.
	go func() {
		req, _ := http.NewRequest(http.MethodGet, hub.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/other/attach", nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-held

	a, err := New(&Config{Hub: &rest.Config{Host: hub.URL, BearerToken: "agent"}, AttachURL: attachURL, Mount: "edge", Target: "127.0.0.1:1", MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(attempts)
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d attempts in 20 s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	// Each 429 said to come back in a second or more (the times handed out grow by the slot's
	// hold, TestReturnTimes); without Retry-After the agent would be back within milliseconds.
	for i := 1; i < 3; i++ {
		if gap := attempts[i].Sub(attempts[i-1]); gap < time.Second {
			t.Errorf("attempt %d came %v after the 429 before it (Retry-After: at least 1)", i+1, gap)
		}
	}
}
