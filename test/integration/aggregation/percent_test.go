package aggregation

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestProxyPercentInPath: a literal '%' in a proxied path (%25 on the wire) is data: it
// reaches the target as %25, directly and through the host's aggregator.
func TestProxyPercentInPath(t *testing.T) {
	mount := runNames()("percent")
	setupProxy(t)
	target, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	data, err := target.Kubeconfig("t")
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, mount, data)
	if _, err := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts().Create(context.Background(), urlMountOf(mount, mount), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	paula := proxyUser(t, "paula")
	for name, cfg := range map[string]*rest.Config{"host": paula, "direct": agg.DirectConfig(paula)} {
		const path = "/api/v1/namespaces/default/configmaps/50%25off"
		code, _, body := proxyGet(t, cfg, mount, path)
		if code != http.StatusOK {
			t.Errorf("%s: %d %s", name, code, body)
			continue
		}
		if got := target.LastCall().RequestURI; got != path {
			t.Errorf("%s: the target saw %q, want %q", name, got, path)
		}
	}
}

// proxyGet sends GET path through the mount's proxy at cfg.Host (the host or the server itself), as cfg.
func proxyGet(t *testing.T, cfg *rest.Config, mount, path string) (int, http.Header, string) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client.Timeout = 30 * time.Second
	resp, err := client.Get(cfg.Host + proxyPath(mount) + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}
