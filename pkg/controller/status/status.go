package status

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
)

// Condition reasons besides the proxy's credential reasons.
const (
	ReasonResolved       = "Resolved"
	ReasonProbeSucceeded = "ProbeSucceeded"
	ReasonProbeFailed    = "ProbeFailed"
	// ReasonTargetLost: the target answered at an earlier probe of this generation and no
	// longer does.
	ReasonTargetLost            = "TargetLost"
	ReasonCredentialsUnresolved = "CredentialsNotResolved"
	// ReasonAgentNotConnected: a tunnel mount without an agent.
	ReasonAgentNotConnected = "AgentNotConnected"
)

// ProxyURL is the URL at which a mount's proxy is served below base.
func ProxyURL(base, name string) string {
	return base + "/apis/mounts.kcp.io/v1alpha1/mounts/" + name + "/proxy"
}

// computeStatus derives the status from a probe and the conditions this controller observed
// before, never from the phase (which anyone with status rights may have written): Ready when
// the target answered; Unknown when it answered at an earlier probe of this generation and
// no longer does (TargetReachable False, reason TargetLost); Connecting otherwise. A mount of
// a type this server cannot serve gets no URL.
func computeStatus(m *v1alpha1.Mount, r proxy.ProbeResult, url string, now metav1.Time) v1alpha1.MountStatus {
	s := m.Status.DeepCopy()
	s.URL = url
	s.ObservedGeneration = m.Generation
	gen := m.Generation
	wasReachable := false
	if prev := meta.FindStatusCondition(m.Status.Conditions, v1alpha1.ConditionTargetReachable); prev != nil && prev.ObservedGeneration == gen {
		wasReachable = prev.Status == metav1.ConditionTrue || prev.Reason == ReasonTargetLost
	}

	switch {
	case r.CredentialsErr != nil:
		reason := credentialsReason(r.CredentialsErr)
		if reason == proxy.ReasonUnsupportedType {
			s.URL = ""
		}
		setCondition(s, v1alpha1.ConditionCredentialsResolved, metav1.ConditionFalse, reason, r.CredentialsErr.Error(), gen, now)
		setCondition(s, v1alpha1.ConditionTargetReachable, metav1.ConditionUnknown, ReasonCredentialsUnresolved, "The target is not probed until its credentials resolve.", gen, now)
		setCondition(s, v1alpha1.ConditionReady, metav1.ConditionFalse, reason, r.CredentialsErr.Error(), gen, now)
	case r.ReachErr != nil:
		reason := ReasonProbeFailed
		var noAgent *proxy.NoAgentError
		switch {
		case errors.As(r.ReachErr, &noAgent):
			// No agent on any replica: the mount waits for one (Connecting), whatever it
			// was before. AgentConnected is left to the replicas that hold sessions: a probe
			// begun before an attach must not undo the attach's report.
			reason = ReasonAgentNotConnected
		case wasReachable:
			reason = ReasonTargetLost
		}
		setCondition(s, v1alpha1.ConditionCredentialsResolved, metav1.ConditionTrue, ReasonResolved, resolvedMessage(m), gen, now)
		setCondition(s, v1alpha1.ConditionTargetReachable, metav1.ConditionFalse, reason, r.ReachErr.Error(), gen, now)
		setCondition(s, v1alpha1.ConditionReady, metav1.ConditionFalse, reason, r.ReachErr.Error(), gen, now)
	default:
		setCondition(s, v1alpha1.ConditionCredentialsResolved, metav1.ConditionTrue, ReasonResolved, resolvedMessage(m), gen, now)
		setCondition(s, v1alpha1.ConditionTargetReachable, metav1.ConditionTrue, ReasonProbeSucceeded, "GET "+r.Path+" answered 200.", gen, now)
		setCondition(s, v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonProbeSucceeded, "Requests through the mount reach its target.", gen, now)
	}
	if m.Spec.Tunnel != nil && meta.IsStatusConditionTrue(s.Conditions, v1alpha1.ConditionReady) &&
		!meta.IsStatusConditionTrue(s.Conditions, v1alpha1.ConditionAgentConnected) {
		// The phase follows the agent: not Ready until the replica that holds its session
		// reported it (that write triggers this controller again), nor once it reported
		// the session gone, whatever a probe a moment earlier found.
		setCondition(s, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonAgentNotConnected, "No agent is reported connected.", gen, now)
	}
	s.Phase = phaseOf(s.Conditions)
	return *s
}

// resolvedMessage says what resolved: the Secret's kubeconfig, or nothing to resolve for a
// tunnel whose agent brings its own credentials.
func resolvedMessage(m *v1alpha1.Mount) string {
	if t := m.Spec.Tunnel; t != nil && t.Credentials == v1alpha1.TunnelCredentialsAgent {
		return "The agent's own credentials reach the target; the server holds none."
	}
	return "The kubeconfig of the referenced Secret is usable."
}

