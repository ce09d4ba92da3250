package selfreviews

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// Resources of the reviews, as served.
var (
	SelfSubjectReviews       = authenticationv1.SchemeGroupVersion.WithResource("selfsubjectreviews")
	SelfSubjectAccessReviews = authorizationv1.SchemeGroupVersion.WithResource("selfsubjectaccessreviews")
	SelfSubjectRulesReviews  = authorizationv1.SchemeGroupVersion.WithResource("selfsubjectrulesreviews")
)

// creater is what the three reviews share: created only, cluster-scoped, never stored.
type creater struct{ singular string }

func (creater) Destroy()                  {}
func (creater) NamespaceScoped() bool     { return false }
func (c creater) GetSingularName() string { return c.singular }

func caller(ctx context.Context) (user.Info, error) {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewBadRequest("no user in the request")
	}
	return u, nil
}

func validate(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc) error {
	if createValidation == nil {
		return nil
	}
	return createValidation(ctx, obj.DeepCopyObject())
}

// SubjectReviewREST serves SelfSubjectReviews: who the server takes the caller for.
type SubjectReviewREST struct{ creater }

// NewSubjectReviewREST returns the storage of selfsubjectreviews.
func NewSubjectReviewREST() *SubjectReviewREST {
	return &SubjectReviewREST{creater{"selfsubjectreview"}}
}

var (
	_ rest.Creater                  = &SubjectReviewREST{}
	_ rest.SingularNameProvider     = &SubjectReviewREST{}
	_ rest.Scoper                   = &SubjectReviewREST{}
	_ rest.GroupVersionKindProvider = &SubjectReviewREST{}
)

// New returns an empty review.
func (*SubjectReviewREST) New() runtime.Object { return &authenticationv1.SelfSubjectReview{} }

// GroupVersionKind is the kind served.
func (*SubjectReviewREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return authenticationv1.SchemeGroupVersion.WithKind("SelfSubjectReview")
}

// Create answers with the caller's user info.
func (r *SubjectReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authenticationv1.SelfSubjectReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectReview: %T", obj))
	}
	u, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := validate(ctx, review, createValidation); err != nil {
		return nil, err
	}
	out := review.DeepCopy()
	out.Status.UserInfo = authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
	if extra := u.GetExtra(); len(extra) > 0 {
		out.Status.UserInfo.Extra = make(map[string]authenticationv1.ExtraValue, len(extra))
		for k, v := range extra {
			out.Status.UserInfo.Extra[k] = v
		}
	}
	return out, nil
}

// AccessReviewREST serves SelfSubjectAccessReviews: whether this server's authorizer lets the
// caller do what the review describes, in the request's logical cluster.
type AccessReviewREST struct {
	creater
	authorizer authorizer.Authorizer
}

// NewAccessReviewREST returns the storage of selfsubjectaccessreviews over a.
func NewAccessReviewREST(a authorizer.Authorizer) *AccessReviewREST {
	return &AccessReviewREST{creater{"selfsubjectaccessreview"}, a}
}

var (
	_ rest.Creater                  = &AccessReviewREST{}
	_ rest.SingularNameProvider     = &AccessReviewREST{}
	_ rest.Scoper                   = &AccessReviewREST{}
	_ rest.GroupVersionKindProvider = &AccessReviewREST{}
)

// New returns an empty review.
func (*AccessReviewREST) New() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} }

// GroupVersionKind is the kind served.
func (*AccessReviewREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview")
}

