package aggregation

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// allowSecretRead lets a host user get one Secret of the secrets namespace.
func allowSecretRead(t *testing.T, userName, secret string) {
	t.Helper()
	ctx := context.Background()
	name := userName + "-reads-" + secret
	if _, err := kube.Client.RbacV1().Roles(secretsNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := kube.Client.RbacV1().RoleBindings(secretsNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: userName}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.Client.RbacV1().RoleBindings(secretsNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = kube.Client.RbacV1().Roles(secretsNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// TestEditorsCannotChangeWhatAMountLends plays a tenant with mounts-edit and every verb on
// mounts/proxy, but no rights on the remote and none on the mount's Secret, against an
// admin's mount that lends a cluster-admin credential of the remote under impersonation.
// Every change of what the mount lends is refused; harmless changes are not; and requests
// through the mount still run as the tenant. A second user who may read the Secret may
// create impersonating mounts of it, but lending it as it is needs the verb "lend".
func TestEditorsCannotChangeWhatAMountLends(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	suffix := rand.String(5)

	lentUser := "lent-admin-" + suffix
	remoteBind(t, lentUser, "cluster-admin")
	lentCreds, err := remote.UserConfig(lentUser)
	if err != nil {
		t.Fatal(err)
	}
	secret := "lent-" + suffix
	setSecret(t, secret, lentCreds)
	name := "lent-" + suffix
	admin := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts()
	if _, err := admin.Create(ctx, urlMountOf(name, secret), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	mallory := "mallory-" + suffix
	bind(t, mallory, "mounts-edit")
	malloryConfig := proxyUser(t, mallory)
	mallorys := mountsClient(t, malloryConfig).MountsV1alpha1().Mounts()
	patch := func(p string) error {
		_, err := mallorys.Patch(ctx, name, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	}
	// Harmless changes are open to editors (and show that mallory's RBAC is in effect).
	eventually(t, "mallory changes labels and timeouts", func() error {
		return patch(`{"metadata":{"labels":{"touched-by":"mallory"}},"spec":{"timeouts":{"requestSeconds":30}}}`)
	})

	rogue, err := newRogueCA()
	if err != nil {
		t.Fatal(err)
	}
	for _, change := range []struct{ what, patch string }{
		{"identity mode", `{"spec":{"identity":{"mode":"MountCredentials"}}}`},
		{"CA bundle", `{"spec":{"caBundle":"` + base64.StdEncoding.EncodeToString(rogue.CertPEM) + `"}}`},
		{"user prefix", `{"spec":{"identity":{"mode":"Impersonate","userPrefix":"cluster-"}}}`},
		{"group prefix", `{"spec":{"identity":{"mode":"Impersonate","groupPrefix":"cluster-"}}}`},
	} {
		if err := patch(change.patch); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may not get Secret") {
			t.Errorf("mallory changes the %s: got %v, want 403 for the Secret", change.what, err)
		}
	}

	// Whatever mallory tried, requests through the mount run as mallory.
	client, err := kubernetes.NewForConfig(throughProxy(malloryConfig, name))
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "`+mallory+`"`) {
		t.Errorf("mallory lists the remote's kube-system Secrets through the mount: got %v, want the remote's 403 naming mallory", err)
	}
	if m, err := admin.Get(ctx, name, metav1.GetOptions{}); err != nil || m.Spec.Identity != (v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeImpersonate}) || len(m.Spec.CABundle) != 0 {
		t.Errorf("the mount after mallory's attempts: %v %+v", err, m.Spec)
	}

	// status.URL is where kcp routes a mounted workspace, with its callers' credentials:
	// mounts-admin may correct status by hand, but not move the URL without "lend".
	statusAdmin := "status-admin-" + suffix
	bind(t, statusAdmin, "mounts-admin")
	statusAdmins := mountsClient(t, user(t, statusAdmin)).MountsV1alpha1().Mounts()
	eventually(t, "mounts-admin patches status conditions", func() error {
		_, err := statusAdmins.Patch(ctx, name, types.MergePatchType, []byte(`{"status":{"phase":"Unknown"}}`), metav1.PatchOptions{}, "status")
		return err
	})
	if _, err := statusAdmins.Patch(ctx, name, types.MergePatchType, []byte(`{"status":{"URL":"https://127.0.0.1:1/elsewhere"}}`), metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `verb "lend"`) {
		t.Errorf("mounts-admin moves status.URL: %v, want 403 asking for lend", err)
	}

	// lender may read the Secret: impersonating mounts of it, yes; lending it as it is, only
	// with "lend".
	lender := "lender-" + suffix
	bind(t, lender, "mounts-edit")
	allowSecretRead(t, lender, secret)
	lenders := mountsClient(t, user(t, lender)).MountsV1alpha1().Mounts()
	own := "lender-" + suffix
	eventually(t, "lender creates an impersonating mount of the Secret", func() error {
		_, err := lenders.Create(ctx, urlMountOf(own, secret), metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() { _ = admin.Delete(context.Background(), own, metav1.DeleteOptions{}) })
	asIs := urlMountOf(own+"-as-is", secret)
	asIs.Spec.Identity.Mode = v1alpha1.IdentityModeMountCredentials
	if _, err := lenders.Create(ctx, asIs, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `verb "lend"`) {
		t.Errorf("lender creates a MountCredentials mount without lend: %v", err)
	}
	if _, err := lenders.Patch(ctx, own, types.MergePatchType, []byte(`{"spec":{"identity":{"mode":"MountCredentials"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `verb "lend"`) {
		t.Errorf("lender switches a mount to MountCredentials without lend: %v", err)
	}
	bind(t, lender, "mounts-lend")
	eventually(t, "lender lends the Secret as it is once bound to mounts-lend", func() error {
		_, err := lenders.Create(ctx, asIs, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() { _ = admin.Delete(context.Background(), asIs.Name, metav1.DeleteOptions{}) })
}
