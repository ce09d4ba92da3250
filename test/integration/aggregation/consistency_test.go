package aggregation

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestProxySeesEveryAcknowledgedWrite writes a Mount and proxies through it right after the
// write returned, in a tight loop, as a new user would: a request that starts after a create
// is proxied (never 404), one after an update from MountCredentials to Impersonate carries the
// impersonation (never the mount's bare credentials), one after a delete is refused (never
// proxied through the deleted Mount). The writes and requests go straight to mount-apiserver.
func TestProxySeesEveryAcknowledgedWrite(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	target, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	data, err := target.Kubeconfig("consistency-token")
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, "consistency", data)

	name := "consistency-" + rand.String(5)
	caller := "consistency-" + rand.String(5)
	httpClient, host := directHTTP(t, proxyUser(t, caller))
	proxied := func() (int, string) {
		resp, err := httpClient.Get(host + proxyPath(name) + "/api")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	mounts := mountsClient(t, agg.DirectConfig(kube.AdminConfig)).MountsV1alpha1().Mounts()
	// The caller's RBAC reaches mount-apiserver's authorizer a little later.
	m := urlMountOf(name, "consistency")
	m.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
	if _, err := mounts.Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the caller may proxy", func() error {
		if code, body := proxied(); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	if err := mounts.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	const rounds = 60
	var afterCreate, afterUpdate, afterDelete int
	for range rounds {
		m := urlMountOf(name, "consistency")
		m.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
		if _, err := mounts.Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if code, body := proxied(); code != http.StatusOK {
			afterCreate++
			t.Logf("right after create: %d %s", code, body)
		}

		if _, err := mounts.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"identity":{"mode":"Impersonate"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		before := len(target.Requests())
		if code, body := proxied(); code != http.StatusOK {
			t.Fatalf("right after update: %d %s", code, body)
		}
		// Our request, not a status probe (/readyz, /version) that may have come after it.
		var ours *http.Request
		for _, r := range target.Requests()[before:] {
			if r.URL.Path == "/api" {
				ours = r
			}
		}
		if ours == nil || ours.Header.Get("Impersonate-User") != caller {
			afterUpdate++
		}

		if err := mounts.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if code, _ := proxied(); code != http.StatusNotFound {
			afterDelete++
		}
	}
	if afterCreate+afterUpdate+afterDelete > 0 {
		t.Errorf("of %d rounds, requests right after the write that did not see it: %d after create, %d after update to Impersonate (proxied with the mount's bare credentials), %d after delete (still proxied)",
			rounds, afterCreate, afterUpdate, afterDelete)
	}
}
