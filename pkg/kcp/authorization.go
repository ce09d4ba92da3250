package kcp

import (
	"context"
	"slices"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// AdminsOnlyInClusters authorizes requests addressed to a logical cluster (or to all of them)
// only for members of adminGroups, and leaves every other request to delegate. The
// authorizers behind it know no logical clusters: a user they allow Mounts would otherwise
// reach the Mounts of every cluster. It holds until kcp's own authorization is trusted by the
// shard's client certificate.
type AdminsOnlyInClusters struct {
	Delegate    authorizer.Authorizer
	AdminGroups []string
}

var _ authorizer.Authorizer = AdminsOnlyInClusters{}

// Authorize implements authorizer.Authorizer.
func (a AdminsOnlyInClusters) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if clusters.From(ctx) == clusters.DefaultCluster {
		return a.Delegate.Authorize(ctx, attrs)
	}
	if u := attrs.GetUser(); u != nil && slices.ContainsFunc(u.GetGroups(), func(g string) bool { return slices.Contains(a.AdminGroups, g) }) {
		return a.Delegate.Authorize(ctx, attrs)
	}
	return authorizer.DecisionDeny, "logical clusters are open only to administrators until requests forwarded by kcp are authenticated by the shard's certificate", nil
}

// ConditionsAwareAuthorize is not conditions-aware: it converts the Authorize decision.
func (a AdminsOnlyInClusters) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions is not supported.
func (AdminsOnlyInClusters) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}
