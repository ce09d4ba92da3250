package aggregation

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// waitPhase waits until the mount reaches phase and returns it.
func waitPhase(t *testing.T, name string, phase v1alpha1.MountPhase, timeout time.Duration) *v1alpha1.Mount {
	t.Helper()
	mounts := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts()
	var m *v1alpha1.Mount
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		m, err = mounts.Get(ctx, name, metav1.GetOptions{})
		return err == nil && m.Status.Phase == phase, nil
	})
	if err != nil {
		t.Fatalf("mount %s did not reach %s within %v; status: %+v", name, phase, timeout, m.Status)
	}
	return m
}

func condition(m *v1alpha1.Mount, t string) metav1.Condition {
	if c := meta.FindStatusCondition(m.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// TestStatusOfARealTarget: a mount of the real remote kube-apiserver goes Initializing ->
// Ready, with status.URL under the host's URL, and kubectl wait and describe work on it.
func TestStatusOfARealTarget(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	mounts := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts()
	w, err := mounts.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=status-remote"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Labels and annotations survive the controller's status writes (its informer drops them).
	deleteMountsAtEnd(t, "status-remote")
	created := urlMountOf("status-remote", "remote-kubeconfig")
	created.Labels = map[string]string{"env": "prod"}
	created.Annotations = map[string]string{"team": "platform"}
	if _, err := mounts.Create(ctx, created, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phases []string
	timeout := time.After(time.Minute)
	for len(phases) == 0 || phases[len(phases)-1] != string(v1alpha1.MountPhaseReady) {
		select {
		case ev := <-w.ResultChan():
			m, ok := ev.Object.(*v1alpha1.Mount)
			if ok && (len(phases) == 0 || phases[len(phases)-1] != string(m.Status.Phase)) {
				phases = append(phases, string(m.Status.Phase))
			}
		case <-timeout:
			t.Fatalf("phases seen: %v; never Ready", phases)
		}
	}
	if strings.Join(phases, ",") != "Initializing,Ready" {
		t.Errorf("phases: %q, want Initializing, Ready", phases)
	}

	out := mustKubectl(t, "wait", "--for=jsonpath={.status.phase}=Ready", "mount/status-remote", "--timeout=30s")
	if !strings.Contains(out, "condition met") {
		t.Errorf("kubectl wait: %s", out)
	}
	m, err := mounts.Get(ctx, "status-remote", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := kube.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/status-remote/proxy"; m.Status.URL != want {
		t.Errorf("status.URL = %q, want %q", m.Status.URL, want)
	}
	if m.Status.ObservedGeneration != m.Generation {
		t.Errorf("observedGeneration %d, generation %d", m.Status.ObservedGeneration, m.Generation)
	}
	if m.Labels["env"] != "prod" || m.Annotations["team"] != "platform" {
		t.Errorf("after the status writes: labels %v, annotations %v", m.Labels, m.Annotations)
	}
	for _, c := range []string{v1alpha1.ConditionCredentialsResolved, v1alpha1.ConditionTargetReachable, v1alpha1.ConditionReady} {
		if condition(m, c).Status != metav1.ConditionTrue {
			t.Errorf("%s: %+v", c, condition(m, c))
		}
	}
	if out := mustKubectl(t, "get", "mount", "status-remote"); !strings.Contains(out, "Ready") {
		t.Errorf("kubectl get: %s", out)
	}
	eventually(t, "kubectl describe shows the phase events", func() error {
		out := mustKubectl(t, "describe", "mount", "status-remote")
		if !strings.Contains(out, "Phase Initializing -> Ready") {
			return fmt.Errorf("no event in:\n%s", out)
		}
		return nil
	})
}

// TestStatusFollowsTheTarget: a target that stops makes a Ready mount Unknown with a reason;
// back, it is Ready again; a wrong Secret fixed makes it Ready without restart.
func TestStatusFollowsTheTarget(t *testing.T) {
	setupProxy(t)
	ctx := context.Background()
	target, err := framework.StartRecordingServer("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := target.Listener.Addr().String()
	data, err := target.Kubeconfig("t")
	if err != nil {
		t.Fatal(err)
	}
	setSecretData(t, "status-flaky", data)
	mounts := mountsClient(t, kube.AdminConfig).MountsV1alpha1().Mounts()
	deleteMountsAtEnd(t, "status-flaky", "status-fixed")
	if _, err := mounts.Create(ctx, urlMountOf("status-flaky", "status-flaky"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, "status-flaky", v1alpha1.MountPhaseReady, time.Minute)

	target.Close()
	m := waitPhase(t, "status-flaky", v1alpha1.MountPhaseUnknown, time.Minute)
	if c := condition(m, v1alpha1.ConditionTargetReachable); c.Status != metav1.ConditionFalse || c.Reason != "TargetLost" || !strings.Contains(c.Message, "unreachable") {
		t.Errorf("TargetReachable of a stopped target: %+v", c)
	}

	// The phase changes are Events in kube-system, not in "default" which many may read (Events
	// of cluster-scoped objects may be nowhere else); they say the phase and the reason, the
	// Mount's conditions the details (target address, error text).
	listEvents := func() []corev1.Event {
		t.Helper()
		events, err := kube.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Mount,involvedObject.name=status-flaky"})
		if err != nil {
			t.Fatal(err)
		}
		return events.Items
	}
	eventually(t, "an event of the change to Unknown", func() error {
		for _, e := range listEvents() {
			if e.Reason == string(v1alpha1.MountPhaseUnknown) {
				return nil
			}
		}
		return fmt.Errorf("none")
	})
	for _, e := range listEvents() {
		if e.Namespace != metav1.NamespaceSystem {
			t.Errorf("event %q in namespace %q, want %q", e.Message, e.Namespace, metav1.NamespaceSystem)
		}
		if strings.Contains(e.Message, addr) || strings.Contains(e.Message, "unreachable") {
			t.Errorf("event message %q names the target or the error", e.Message)
		}
		if e.Reason == string(v1alpha1.MountPhaseUnknown) && !strings.Contains(e.Message, "Ready -> Unknown") {
			t.Errorf("event message %q does not say the phase change", e.Message)
		}
		if !strings.Contains(e.Message, "TargetLost") && !strings.Contains(e.Message, "ProbeSucceeded") {
			t.Errorf("event message %q does not say the condition's reason", e.Message)
		}
	}

	restarted, err := framework.StartRecordingServer(addr, target.CA)
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close()
	waitPhase(t, "status-flaky", v1alpha1.MountPhaseReady, 2*time.Minute)

	// A Secret that is wrong, then fixed: the Secret's change alone brings the mount back.
	setSecretData(t, "status-fixed", []byte("not a kubeconfig"))
	if _, err := mounts.Create(ctx, urlMountOf("status-fixed", "status-fixed"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m = waitPhase(t, "status-fixed", v1alpha1.MountPhaseConnecting, time.Minute)
	eventually(t, "InvalidKubeconfig reported", func() error {
		m, err = mounts.Get(ctx, "status-fixed", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := condition(m, v1alpha1.ConditionCredentialsResolved); c.Status != metav1.ConditionFalse || c.Reason != "InvalidKubeconfig" {
			return fmt.Errorf("CredentialsResolved: %+v", c)
		}
		return nil
	})
	if strings.Contains(fmt.Sprint(m.Status), "not a kubeconfig") {
		t.Error("status echoes the Secret's content")
	}
	fixed, err := restarted.Kubeconfig("t")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	setSecretData(t, "status-fixed", fixed)
	waitPhase(t, "status-fixed", v1alpha1.MountPhaseReady, time.Minute)
	t.Logf("Ready %v after the Secret was fixed", time.Since(start).Round(time.Millisecond))
}