// agentChanged says whether the AgentConnected condition differs between o and n.
func agentChanged(o, n *v1alpha1.Mount) bool {
	a := meta.FindStatusCondition(o.Status.Conditions, v1alpha1.ConditionAgentConnected)
	b := meta.FindStatusCondition(n.Status.Conditions, v1alpha1.ConditionAgentConnected)
	if a == nil || b == nil {
		return (a == nil) != (b == nil)
	}
	return a.Status != b.Status || a.Message != b.Message || !a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

// phaseOf is the phase the conditions say.
func phaseOf(conditions []metav1.Condition) v1alpha1.MountPhase {
	switch reachable := meta.FindStatusCondition(conditions, v1alpha1.ConditionTargetReachable); {
	case meta.IsStatusConditionTrue(conditions, v1alpha1.ConditionReady):
		return v1alpha1.MountPhaseReady
	case reachable != nil && reachable.Status == metav1.ConditionFalse && reachable.Reason == ReasonTargetLost:
		return v1alpha1.MountPhaseUnknown
	default:
		return v1alpha1.MountPhaseConnecting
	}
}

// setCondition sets a condition; the transition time changes only with the status, so an
// unchanged probe result changes nothing and causes no write.
func setCondition(s *v1alpha1.MountStatus, t string, status metav1.ConditionStatus, reason, message string, gen int64, now metav1.Time) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: t, Status: status, Reason: reason, Message: message, ObservedGeneration: gen, LastTransitionTime: now,
	})
}

// credentialsReason is the condition reason of a credentials error.
func credentialsReason(err error) string {
	var ce *proxy.CredentialsError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return proxy.ReasonSecretUnavailable
}

// Reasons of Workspace and Redirect mounts (kcp mode).
const (
	// ReasonWorkspaceNotFound: spec.ref.name names no workspace.
	ReasonWorkspaceNotFound = "WorkspaceNotFound"
	// ReasonWorkspaceUnresolved: the workspace could not be looked up (kcp unreachable, say).
	ReasonWorkspaceUnresolved = "WorkspaceUnresolved"
	// ReasonWorkspaceNotReady: the workspace exists and is not ready.
	ReasonWorkspaceNotReady = "WorkspaceNotReady"
	// ReasonWorkspaceReady: the workspace exists and is ready.
	ReasonWorkspaceReady = "WorkspaceReady"
)

// workspaceStatus derives the status of a Workspace or Redirect mount from resolving its
// workspace (ws, or err): Ready with the workspace's URL when it is ready, Connecting
// otherwise, with the reason. Both types are served at the workspace's own URL (a Redirect
// sends clients there), so status.URL is the workspace's URL whenever it resolves.
func workspaceStatus(m *v1alpha1.Mount, ws kcp.Workspace, err error, now metav1.Time) v1alpha1.MountStatus {
	s := m.Status.DeepCopy()
	s.ObservedGeneration = m.Generation
	gen := m.Generation
	path := m.Spec.Ref.Name
	switch {
	case apierrors.IsNotFound(err):
		s.URL = ""
		msg := fmt.Sprintf("Workspace %q does not exist.", path)
		setCondition(s, v1alpha1.ConditionCredentialsResolved, metav1.ConditionFalse, ReasonWorkspaceNotFound, msg, gen, now)
		setCondition(s, v1alpha1.ConditionTargetReachable, metav1.ConditionUnknown, ReasonWorkspaceNotFound, "No workspace to reach.", gen, now)
		setCondition(s, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonWorkspaceNotFound, msg, gen, now)
	case err != nil:
		// The last URL stays: the workspace may well be there, kcp just did not say.
		msg := fmt.Sprintf("Workspace %q could not be resolved: %v", path, err)
		setCondition(s, v1alpha1.ConditionCredentialsResolved, metav1.ConditionUnknown, ReasonWorkspaceUnresolved, msg, gen, now)
		setCondition(s, v1alpha1.ConditionTargetReachable, metav1.ConditionUnknown, ReasonWorkspaceUnresolved, msg, gen, now)
		setCondition(s, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonWorkspaceUnresolved, msg, gen, now)
	case !ws.Ready:
		s.URL = ws.URL
		msg := fmt.Sprintf("Workspace %q (logical cluster %s) is not ready", path, ws.Cluster)
		if ws.Message != "" {
			msg += ": " + ws.Message
		}
		setCondition(s, v1alpha1.ConditionCredentialsResolved, metav1.ConditionTrue, ReasonResolved, fmt.Sprintf("Workspace %q exists (logical cluster %s).", path, ws.Cluster), gen, now)
		setCondition(s, v1alpha1.ConditionTargetReachable, metav1.ConditionFalse, ReasonWorkspaceNotReady, msg, gen, now)
		setCondition(s, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonWorkspaceNotReady, msg, gen, now)
	default:
		s.URL = ws.URL
		setCondition(s, v1alpha1.ConditionCredentialsResolved, metav1.ConditionTrue, ReasonResolved, fmt.Sprintf("Workspace %q exists (logical cluster %s).", path, ws.Cluster), gen, now)
		setCondition(s, v1alpha1.ConditionTargetReachable, metav1.ConditionTrue, ReasonWorkspaceReady, "The workspace is ready.", gen, now)
		setCondition(s, v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonWorkspaceReady, "Requests through the mount reach the workspace.", gen, now)
	}
	// Not ready or not found is Connecting: the workspace's own phase says more than Unknown.
	if meta.IsStatusConditionTrue(s.Conditions, v1alpha1.ConditionReady) {
		s.Phase = v1alpha1.MountPhaseReady
	} else {
		s.Phase = v1alpha1.MountPhaseConnecting
	}
	return *s
}
