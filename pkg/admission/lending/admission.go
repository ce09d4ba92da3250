package lending

import (
	"context"
	"fmt"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// PluginName is the name of the check in admission errors.
const PluginName = "MountLending"

// VerbLend on mounts (resourceNames allowed) lets a requester create or change a Mount with
// identity mode MountCredentials, which lends the mount's credentials as they are to every
// caller allowed to proxy through it. Reading the Secret is not enough for that: reading a
// credential is not handing it out.
const VerbLend = "lend"

// Decisions of the cluster that holds the Secrets are cached briefly, as delegated
// authorization caches its own: creating 10,000 mounts of one Secret asks the cluster once,
// not 10,000 times at the client's QPS.
const (
	allowCacheTTL = 10 * time.Second
	denyCacheTTL  = 5 * time.Second
)

// Plugin authorizes creates of Mounts and every change of what a Mount lends.
type Plugin struct {
	*admission.Handler
	// secrets decides whether the requester may get a Secret, on the cluster that holds them.
	secrets authorizer.Authorizer
	// mounts is this server's own authorizer, which decides the verb "lend" on mounts.
	mounts authorizer.Authorizer
	// targets checks the target a URL mount's Secret names against the server's target
	// policy; nil checks nothing here (the proxy enforces it when it builds and dials).
	targets TargetCheck
}

// TargetCheck returns why the server would refuse the target of m, if it does: an early,
// clear answer at admission. The Secret may change later, so the proxy checks again when it
// builds a transport and on every dial.
type TargetCheck func(ctx context.Context, m *mounts.Mount) field.ErrorList

var _ admission.ValidationInterface = &Plugin{}

// New returns the check. mountsAuthz is the server's own authorizer; secretsAuthz decides who
// may get a Secret, on the cluster that holds them (this server itself in standalone mode).
// targets may be nil.
func New(mountsAuthz, secretsAuthz authorizer.Authorizer, targets TargetCheck) (*Plugin, error) {
	if mountsAuthz == nil || secretsAuthz == nil {
		return nil, fmt.Errorf("%s needs the server's authorizer and the Secrets' authorizer", PluginName)
	}
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update), mounts: mountsAuthz, secrets: secretsAuthz, targets: targets}, nil
}

// SecretReviews asks a cluster that holds the Secrets by SubjectAccessReviews, with a cache.
func SecretReviews(reviews authorizationclient.AuthorizationV1Interface) (authorizer.Authorizer, error) {
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: reviews,
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       genericoptions.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("creating the %s authorizer: %w", PluginName, err)
	}
	return authz, nil
}

// Lends returns the part of a spec that decides what a Mount lends: all of it but the
// timeouts. A field added to the spec later lends until it is listed here as harmless, so a
// forgotten field fails closed.
func Lends(spec *mounts.MountSpec) mounts.MountSpec {
	lent := *spec.DeepCopy()
	lent.Timeouts = nil
	return lent
}

// Validate checks creates, updates that change what a Mount lends, and status updates that
// change where it is served.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != mounts.Resource("mounts") {
		return nil
	}
	m, ok := a.GetObject().(*mounts.Mount)
	if !ok {
		return nil
	}
	switch a.GetSubresource() {
	case "":
	case "status":
		return p.checkStatus(ctx, a, m)
	default:
		return nil
	}
	if a.GetOperation() == admission.Update {
		if old, ok := a.GetOldObject().(*mounts.Mount); ok && apiequality.Semantic.DeepEqual(Lends(&old.Spec), Lends(&m.Spec)) {
			return nil
		}
	}
	requester := a.GetUserInfo()
	if requester == nil {
		return admission.NewForbidden(a, fmt.Errorf("no requester to check what the mount lends"))
	}
	if err := p.checkSecret(ctx, a, requester, m); err != nil {
		return err
	}
	if err := p.checkMode(ctx, a, requester, m); err != nil {
		return err
	}
	// Only now, to a requester who may read the Secret: what its target is and why not.
	if p.targets != nil && m.Spec.Type == mounts.MountTypeURL {
		if errs := p.targets(ctx, m); len(errs) > 0 {
			return apierrors.NewInvalid(mounts.Kind("Mount"), m.Name, errs)
		}
	}
	return nil
}

