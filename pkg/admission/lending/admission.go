package secretaccess

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// PluginName is the name of the check in admission errors.
const PluginName = "MountSecretAccess"

// Decisions are cached briefly, as delegated authorization caches its own: creating 10,000
// mounts of one Secret asks the cluster once, not 10,000 times at the client's QPS.
const (
	allowCacheTTL = 10 * time.Second
	denyCacheTTL  = 5 * time.Second
)

// Plugin asks the cluster that holds the Secrets, by SubjectAccessReview, whether the
// requester may get the referenced Secret.
type Plugin struct {
	*admission.Handler
	authz authorizer.Authorizer
}

var _ admission.ValidationInterface = &Plugin{}

// New returns the check, asking through reviews. With no reviews client (a standalone server
// that reads no Secrets) it admits everything: there are no credentials to lend.
func New(reviews authorizationclient.AuthorizationV1Interface) (*Plugin, error) {
	p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
	if reviews == nil {
		return p, nil
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: reviews,
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       genericoptions.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("creating the %s authorizer: %w", PluginName, err)
	}
	p.authz = authz
	return p, nil
}

// Validate checks creates and reference changes of URL mounts.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if p.authz == nil || a.GetResource().GroupResource() != mounts.Resource("mounts") || a.GetSubresource() != "" {
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
	ref := m.Spec.Ref
	decision, _, err := p.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: requester, Verb: "get", APIVersion: "v1", Resource: "secrets", Namespace: ref.Namespace, Name: ref.Name, ResourceRequest: true,
	})
	if err != nil {
		// Fail closed: no answer is no permission.
		return apierrors.NewServiceUnavailable(fmt.Sprintf("%s: cannot check whether %q may get Secret %s/%s: %v", PluginName, requester.GetName(), ref.Namespace, ref.Name, err))
	}
	if decision != authorizer.DecisionAllow {
		return admission.NewForbidden(a, fmt.Errorf("spec.ref: %q may not get Secret %s/%s; a Mount lends the credentials in its Secret to everyone allowed to proxy through it, so only who may read the Secret may reference it",
			requester.GetName(), ref.Namespace, ref.Name))
	}
	return nil
}
