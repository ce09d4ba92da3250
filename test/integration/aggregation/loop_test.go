package aggregation

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// TestProxyLoopsAreBounded: a mount whose target is the host kube-apiserver, which aggregates
// mount-apiserver, and one request whose path repeats the mount's proxy path. Each hop is a
// held request; the hop header bounds the chain.
func TestProxyLoopsAreBounded(t *testing.T) {
	setupProxy(t)
	suffix := rand.String(5)
	hopUser := "loop-hop-" + suffix
	bind(t, hopUser, "mounts-proxy")
	secret := "loop-" + suffix
	setSecret(t, secret, user(t, hopUser))
	name := "loop-" + suffix
	m := urlMountOf(name, secret)
	m.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
	createMount(t, m)

	httpClient, host := directHTTP(t, proxyUser(t, "loop-caller-"+suffix))
	nested := func(depth int) (int, string) {
		t.Helper()
		resp, err := httpClient.Get(host + strings.Repeat(proxyPath(name), depth) + "/version")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	// Three mount proxies in a row are allowed (mounts of mounts nest in kcp).
	eventually(t, "a request through three hops", func() error {
		if code, body := nested(3); code != http.StatusOK || !strings.Contains(body, "gitVersion") {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	for _, depth := range []int{4, 40} {
		start := time.Now()
		code, body := nested(depth)
		if code != http.StatusLoopDetected || !strings.Contains(body, "LoopDetected") || !strings.Contains(body, name) {
			t.Errorf("depth %d: %d %s, want 508 LoopDetected naming the mount", depth, code, body)
		}
		t.Logf("depth %d answered %d after %v", depth, code, time.Since(start).Round(time.Millisecond))
	}

	// A caller cannot reset the count: a forged header is refused or only counts higher.
	for _, forged := range []string{"-1", "x", "0, 0"} {
		req, err := http.NewRequest(http.MethodGet, host+proxyPath(name)+"/version", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Mount-Proxy-Hops", forged)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("forged hop count %q: %d, want 400", forged, resp.StatusCode)
		}
	}
}
