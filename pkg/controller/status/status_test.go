package status

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
)

func TestComputeStatus(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	later := metav1.NewTime(time.Unix(2000, 0))
	ok := proxy.ProbeResult{Path: "/readyz"}
	unreachable := proxy.ProbeResult{ReachErr: errors.New("the mount's target 127.0.0.1:1 is unreachable: connection refused")}
	noSecret := proxy.ProbeResult{CredentialsErr: &proxy.CredentialsError{Reason: proxy.ReasonSecretNotFound, Message: "its Secret a/b does not exist"}}
	const url = "https://hub/apis/mounts.kcp.io/v1alpha1/mounts/m/proxy"

	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 3}}
	// As the registry creates it.
	m.Status.Phase = v1alpha1.MountPhaseInitializing

	// Never ready, failing: Connecting.
	s := computeStatus(m, noSecret, url, now)
	if s.Phase != v1alpha1.MountPhaseConnecting {
		t.Errorf("credentials failing on a new mount: phase %s", s.Phase)
	}
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionCredentialsResolved); c.Status != metav1.ConditionFalse || c.Reason != proxy.ReasonSecretNotFound {
		t.Errorf("CredentialsResolved: %+v", c)
	}
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionTargetReachable); c.Status != metav1.ConditionUnknown {
		t.Errorf("TargetReachable without credentials: %+v", c)
	}

	// Probe succeeds: Ready, all conditions True.
	m.Status = computeStatus(m, ok, url, now)
	if m.Status.Phase != v1alpha1.MountPhaseReady {
		t.Fatalf("phase %s, want Ready", m.Status.Phase)
	}
	for _, c := range m.Status.Conditions {
		if c.Status != metav1.ConditionTrue || c.ObservedGeneration != 3 {
			t.Errorf("condition %+v", c)
		}
	}

	// The same result later changes nothing: no write, transition times kept.
	if again := computeStatus(m, ok, url, later); !equalStatus(again, m.Status) {
		t.Errorf("an unchanged probe changed the status:\n%+v\n%+v", again, m.Status)
	}

	// A Ready mount stops answering: Unknown, with the reason and a new transition time.
	s = computeStatus(m, unreachable, url, later)
	if s.Phase != v1alpha1.MountPhaseUnknown {
		t.Errorf("Ready mount unreachable: phase %s, want Unknown", s.Phase)
	}
	c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionTargetReachable)
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonTargetLost || c.Message != unreachable.ReachErr.Error() || !c.LastTransitionTime.Equal(&later) {
		t.Errorf("TargetReachable: %+v", c)
	}
	m.Status = s
	// Still failing: stays Unknown; answering again: Ready.
	if s := computeStatus(m, unreachable, url, later); s.Phase != v1alpha1.MountPhaseUnknown {
		t.Errorf("phase %s, want Unknown", s.Phase)
	}
	if s := computeStatus(m, ok, url, later); s.Phase != v1alpha1.MountPhaseReady {
		t.Errorf("phase %s, want Ready", s.Phase)
	}
	// A new generation is a new target: failing, it is Connecting, not lost.
	m.Generation++
	if s := computeStatus(m, unreachable, url, later); s.Phase != v1alpha1.MountPhaseConnecting {
		t.Errorf("a changed spec failing: phase %s, want Connecting", s.Phase)
	}
}

// TestPhaseIsWhatWasObserved: a phase written by hand does not change what the controller
// computes from its own observations (a status patch to Ready on a mount that never
// answered used to turn it Unknown at the next failing probe instead of Connecting).
func TestPhaseIsWhatWasObserved(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	unreachable := proxy.ProbeResult{ReachErr: errors.New("the mount's target 127.0.0.1:1 is unreachable")}
	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 1}}
	m.Status = computeStatus(m, unreachable, "https://hub/x", now)
	if m.Status.Phase != v1alpha1.MountPhaseConnecting {
		t.Fatalf("never reachable: phase %s", m.Status.Phase)
	}
	patched := m.DeepCopy()
	patched.Status.Phase = v1alpha1.MountPhaseReady
	if s := computeStatus(patched, unreachable, "https://hub/x", now); s.Phase != m.Status.Phase || !equalStatus(s, m.Status) {
		t.Errorf("after a hand-written Ready: phase %s, want the %s the conditions say", s.Phase, m.Status.Phase)
	}
}

