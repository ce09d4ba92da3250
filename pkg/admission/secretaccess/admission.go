package secretaccess

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// PluginName is the name of the check in admission errors.
const PluginName = "MountSecretAccess"

// Plugin asks the cluster that holds the Secrets, by SubjectAccessReview, whether the
// requester may get the referenced Secret.
type Plugin struct {
	*admission.Handler
	reviews authorizationclient.SubjectAccessReviewInterface
}

var _ admission.ValidationInterface = &Plugin{}

// New returns the check. With no reviews client (a standalone server that reads no Secrets)
// it admits everything: there are no credentials to lend.
func New(reviews authorizationclient.SubjectAccessReviewInterface) *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update), reviews: reviews}
}

// Validate checks creates and reference changes of URL mounts.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if p.reviews == nil || a.GetResource().GroupResource() != mounts.Resource("mounts") || a.GetSubresource() != "" {
		return nil
	}
	m, ok := a.GetObject().(*mounts.Mount)
	if !ok || m.Spec.Type != mounts.MountTypeURL {
		return nil
	}
	if a.GetOperation() == admission.Update {
		if old, ok := a.GetOldObject().(*mounts.Mount); ok && old.Spec.Type == m.Spec.Type && old.Spec.Ref == m.Spec.Ref {
			return nil
		}
	}
	requester := a.GetUserInfo()
	if requester == nil {
		return admission.NewForbidden(a, fmt.Errorf("no requester to check Secret access for"))
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range requester.GetExtra() {
		extra[k] = v
	}
	ref := m.Spec.Ref
	review, err := p.reviews.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: requester.GetName(), UID: requester.GetUID(), Groups: requester.GetGroups(), Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ref.Namespace, Verb: "get", Resource: "secrets", Name: ref.Name},
	}}, metav1.CreateOptions{})
	if err != nil {
		// Fail closed: no answer is no permission.
		return apierrors.NewServiceUnavailable(fmt.Sprintf("%s: cannot check whether %q may get Secret %s/%s: %v", PluginName, requester.GetName(), ref.Namespace, ref.Name, err))
	}
	if !review.Status.Allowed {
		return admission.NewForbidden(a, fmt.Errorf("spec.ref: %q may not get Secret %s/%s; a Mount lends the credentials in its Secret to everyone allowed to proxy through it, so only who may read the Secret may reference it",
			requester.GetName(), ref.Namespace, ref.Name))
	}
	return nil
}