// Create answers the review.
func (r *AccessReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectAccessReview: %T", obj))
	}
	spec := field.NewPath("spec")
	switch ra, nra := review.Spec.ResourceAttributes, review.Spec.NonResourceAttributes; {
	case ra == nil && nra == nil:
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview").GroupKind(), "",
			field.ErrorList{field.Required(spec.Child("resourceAttributes"), "exactly one of resourceAttributes and nonResourceAttributes must be set")})
	case ra != nil && nra != nil:
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview").GroupKind(), "",
			field.ErrorList{field.Forbidden(spec.Child("nonResourceAttributes"), "exactly one of resourceAttributes and nonResourceAttributes must be set")})
	}
	u, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := validate(ctx, review, createValidation); err != nil {
		return nil, err
	}
	attrs := authorizer.AttributesRecord{User: u}
	if ra := review.Spec.ResourceAttributes; ra != nil {
		attrs.Verb, attrs.Namespace, attrs.APIGroup, attrs.APIVersion = ra.Verb, ra.Namespace, ra.Group, ra.Version
		attrs.Resource, attrs.Subresource, attrs.Name, attrs.ResourceRequest = ra.Resource, ra.Subresource, ra.Name, true
	} else {
		attrs.Verb, attrs.Path = review.Spec.NonResourceAttributes.Verb, review.Spec.NonResourceAttributes.Path
	}
	decision, reason, err := r.authorizer.Authorize(ctx, attrs)
	out := review.DeepCopy()
	out.Status = authorizationv1.SubjectAccessReviewStatus{
		Allowed: decision == authorizer.DecisionAllow,
		Denied:  decision == authorizer.DecisionDeny,
		Reason:  reason,
	}
	if err != nil {
		out.Status.EvaluationError = err.Error()
	}
	return out, nil
}

// RulesReviewREST serves SelfSubjectRulesReviews: what the caller may do, as far as this
// server's rules resolver knows. Without one (delegated authorization, kcp's RBAC in logical
// clusters), the answer says it is incomplete: only SelfSubjectAccessReviews tell there.
type RulesReviewREST struct {
	creater
	resolver authorizer.RuleResolver
}

// NewRulesReviewREST returns the storage of selfsubjectrulesreviews over resolver, which may be
// nil.
func NewRulesReviewREST(resolver authorizer.RuleResolver) *RulesReviewREST {
	return &RulesReviewREST{creater{"selfsubjectrulesreview"}, resolver}
}

var (
	_ rest.Creater                  = &RulesReviewREST{}
	_ rest.SingularNameProvider     = &RulesReviewREST{}
	_ rest.Scoper                   = &RulesReviewREST{}
	_ rest.GroupVersionKindProvider = &RulesReviewREST{}
)

// New returns an empty review.
func (*RulesReviewREST) New() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} }

// GroupVersionKind is the kind served.
func (*RulesReviewREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectRulesReview")
}

// Create answers the review.
func (r *RulesReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*authorizationv1.SelfSubjectRulesReview)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SelfSubjectRulesReview: %T", obj))
	}
	u, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := validate(ctx, review, createValidation); err != nil {
		return nil, err
	}
	out := review.DeepCopy()
	switch cluster := clusters.From(ctx); {
	case r.resolver == nil:
		out.Status = authorizationv1.SubjectRulesReviewStatus{Incomplete: true,
			EvaluationError: "this server's authorizer cannot list rules; ask with SelfSubjectAccessReviews (kubectl auth can-i <verb> <resource>)"}
	case cluster != clusters.DefaultCluster:
		out.Status = authorizationv1.SubjectRulesReviewStatus{Incomplete: true,
			EvaluationError: fmt.Sprintf("in logical cluster %s, kcp's RBAC decides and this server cannot list its rules; ask with SelfSubjectAccessReviews (kubectl auth can-i <verb> <resource>)", cluster)}
	default:
		resourceRules, nonResourceRules, incomplete, err := r.resolver.RulesFor(ctx, u, review.Spec.Namespace)
		out.Status = authorizationv1.SubjectRulesReviewStatus{Incomplete: incomplete}
		if err != nil {
			out.Status.EvaluationError = err.Error()
		}
		for _, rule := range resourceRules {
			out.Status.ResourceRules = append(out.Status.ResourceRules, authorizationv1.ResourceRule{
				Verbs: rule.GetVerbs(), APIGroups: rule.GetAPIGroups(), Resources: rule.GetResources(), ResourceNames: rule.GetResourceNames(),
			})
		}
		for _, rule := range nonResourceRules {
			out.Status.NonResourceRules = append(out.Status.NonResourceRules, authorizationv1.NonResourceRule{
				Verbs: rule.GetVerbs(), NonResourceURLs: rule.GetNonResourceURLs(),
			})
		}
	}
	return out, nil
}