// TestUnsupportedTypeHasNoURL: a mount this server cannot serve gets no status.URL, which
// could never work, and says why.
func TestUnsupportedTypeHasNoURL(t *testing.T) {
	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "ws", Generation: 1}}
	r := proxy.ProbeResult{CredentialsErr: &proxy.CredentialsError{Reason: proxy.ReasonUnsupportedType, Message: `mount "ws" has type Workspace, which is served only in kcp mode`}}
	s := computeStatus(m, r, "https://hub/apis/mounts.kcp.io/v1alpha1/mounts/ws/proxy", metav1.Now())
	if s.URL != "" || s.Phase != v1alpha1.MountPhaseConnecting {
		t.Errorf("Workspace mount outside kcp: URL %q phase %s, want no URL", s.URL, s.Phase)
	}
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady); c == nil || !strings.Contains(c.Message, "served only in kcp mode") {
		t.Errorf("Ready condition: %+v", c)
	}
}

func equalStatus(a, b v1alpha1.MountStatus) bool {
	if a.Phase != b.Phase || a.URL != b.URL || a.ObservedGeneration != b.ObservedGeneration || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || !x.LastTransitionTime.Equal(&y.LastTransitionTime) {
			return false
		}
	}
	return true
}

// TestEventMessage: events say the phase change and the condition's reason, never the
// condition's message (target address, error text), which stays in the Mount's status.
func TestEventMessage(t *testing.T) {
	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 1}}
	m.Status = computeStatus(m, proxy.ProbeResult{Path: "/readyz"}, "https://hub/x", metav1.Now())
	unreachable := proxy.ProbeResult{ReachErr: errors.New("the mount's target 127.0.0.1:6443 is unreachable: connection refused")}
	s := computeStatus(m, unreachable, "https://hub/x", metav1.Now())
	got := eventMessage(m.Status.Phase, s)
	if want := "Phase Ready -> Unknown, reason TargetLost"; !strings.HasPrefix(got, want) {
		t.Errorf("event message %q, want it to begin with %q", got, want)
	}
	if strings.Contains(got, "127.0.0.1") || strings.Contains(got, "refused") {
		t.Errorf("event message %q carries the condition's message", got)
	}
}

// TestTunnelPhaseFollowsAgent: a tunnel mount is Ready only while an agent is reported
// connected; without an agent anywhere it is Connecting (not Unknown).
func TestTunnelPhaseFollowsAgent(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	const url = "https://hub/apis/mounts.kcp.io/v1alpha1/mounts/m/proxy"
	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 1}, Spec: v1alpha1.MountSpec{Tunnel: &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsAgent}}}

	s := computeStatus(m, proxy.ProbeResult{Path: "/readyz"}, url, now)
	if s.Phase == v1alpha1.MountPhaseReady {
		t.Fatal("Ready before the agent was reported")
	}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionAgentConnected, Status: metav1.ConditionTrue, Reason: "Attached", Message: `An agent is connected to replica "r1".`, LastTransitionTime: now})
	m.Status = computeStatus(m, proxy.ProbeResult{Path: "/readyz"}, url, now)
	if m.Status.Phase != v1alpha1.MountPhaseReady {
		t.Fatalf("phase %s with an agent", m.Status.Phase)
	}
	if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionCredentialsResolved); !strings.Contains(c.Message, "agent's own credentials") {
		t.Errorf("CredentialsResolved: %q", c.Message)
	}

	noAgent := proxy.ProbeResult{ReachErr: &proxy.NoAgentError{Mount: "m"}}
	m.Status = computeStatus(m, noAgent, url, now)
	if m.Status.Phase != v1alpha1.MountPhaseConnecting {
		t.Errorf("phase %s without an agent, want Connecting", m.Status.Phase)
	}
	// The replicas report sessions; a probe (maybe begun before an attach) does not.
	if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionAgentConnected); c.Status != metav1.ConditionTrue {
		t.Errorf("AgentConnected changed by a probe: %+v", c)
	}
	// Reported gone: not Ready, even if a probe just succeeded.
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionAgentConnected, Status: metav1.ConditionFalse, Reason: "Detached", LastTransitionTime: now})
	if s := computeStatus(m, proxy.ProbeResult{Path: "/readyz"}, url, now); s.Phase == v1alpha1.MountPhaseReady {
		t.Error("Ready with the agent reported gone")
	}
	if c := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionReady); c.Reason != ReasonAgentNotConnected || !strings.Contains(c.Message, `mount "m"`) {
		t.Errorf("Ready: %+v", c)
	}
}
