package authorization

import (
	"context"
	"fmt"
	"sync/atomic"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// AgentOf answers the user that mount name of the request's logical cluster (ctx) names as its
// agent (spec.tunnel.agentUser), "" if it names none, and known false if the answer is not at
// hand (no cache yet, or no such mount in it).
type AgentOf func(ctx context.Context, name string) (agentUser string, known bool)

// NamedAgents decides attaching (verbs get and create on mounts/attach) to a Mount that names
// its agent, the way Kubernetes' Node authorizer decides what a kubelet reads: from the
// objects themselves, not from one RBAC binding per agent, which the host's authorizer would
// walk on every request of a fleet. The user the mount names is allowed; every other user is
// denied, whatever its delegate would say. Everything else, and every mount not in the cache
// yet, is the delegate's to decide.
type NamedAgents struct {
	agentOf atomic.Pointer[AgentOf]
}

// ReadFrom sets where the mounts are read (a cache, set once it exists).
func (n *NamedAgents) ReadFrom(agentOf AgentOf) {
	n.agentOf.Store(&agentOf)
}

// WithNamedAgents decides attaching to mounts that name their agent by n, all else by delegate.
func WithNamedAgents(n *NamedAgents, delegate authorizer.Authorizer) authorizer.Authorizer {
	return namedAgentsAuthorizer{n: n, delegate: delegate}
}

type namedAgentsAuthorizer struct {
	n        *NamedAgents
	delegate authorizer.Authorizer
}

// decide answers the decision of n, and ok false where it has none.
func (n *NamedAgents) decide(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, bool) {
	if !attrs.IsResourceRequest() || attrs.GetAPIGroup() != mounts.GroupName || attrs.GetResource() != "mounts" ||
		attrs.GetSubresource() != "attach" || attrs.GetName() == "" || (attrs.GetVerb() != "get" && attrs.GetVerb() != "create") {
		return authorizer.DecisionNoOpinion, "", false
	}
	agentOf := n.agentOf.Load()
	if agentOf == nil {
		return authorizer.DecisionNoOpinion, "", false
	}
	agentUser, known := (*agentOf)(ctx, attrs.GetName())
	if !known || agentUser == "" {
		return authorizer.DecisionNoOpinion, "", false
	}
	if u := attrs.GetUser(); u != nil && u.GetName() == agentUser {
		return authorizer.DecisionAllow, fmt.Sprintf("mount %q names this user as its agent", attrs.GetName()), true
	}
	return authorizer.DecisionDeny, fmt.Sprintf("mount %q names another user as its agent (spec.tunnel.agentUser); no other may attach", attrs.GetName()), true
}

func (a namedAgentsAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if d, reason, ok := a.n.decide(ctx, attrs); ok {
		return d, reason, nil
	}
	return a.delegate.Authorize(ctx, attrs)
}

func (a namedAgentsAuthorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	if d, reason, ok := a.n.decide(ctx, attrs); ok {
		return authorizer.ConditionsAwareDecisionFromParts(d, reason, nil)
	}
	return a.delegate.ConditionsAwareAuthorize(ctx, attrs)
}

func (a namedAgentsAuthorizer) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return a.delegate.EvaluateConditions(ctx, d, data)
}
