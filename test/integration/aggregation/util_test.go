package aggregation

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

func newRogueCA() (*pki.CA, error) { return pki.NewCA("rogue") }

// createMount creates m as the host's admin and deletes it when the test ends.
func createMount(t *testing.T, m *v1alpha1.Mount) {
	t.Helper()
	admin := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts()
	if _, err := admin.Create(context.Background(), m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), m.Name, metav1.DeleteOptions{}) })
}

// directHTTP returns a plain HTTP client with cfg's credentials for mount-apiserver itself,
// so a test controls every header the proxy receives, and the server's URL.
func directHTTP(t *testing.T, cfg *rest.Config) (*http.Client, string) {
	t.Helper()
	direct := agg.DirectConfig(cfg)
	tlsConfig, err := rest.TLSConfigFor(direct)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tlsConfig}}, direct.Host
}
