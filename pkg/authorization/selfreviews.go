package authorization

import (
	"context"
	"slices"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// WithSelfReviews lets every authenticated caller create the self reviews (kubectl auth whoami
// and can-i), as Kubernetes' system:basic-user role does, whatever delegate says: they tell
// the caller about itself only. Everything else is delegate's to decide. In kcp mode's logical
// clusters kcp's RBAC would decide otherwise, and it need not grant them.
func WithSelfReviews(delegate authorizer.Authorizer) authorizer.Authorizer {
	return selfReviewsAuthorizer{delegate}
}

type selfReviewsAuthorizer struct{ delegate authorizer.Authorizer }

func (a selfReviewsAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if IsSelfReview(attrs) {
		return authorizer.DecisionAllow, "", nil
	}
	return a.delegate.Authorize(ctx, attrs)
}

func (a selfReviewsAuthorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	if IsSelfReview(attrs) {
		return authorizer.ConditionsAwareDecisionFromParts(authorizer.DecisionAllow, "", nil)
	}
	return a.delegate.ConditionsAwareAuthorize(ctx, attrs)
}

func (a selfReviewsAuthorizer) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return a.delegate.EvaluateConditions(ctx, d, data)
}

// IsSelfReview says whether attrs create a self review for an authenticated user.
func IsSelfReview(attrs authorizer.Attributes) bool {
	u := attrs.GetUser()
	if u == nil || u.GetName() == user.Anonymous || slices.Contains(u.GetGroups(), user.AllUnauthenticated) || !attrs.IsResourceRequest() || attrs.GetSubresource() != "" {
		return false
	}
	return slices.ContainsFunc(selfReviews, func(g grant) bool { return g.allows(attrs) })
}
