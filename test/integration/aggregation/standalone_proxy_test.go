package aggregation

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestStandaloneProxy runs a standalone mount-apiserver that reads Secrets from a cluster
// given by --secrets-kubeconfig (the host kube-apiserver here). Its admin (group
// mount-apiserver:admins, not system:masters) must be allowed to get the Secret there to
// reference it; it proxies through MountCredentials mounts, and through Impersonate mounts
// as itself. Without --secrets-kubeconfig, the server looks for the Secret among its own.
func TestStandaloneProxy(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()

	remoteBind(t, "standalone-creds", "namespace-reader")
	remoteCreds, err := remote.UserConfig("standalone-creds")
	if err != nil {
		t.Fatal(err)
	}
	setSecret(t, "standalone", remoteCreds)
	allowSecretRead(t, pki.AdminUser, "standalone")

	s := framework.StartInProcess(t, "", func(o *options.Options) { o.SecretsKubeconfig = kube.AdminKubeconfig })
	mounts := s.Client.MountsV1alpha1().Mounts()
	asIs := urlMountOf("as-is", "standalone")
	asIs.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
	eventually(t, "the standalone admin references a Secret it may read on the Secrets' cluster", func() error {
		_, err := mounts.Create(ctx, asIs, metav1.CreateOptions{})
		return err
	})
	if _, err := mounts.Create(ctx, urlMountOf("impersonating", "standalone"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	client := func(mount string) kubernetes.Interface {
		c, err := kubernetes.NewForConfig(throughProxy(s.Config, mount))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if list, err := client("as-is").CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) == 0 {
		t.Errorf("MountCredentials mount: %v", err)
	}
	// The admin is impersonated on the remote (not refused as system:masters was), where the
	// mount's credentials may not impersonate.
	if _, err := client("impersonating").CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "standalone-creds" cannot impersonate`) {
		t.Errorf("Impersonate mount for the admin: %v, want the remote's 403: the mount's credentials may not impersonate", err)
	}

	bare := framework.StartInProcess(t, "", nil)
	if _, err := bare.Client.MountsV1alpha1().Mounts().Create(ctx, asIs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(throughProxy(bare.Config, "as-is"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "Secret clusters/standalone does not exist") {
		t.Errorf("standalone with its own Secrets, the Secret missing: %v", err)
	}
}

// TestWorkspaceMountSaysWhy: outside kcp a Workspace mount cannot be proxied, and that is
// what its proxy says first, whoever asks (here a member of system:masters, whom Impersonate
// mounts refuse for another reason).
func TestWorkspaceMountSaysWhy(t *testing.T) {
	ctx := context.Background()
	name := "ws-" + rand.String(5)
	createMount(t, mount(name))
	c, err := kubernetes.NewForConfig(throughProxy(kube.AdminConfig, name))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "served only in kcp mode") {
		t.Errorf("proxy of a Workspace mount: %v, want 503 saying it is served only in kcp mode", err)
	}
}