// checkSecret: only who may read a Secret may lend it. A tunnel with the agent's credentials
// references no Secret: it lends what the agent may do on its cluster (impersonate), which no
// Secret read can stand for, so it needs "lend" on the mount, on create and on every change
// of what it lends (prefixes decide whom the agent impersonates).
func (p *Plugin) checkSecret(ctx context.Context, a admission.Attributes, requester user.Info, m *mounts.Mount) error {
	if m.Spec.Type != mounts.MountTypeURL {
		return nil
	}
	if t := m.Spec.Tunnel; t != nil && t.Credentials == mounts.TunnelCredentialsAgent {
		return p.checkLend(ctx, a, requester, m, field.NewPath("spec", "tunnel", "credentials"),
			fmt.Sprintf("%s lends the agent's own credentials on its cluster (to impersonate) to every caller allowed to proxy through the mount", mounts.TunnelCredentialsAgent))
	}
	ref := m.Spec.Ref
	decision, reason, err := p.secrets.Authorize(ctx, authorizer.AttributesRecord{
		User: requester, Verb: "get", APIVersion: "v1", Resource: "secrets", Namespace: ref.Namespace, Name: ref.Name, ResourceRequest: true,
	})
	if err != nil {
		// Fail closed: no answer is no permission.
		return apierrors.NewServiceUnavailable(fmt.Sprintf("%s: cannot check whether %q may get Secret %s/%s: %v", PluginName, requester.GetName(), ref.Namespace, ref.Name, err))
	}
	if decision != authorizer.DecisionAllow {
		msg := fmt.Sprintf("%s: %q may not get Secret %s/%s; a Mount lends the credentials in its Secret to everyone allowed to proxy through it, so only who may read the Secret may reference it or change what the mount lends",
			field.NewPath("spec", "ref"), requester.GetName(), ref.Namespace, ref.Name)
		if reason != "" {
			msg += " (" + reason + ")"
		}
		return admission.NewForbidden(a, fmt.Errorf("%s", msg))
	}
	return nil
}

// checkMode: MountCredentials hands the credentials out as they are, which needs "lend".
func (p *Plugin) checkMode(ctx context.Context, a admission.Attributes, requester user.Info, m *mounts.Mount) error {
	if m.Spec.Identity.Mode != mounts.IdentityModeMountCredentials {
		return nil
	}
	return p.checkLend(ctx, a, requester, m, field.NewPath("spec", "identity", "mode"),
		fmt.Sprintf("%s lets every caller allowed to proxy through the mount act with its credentials as they are", mounts.IdentityModeMountCredentials))
}

// checkStatus: status.URL is where kcp sends the requests of a workspace mounted on this
// Mount, with their callers' credentials, so changing it lends as much as the mount itself.
// The status controller writes it as this server, which may lend.
func (p *Plugin) checkStatus(ctx context.Context, a admission.Attributes, m *mounts.Mount) error {
	old, ok := a.GetOldObject().(*mounts.Mount)
	if a.GetOperation() != admission.Update || !ok || old.Status.URL == m.Status.URL {
		return nil
	}
	requester := a.GetUserInfo()
	if requester == nil {
		return admission.NewForbidden(a, fmt.Errorf("no requester to check what the mount lends"))
	}
	return p.checkLend(ctx, a, requester, m, field.NewPath("status", "URL"),
		"status.URL is where kcp sends the requests of a workspace mounted on this mount, with their callers' credentials")
}

// checkLend asks this server's authorizer for the verb "lend" on the Mount.
func (p *Plugin) checkLend(ctx context.Context, a admission.Attributes, requester user.Info, m *mounts.Mount, fldPath *field.Path, why string) error {
	decision, reason, err := p.mounts.Authorize(ctx, authorizer.AttributesRecord{
		User: requester, Verb: VerbLend, APIGroup: mounts.GroupName, APIVersion: v1alpha1.SchemeGroupVersion.Version,
		Resource: "mounts", Name: m.Name, ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("%s: cannot check whether %q may lend mount %q: %v", PluginName, requester.GetName(), m.Name, err))
	}
	msg := fmt.Sprintf("%s: %s; that needs verb %q on mounts.%s %q, which %q does not have",
		fldPath, why, VerbLend, mounts.GroupName, m.Name, requester.GetName())
	if reason != "" {
		msg += " (" + reason + ")"
	}
	return admission.NewForbidden(a, fmt.Errorf("%s", msg))
}
