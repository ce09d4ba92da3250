package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestHostRestart restarts the host kube-apiserver (SIGTERM, same port and etcd) under a
// registered mount-apiserver running as its own process, and checks that without restarting
// mount-apiserver: callers new to it are authenticated (TokenReview) and authorized
// (SubjectAccessReview) by the host again, directly and through the aggregator; a change to a
// Secret it already watched reaches the status controller, and so does a new Secret; and the
// status controller's Lease is renewed again. A second restart keeps the host down longer than
// the Lease's renew deadline: the replica loses the Lease and takes it again by itself.
//
// The mounts' target is the host itself (its admin's client certificate), so that the test
// needs no second kube-apiserver; the target is down during the restart too.
func TestHostRestart(t *testing.T) {
	start := time.Now()
	ctx := klog.NewContext(context.Background(), klog.Background())
	host, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	agg, proc := framework.StartAggregatedBinary(ctx, t, host, framework.BuildBinary(t), "Metadata", "--status-probe-interval=1s")
	t.Logf("set-up ready after %v", time.Since(start).Round(time.Millisecond))

	good, err := framework.KubeconfigBytes(host.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	refused, err := framework.KubeconfigBytes(&rest.Config{Host: host.URL, BearerToken: "not-a-token", TLSClientConfig: rest.TLSClientConfig{CAData: host.AdminConfig.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	secrets := host.Client.CoreV1().Secrets("clusters")
	leakMust(t, leakErr(host.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusters"}}, metav1.CreateOptions{})))
	leakMust(t, leakErr(secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "before"}, Data: map[string][]byte{"kubeconfig": good}}, metav1.CreateOptions{})))
	admin := leakMountsClient(t, host.AdminConfig)
	mountOf := func(name string) *v1alpha1.Mount {
		return &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: name}}}
	}
	ready := func(m *v1alpha1.Mount) bool { return m.Status.Phase == v1alpha1.MountPhaseReady }
	leakMust(t, leakErr(admin.MountsV1alpha1().Mounts().Create(ctx, mountOf("before"), metav1.CreateOptions{})))
	leakWaitMount(ctx, t, admin, "before", ready)
	leases := host.Client.CoordinationV1().Leases(framework.Namespace)
	lease, err := leases.Get(ctx, "mount-apiserver-status", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the status controller's Lease: %v", err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")

	stopped, readyAgain, err := host.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	t.Logf("host kube-apiserver took %v to stop and %v to be ready again", stopped.Round(time.Millisecond), readyAgain.Round(time.Millisecond))

	// Delegated authentication and authorization: a service account created after the restart
	// has a token no cache knows, and a binding no cache has seen.
	sas := host.Client.CoreV1().ServiceAccounts("default")
	token := func(name string) string {
		leakMust(t, leakErr(sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})))
		tr, err := sas.CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	leakGrant(ctx, t, host.Client, "late-reader", []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts"}, Verbs: []string{"get", "list"}}},
		rbacv1.Subject{Kind: "ServiceAccount", Namespace: "default", Name: "late-reader"},
		rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "late-user"})
	direct := func(token string) *rest.Config {
		return agg.DirectConfig(&rest.Config{BearerToken: token})
	}
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, lastErr = leakMountsClient(t, direct(token("late-reader"))).MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{})
		if lastErr != nil {
			// A new service account each try: no cached refusal decides the next one.
			leakMust(t, sas.Delete(ctx, "late-reader", metav1.DeleteOptions{}))
		}
		return lastErr == nil, nil
	}); err != nil {
		t.Fatalf("a new token is not accepted directly after the host's restart: %v", lastErr)
	}
	t.Logf("a new token listed Mounts directly %v after the host was ready", time.Since(restarted).Round(time.Millisecond))
	if _, err := leakMountsClient(t, direct(token("late-stranger"))).MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a new token without a binding: %v, want Forbidden", err)
	}
	lateUser, err := host.UserConfig("late-user")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leakMountsClient(t, lateUser).MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("a new user through the aggregator: %v", err)
	}

	// The Secret watches: the mount comes back once its target (the host) is, a change to the
	// Secret it already watched takes it out of Ready, and a new Secret and mount are seen.
	leakWaitMount(ctx, t, admin, "before", ready)
	changed := time.Now()
	leakMust(t, leakErr(secrets.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "before"}, Data: map[string][]byte{"kubeconfig": refused}}, metav1.UpdateOptions{})))
	leakWaitMount(ctx, t, admin, "before", func(m *v1alpha1.Mount) bool { return !ready(m) })
	t.Logf("the changed Secret reached the status controller in %v", time.Since(changed).Round(time.Millisecond))
	leakMust(t, leakErr(secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "after"}, Data: map[string][]byte{"kubeconfig": good}}, metav1.CreateOptions{})))
	leakMust(t, leakErr(admin.MountsV1alpha1().Mounts().Create(ctx, mountOf("after"), metav1.CreateOptions{})))
	leakWaitMount(ctx, t, admin, "after", ready)

	// Leader election: the Lease is renewed again, by the same replica unless it lost it.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err = leases.Get(ctx, "mount-apiserver-status", metav1.GetOptions{})
		return err == nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(restarted), nil
	}); err != nil {
		t.Fatalf("the status controller's Lease was not renewed after the restart: %+v", lease.Spec)
	}
	log := readLog(t, proc)
	t.Logf("Lease renewed by %s (before: %s); the server logged %q %d times and %q %d times",
		ptr.Deref(lease.Spec.HolderIdentity, ""), holder, "Stopped leading", strings.Count(log, "Stopped leading"), "Leading", strings.Count(log, `"Leading"`))

	// An outage longer than the Lease's renew deadline (10 s): the replica loses the Lease,
	// campaigns again by itself, and its status controller works again.
	stoppedLeading := strings.Count(log, "Stopped leading")
	stopped, readyAgain, err = host.RestartAfter(ctx, 12*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	restarted = time.Now()
	t.Logf("host kube-apiserver took %v to stop and %v to be ready again (12 s down)", stopped.Round(time.Millisecond), readyAgain.Round(time.Millisecond))
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err = leases.Get(ctx, "mount-apiserver-status", metav1.GetOptions{})
		return err == nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(restarted), nil
	}); err != nil {
		t.Fatalf("the status controller's Lease was not renewed after the long outage: %+v", lease.Spec)
	}
	t.Logf("Lease held again %v after the host was ready", time.Since(restarted).Round(time.Millisecond))
	if log = readLog(t, proc); strings.Count(log, "Stopped leading") == stoppedLeading {
		t.Errorf("the replica did not lose the Lease in an outage longer than its renew deadline")
	}
	changed = time.Now()
	leakMust(t, leakErr(secrets.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "after"}, Data: map[string][]byte{"kubeconfig": refused}}, metav1.UpdateOptions{})))
	leakWaitMount(ctx, t, admin, "after", func(m *v1alpha1.Mount) bool { return !ready(m) })
	t.Logf("after the long outage, a changed Secret reached the status controller in %v", time.Since(changed).Round(time.Millisecond))

	select {
	case <-proc.Exited():
		t.Fatalf("mount-apiserver exited: %v", proc.ExitErr())
	default:
	}
}
