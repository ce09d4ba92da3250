package aggregation

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestStandaloneProxy runs a standalone mount-apiserver that reads Secrets from a cluster
// given by --secrets-kubeconfig (the host kube-apiserver here). Its only user, the admin, is
// in system:masters, so it proxies through MountCredentials mounts; Impersonate mounts refuse
// it. Without --secrets-kubeconfig, the proxy says how to give the server its Secrets.
func TestStandaloneProxy(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()

	remoteBind(t, "standalone-creds", "namespace-reader")
	remoteCreds, err := remote.UserConfig("standalone-creds")
	if err != nil {
		t.Fatal(err)
	}
	setSecret(t, "standalone", remoteCreds)

	s := framework.StartInProcess(t, "", func(o *options.Options) { o.SecretsKubeconfig = kube.AdminKubeconfig })
	mounts := s.Client.MountsV1alpha1().Mounts()
	asIs := urlMountOf("as-is", "standalone")
	asIs.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
	if _, err := mounts.Create(ctx, asIs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mounts.Create(ctx, urlMountOf("impersonating", "standalone"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cached(t, s.Config, "as-is")
	cached(t, s.Config, "impersonating")

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
	if _, err := client("impersonating").CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:masters") {
		t.Errorf("Impersonate mount for the system:masters admin: %v", err)
	}

	bare := framework.StartInProcess(t, "", nil)
	if _, err := bare.Client.MountsV1alpha1().Mounts().Create(ctx, asIs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cached(t, bare.Config, "as-is")
	c, err := kubernetes.NewForConfig(throughProxy(bare.Config, "as-is"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "--secrets-kubeconfig") {
		t.Errorf("standalone without Secrets: %v", err)
	}
}
