package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
)

// agentNamespace holds the agents' ServiceAccounts on the host.
const agentNamespace = "agents"

// agentName is the name of agent i's Mount and ServiceAccount (and ClusterRole and binding, with -agent-bindings).
func agentName(i int) string { return fmt.Sprintf("agent-%05d", i) }

// fleet creates what each agent needs on the host and the hub, as an operator of a fleet
// would: a ServiceAccount (the agent's own identity), the Mount (a tunnel with the server's
// credentials: the Secret of the target's kubeconfig) naming it as its agent, and a token of
// the ServiceAccount. One binding lets all ServiceAccounts of the agents' namespace attach as
// far as the host's RBAC goes (its aggregator checks before it forwards); the Mounts decide
// which agent serves which. With bindings, each agent has instead a ClusterRole limited by
// resourceNames to its Mount and its binding (artifacts/agent/hub), and the Mount names none.
type fleet struct {
	host     kubernetes.Interface
	mounts   clientset.Interface
	tokens   []string
	bindings bool
}

// agentsGroup is the group of the agents' ServiceAccounts on the host.
const agentsGroup = "system:serviceaccounts:" + agentNamespace

func newFleet(ctx context.Context, hostAdmin, hubAdmin *rest.Config, bindings bool) (*fleet, error) {
	hostAdmin, hubAdmin = rest.CopyConfig(hostAdmin), rest.CopyConfig(hubAdmin)
	// Setting up is not what is measured: no client-side rate limit.
	hostAdmin.QPS, hubAdmin.QPS = -1, -1
	host, err := kubernetes.NewForConfig(hostAdmin)
	if err != nil {
		return nil, err
	}
	mounts, err := clientset.NewForConfig(hubAdmin)
	if err != nil {
		return nil, err
	}
	if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if !bindings {
		if err := bind(ctx, host, "tunnel-agents", nil, rbacv1.Subject{Kind: rbacv1.GroupKind, Name: agentsGroup}); err != nil {
			return nil, err
		}
	}
	return &fleet{host: host, mounts: mounts, bindings: bindings}, nil
}

// grow creates the agents up to n (those from len(f.tokens) on) with workers in parallel,
// and returns the new agents' indexes.
func (f *fleet) grow(ctx context.Context, n int) ([]int, error) {
	from := len(f.tokens)
	if n <= from {
		return nil, nil
	}
	f.tokens = append(f.tokens, make([]string, n-from)...)
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				// The host answers timeouts when the machine is loaded: creating is not
				// what is measured, try again.
				var token string
				err := retry.OnError(wait.Backoff{Steps: 6, Duration: time.Second, Factor: 2}, func(err error) bool { return !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) },
					func() (err error) { token, err = f.create(ctx, i); return err })
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("agent %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
				f.tokens[i] = token
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	added := make([]int, 0, n-from)
	for i := from; i < n; i++ {
		added = append(added, i)
	}
	return added, nil
}

func (f *fleet) create(ctx context.Context, i int) (string, error) {
	name := agentName(i)
	ignoreExists := func(err error) error {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if _, err := f.host.CoreV1().ServiceAccounts(agentNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return "", err
	}
	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MountSpec{
		Ref:    v1alpha1.ObjectReference{Namespace: "clusters", Name: "bench"},
		Tunnel: &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer},
	}}
	if f.bindings {
		if err := bind(ctx, f.host, "tunnel-"+name, []string{name}, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: agentNamespace}); err != nil {
			return "", err
		}
	} else {
		m.Spec.Tunnel.AgentUser = "system:serviceaccount:" + agentNamespace + ":" + name
	}
	if _, err := f.mounts.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return "", err
	}
	tr, err := f.host.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](48 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// bind lets subject attach to the mounts named (all if none) as far as the host's RBAC goes.
func bind(ctx context.Context, host kubernetes.Interface, role string, names []string, subject rbacv1.Subject) error {
	if _, err := host.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"mounts.kcp.io"}, Resources: []string{"mounts/attach"}, ResourceNames: names, Verbs: []string{"get", "create"}}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := host.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// readiness counts the Mounts that are Ready with an agent reported connected (since since, if
// not zero), and lists the Mounts with an agent reported connected since then by the
// condition's message (which names the replica).
func (f *fleet) readiness(ctx context.Context, since time.Time) (ready int, byReplica map[string][]string, err error) {
	byReplica = map[string][]string{}
	_, err = f.listInto(ctx, func(m *v1alpha1.Mount) {
		c := connectedSince(m, since)
		if c == nil {
			return
		}
		byReplica[c.Message] = append(byReplica[c.Message], m.Name)
		if m.Status.Phase == v1alpha1.MountPhaseReady {
			ready++
		}
	})
	if err != nil {
		return 0, nil, err
	}
	return ready, byReplica, nil
}

// connectedSince is m's AgentConnected condition if it is true and (since not zero) says so
// since since, else nil. Condition times have seconds.
func connectedSince(m *v1alpha1.Mount, since time.Time) *metav1.Condition {
	c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionAgentConnected)
	if c == nil || c.Status != metav1.ConditionTrue || (!since.IsZero() && c.LastTransitionTime.Time.Before(since.Truncate(time.Second))) {
		return nil
	}
	return c
}

// waitReady watches the Mounts until n of them are Ready with an agent reported connected at
// or after since, and returns how long after since that was; an error when ctx ends first.
// It watches from when it is called, so that what a storm's Mounts say is timed while the
// bench's GETs run, not after them; a watch, not a list every second: listing 10,000 Mounts
// loads the replica being measured. A watch that fails (the replica not serving yet, say) is
// listed and watched again.
func (f *fleet) waitReady(ctx context.Context, since time.Time, n int) (time.Duration, error) {
	isReady := func(m *v1alpha1.Mount) bool {
		return m.Status.Phase == v1alpha1.MountPhaseReady && connectedSince(m, since) != nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		ready := map[string]bool{}
		set := func(m *v1alpha1.Mount, gone bool) {
			if r := !gone && isReady(m); r {
				ready[m.Name] = true
			} else {
				delete(ready, m.Name)
			}
		}
		rv, err := f.listInto(ctx, func(m *v1alpha1.Mount) { set(m, false) })
		if err != nil {
			pause(ctx, time.Second)
			continue
		}
		if len(ready) >= n {
			return time.Since(since), nil
		}
		w, err := f.mounts.MountsV1alpha1().Mounts().Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			pause(ctx, time.Second)
			continue
		}
		for e := range w.ResultChan() {
			m, ok := e.Object.(*v1alpha1.Mount)
			if !ok {
				break // an ERROR event: list and watch again
			}
			set(m, e.Type == watch.Deleted)
			if len(ready) >= n {
				w.Stop()
				return time.Since(since), nil
			}
		}
		w.Stop()
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// listInto lists every Mount in pages into fn and returns the list's resource version.
func (f *fleet) listInto(ctx context.Context, fn func(*v1alpha1.Mount)) (string, error) {
	opts := metav1.ListOptions{Limit: 1000}
	for {
		list, err := f.mounts.MountsV1alpha1().Mounts().List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			fn(&list.Items[i])
		}
		if list.Continue == "" {
			return list.ResourceVersion, nil
		}
		opts.Continue = list.Continue
	}
}
