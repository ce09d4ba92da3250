package tunnel_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent/agenttest"
)

// upgrade sends a WebSocket upgrade request of path and returns the answer.
func upgrade(t *testing.T, url string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	return http.DefaultClient.Do(req)
}

// TestLimitAttaching: past the attach requests being worked on, another gets 429 with
// Retry-After and a Status, before anything behind the limit sees it, and counts in
// mount_tunnel_attaches_throttled_total; other requests pass; a slot freed admits the next.
func TestLimitAttaching(t *testing.T) {
	registry := metrics.NewKubeRegistry()
	m := tunnel.NewMetrics()
	m.Register(registry)
	entered := make(chan string, 10)
	release := make(chan struct{})
	s := httptest.NewServer(tunnel.LimitAttaching(2, m, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		entered <- req.URL.Path
		if req.URL.Path != "/api" {
			<-release
		}
		w.WriteHeader(http.StatusForbidden)
	})))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(release) })

	held := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := upgrade(t, s.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/edge/attach")
			if err != nil {
				held <- 0
				return
			}
			resp.Body.Close()
			held <- resp.StatusCode
		}()
		<-entered
	}
	resp, err := upgrade(t, s.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/other/attach/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		status.Reason != metav1.StatusReasonTooManyRequests || status.Details == nil || status.Details.RetryAfterSeconds < 1 {
		t.Fatalf("third attach: %d Retry-After=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if len(entered) != 0 {
		t.Fatalf("the turned-away attach reached the handler: %s", <-entered)
	}
	// Not an attach: passes.
	if resp, err := http.Get(s.URL + "/api"); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET /api: %v %v", resp, err)
	}
	<-entered
	if err := testutil.GatherAndCompare(registry, strings.NewReader(`
# HELP mount_tunnel_attaches_throttled_total [ALPHA] Attach requests the hub turned away (429) because it was attaching as many agents as it may at once (--tunnel-max-attaching).
# TYPE mount_tunnel_attaches_throttled_total counter
mount_tunnel_attaches_throttled_total 1
`), "mount_tunnel_attaches_throttled_total"); err != nil {
		t.Fatal(err)
	}
	// One ends (refused): the next is admitted.
	release <- struct{}{}
	if code := <-held; code != http.StatusForbidden {
		t.Fatalf("held attach: %d", code)
	}
	go func() {
		if resp, err := upgrade(t, s.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/other/attach"); err == nil {
			resp.Body.Close()
		}
	}()
	if path := <-entered; path != "/apis/mounts.kcp.io/v1alpha1/mounts/other/attach" {
		t.Fatalf("admitted %s", path)
	}
}

// TestLimitAttachingFreesTheSlotOfASession: an attach holds its slot only until its session is
// up: with one slot, two agents of two mounts both attach.
func TestLimitAttachingFreesTheSlotOfASession(t *testing.T) {
	sessions := tunnel.NewSessions(nil, tunnel.Limits{})
	t.Cleanup(sessions.CloseAll)
	attacher := &tunnel.Attacher{Sessions: sessions}
	s := httptest.NewServer(tunnel.LimitAttaching(1, nil, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := genericapirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "agent"})
		name := map[string]string{"/apis/mounts.kcp.io/v1alpha1/mounts/a/attach": "a", "/apis/mounts.kcp.io/v1alpha1/mounts/b/attach": "b"}[req.URL.Path]
		m := &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: mounts.MountSpec{Tunnel: &mounts.MountTunnel{}}}
		handler, err := attacher.Handler(ctx, m)
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		handler.ServeHTTP(w, req.WithContext(ctx))
	})))
	t.Cleanup(s.Close)
	target := targetServer(t)
	var agents []*agent.Agent
	for _, name := range []string{"a", "b"} {
		url, err := agent.AttachURL(s.URL, "", name)
		if err != nil {
			t.Fatal(err)
		}
		a := agenttest.Run(t, &agent.Config{Hub: &rest.Config{Host: s.URL}, AttachURL: url, Mount: name, Target: target.Listener.Addr().String(), MaxBackoff: 100 * time.Millisecond})
		waitFor(t, "the session of "+name, a.Connected)
		agents = append(agents, a)
	}
	for _, a := range agents {
		if !a.Connected() {
			t.Fatal("an agent lost its session")
		}
	}
}
