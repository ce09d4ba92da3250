package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestStandaloneSecretsAreEncryptedAtRest stores a Secret in a standalone server whose etcd the
// test reads directly: the value is secretbox ciphertext under the generated key, never the
// plain bytes, and it survives a restart with the same root directory (the key is kept).
func TestStandaloneSecretsAreEncryptedAtRest(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Options{Directory: t.TempDir(), LogLevel: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	root := t.TempDir()
	withEtcd := func(o *options.Options) { o.Etcd.StorageConfig.Transport.ServerList = []string{etcd.ClientURL} }
	s := framework.StartInProcess(t, root, withEtcd)
	core, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte("token: do-not-store-me-in-the-clear")
	if _, err := core.CoreV1().Secrets("clusters").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "prod"},
		Data:       map[string][]byte{"kubeconfig": plain},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	client, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	resp, err := client.Get(context.Background(), "/mount-apiserver/secrets/clusters/prod")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("raw etcd value of the Secret: %v, %d values", err, len(resp.Kvs))
	}
	value := resp.Kvs[0].Value
	if !bytes.HasPrefix(value, []byte("k8s:enc:secretbox:v1:key1:")) || bytes.Contains(value, plain) {
		t.Errorf("the Secret is not encrypted at rest: %q", value[:min(len(value), 60)])
	}
	if info, err := os.Stat(filepath.Join(root, "encryption-config.yaml")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("generated encryption configuration: %v %v", err, info)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	s = framework.StartInProcess(t, root, withEtcd)
	core, err = kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	got, err := core.CoreV1().Secrets("clusters").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil || !bytes.Equal(got.Data["kubeconfig"], plain) {
		t.Errorf("the Secret after a restart: %v", err)
	}
}

// TestStandaloneUsers writes kubeconfigs with the kubeconfig command, as the README shows,
// and checks what each built-in group may do.
func TestStandaloneUsers(t *testing.T) {
	root := t.TempDir()
	bin := framework.BuildBinary(t)
	server := bin.Start(t, root)
	ctx := context.Background()

	userClients := func(name string, groups ...string) (clientset.Interface, kubernetes.Interface) {
		t.Helper()
		args := []string{"kubeconfig", "--root-directory", root, "--user", name}
		for _, g := range groups {
			args = append(args, "--group", g)
		}
		out, err := exec.Command(string(bin), args...).Output()
		if err != nil {
			t.Fatalf("mount-apiserver %s: %v", strings.Join(args, " "), err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(out)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != server.URL {
			t.Errorf("%s's kubeconfig names %s, want %s", name, cfg.Host, server.URL)
		}
		m, err := clientset.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		k, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m, k
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod"}, Data: map[string][]byte{"kubeconfig": []byte("x")}}
	mount := func(name string, mode v1alpha1.IdentityMode) *v1alpha1.Mount {
		return &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MountSpec{
			Ref:      v1alpha1.ObjectReference{Namespace: "clusters", Name: "prod"},
			Identity: v1alpha1.MountIdentity{Mode: mode},
		}}
	}

	alice, aliceCore := userClients("alice", authorization.EditorsGroup)
	if _, err := aliceCore.CoreV1().Secrets("clusters").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Errorf("an editor creates a Secret: %v", err)
	}
	if _, err := alice.MountsV1alpha1().Mounts().Create(ctx, mount("alices", v1alpha1.IdentityModeImpersonate), metav1.CreateOptions{}); err != nil {
		t.Errorf("an editor creates a mount: %v", err)
	}
	if _, err := alice.MountsV1alpha1().Mounts().Create(ctx, mount("alices-as-is", v1alpha1.IdentityModeMountCredentials), metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `verb "lend"`) {
		t.Errorf("an editor lends a mount's credentials as they are: %v", err)
	}

	admin, _ := userClients("root", authorization.AdminsGroup)
	if _, err := admin.MountsV1alpha1().Mounts().Create(ctx, mount("as-is", v1alpha1.IdentityModeMountCredentials), metav1.CreateOptions{}); err != nil {
		t.Errorf("an admin lends a mount's credentials as they are: %v", err)
	}

	bob, bobCore := userClients("bob", authorization.ViewersGroup)
	if list, err := bob.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 2 {
		t.Errorf("a viewer lists mounts: %v", err)
	}
	if _, err := bob.MountsV1alpha1().Mounts().Create(ctx, mount("bobs", v1alpha1.IdentityModeImpersonate), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a viewer creates a mount: %v", err)
	}
	if _, err := bobCore.CoreV1().Secrets("clusters").Get(ctx, "prod", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a viewer reads a Secret: %v", err)
	}

	carol, carolCore := userClients("carol", "devs")
	if _, err := carol.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a user of no built-in group lists mounts: %v", err)
	}
	if _, err := carolCore.Discovery().ServerGroups(); err != nil {
		t.Errorf("a user of no built-in group reads discovery: %v", err)
	}
}
