package kcp

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authorizationcel "k8s.io/apiserver/pkg/authorization/cel"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/utils/lru"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// ClusterAuthorizer authorizes requests in logical clusters. The authorizers behind it know
// no logical clusters: a user they allow Mounts would reach the Mounts of every cluster. So in
// a logical cluster:
//   - a request kcp forwarded (AuthorizedByKcpGroup) is allowed what kcp authorized: the
//     request itself. Further checks (verb lend, create for upgrades, Secret access) ask kcp
//     for the named caller, and fail for a caller kcp did not name;
//   - this server's administrators (AdminGroups, not through kcp) are authorized by Delegate;
//   - everybody else is authorized by kcp's RBAC in that logical cluster (Reviews), or not
//     at all without it;
//   - only what ServedInLogicalClusters serves is authorized there at all: kcp's RBAC of a
//     tenant's workspace decides about Mounts, never about the rest of the server.
//
// The default cluster is Delegate's alone, and closed to requests through kcp.
type ClusterAuthorizer struct {
	Delegate    authorizer.Authorizer
	AdminGroups []string
	// Reviews asks kcp; nil leaves logical clusters to administrators and kcp's requests.
	Reviews *WorkspaceReviews
}

var _ authorizer.Authorizer = ClusterAuthorizer{}

// Authorize implements authorizer.Authorizer.
func (a ClusterAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	cluster := clusters.From(ctx)
	u := attrs.GetUser()
	if u == nil {
		return authorizer.DecisionDeny, "no user", nil
	}
	groups := u.GetGroups()
	throughKcp := slices.Contains(groups, ThroughKcpGroup)
	if cluster == clusters.DefaultCluster {
		if throughKcp {
			// kcp's users and groups are not this server's: the default cluster's authorizer
			// would read a kcp group that happens to be named like this server's admins as them.
			return authorizer.DecisionDeny, "requests that come through kcp address a logical cluster (/clusters/<name>/...)", nil
		}
		return a.Delegate.Authorize(ctx, attrs)
	}
	if !ServedInLogicalClustersAttributes(attrs) {
		// WithClusterPaths serves nothing else there; whatever asks anyway is not for a
		// workspace's RBAC to decide.
		return authorizer.DecisionDeny, fmt.Sprintf("%s is not served in logical clusters", describe(attrs)), nil
	}
	if !throughKcp && slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(a.AdminGroups, g) }) {
		return a.Delegate.Authorize(ctx, attrs)
	}
	if slices.Contains(groups, AuthorizedByKcpGroup) {
		if requestsItself(ctx, attrs) {
			return authorizer.DecisionAllow, "kcp authorized the request before it forwarded it", nil
		}
		if HasNoIdentity(u) {
			return authorizer.DecisionDeny, fmt.Sprintf("kcp forwarded this request without naming its caller (kcp v0.32.3 sends no X-Remote-* headers), so this server cannot check %q for it; kcp checked only the request itself", describe(attrs)), nil
		}
	}
	if cluster == clusters.Wildcard {
		return authorizer.DecisionDeny, "only kcp (through the APIExport's virtual workspace) and administrators may use all logical clusters at once", nil
	}
	if a.Reviews == nil {
		return authorizer.DecisionDeny, "this server cannot ask kcp who may do what in logical clusters (no --kcp-kubeconfig); only administrators and requests forwarded by kcp are served there", nil
	}
	return a.Reviews.Authorize(ctx, attrs)
}

// requestsItself reports whether attrs are those of the request being served, which kcp
// authorized, rather than a further check made while serving it. An update or patch that
// creates its object (server-side apply) checks "create" besides: kcp authorized the
// request's own verb only, and a user kcp lets patch Mounts may create them so (what a Mount
// lends is checked separately, and without a named caller refused).
func requestsItself(ctx context.Context, attrs authorizer.Attributes) bool {
	info, ok := genericapirequest.RequestInfoFrom(ctx)
	if !ok || info.IsResourceRequest != attrs.IsResourceRequest() {
		return false
	}
	createsByWrite := attrs.GetVerb() == "create" && (info.Verb == "patch" || info.Verb == "update")
	if info.Verb != attrs.GetVerb() && !createsByWrite {
		return false
	}
	if !info.IsResourceRequest {
		return info.Path == attrs.GetPath()
	}
	return info.APIGroup == attrs.GetAPIGroup() && info.Resource == attrs.GetResource() &&
		info.Subresource == attrs.GetSubresource() && info.Name == attrs.GetName() && info.Namespace == attrs.GetNamespace()
}

func describe(attrs authorizer.Attributes) string {
	if !attrs.IsResourceRequest() {
		return attrs.GetVerb() + " " + attrs.GetPath()
	}
	resource := attrs.GetResource()
	if attrs.GetSubresource() != "" {
		resource += "/" + attrs.GetSubresource()
	}
	if attrs.GetAPIGroup() != "" {
		resource += "." + attrs.GetAPIGroup()
	}
	return attrs.GetVerb() + " " + resource
}

// ConditionsAwareAuthorize is not conditions-aware: it converts the Authorize decision.
func (a ClusterAuthorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions is not supported.
func (ClusterAuthorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// Review cache lifetimes, as the Kubernetes delegating authorizer's defaults.
const (
	reviewAllowTTL = 10 * time.Second
	reviewDenyTTL  = 10 * time.Second
)

// WorkspaceReviews authorizes by SubjectAccessReviews in the logical cluster of the context,
// sent to kcp with the provider's credentials, with a cache per cluster. It answers Secret
// checks (the consumer workspace's RBAC on its Secrets) and Mount checks of callers kcp did
// not authorize.
type WorkspaceReviews struct {
	clients *ClusterClients
	// compiler is shared: building one per cluster costs more than the review.
	compiler authorizationcel.Compiler
	mu       sync.Mutex
	byName   *lru.Cache
}

// NewWorkspaceReviews returns reviews through clients.
func NewWorkspaceReviews(clients *ClusterClients) *WorkspaceReviews {
	return &WorkspaceReviews{clients: clients, compiler: authorizationcel.NewDefaultCompiler(), byName: lru.New(maxClusterClients)}
}

// Authorize implements authorizer.Authorizer for the logical cluster of ctx.
func (r *WorkspaceReviews) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	cluster := clusters.From(ctx)
	if cluster == clusters.DefaultCluster || cluster == clusters.Wildcard {
		return authorizer.DecisionDeny, "kcp is asked only about one logical cluster", nil
	}
	if HasNoIdentity(attrs.GetUser()) {
		return authorizer.DecisionDeny, fmt.Sprintf("kcp forwarded this request without naming its caller (kcp v0.32.3 sends no X-Remote-* headers), so this server cannot ask kcp whether the caller may %s", describe(attrs)), nil
	}
	authz, err := r.forCluster(cluster)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	decision, reason, err := authz.Authorize(ctx, authenticated(attrs))
	if err != nil {
		// Fail closed, and say so: kcp refuses reviews in workspaces that do not exist or do not
		// let the provider review access.
		return authorizer.DecisionDeny, fmt.Sprintf("kcp did not answer the access review in logical cluster %s: %v", cluster, err), nil
	}
	return decision, reason, nil
}

// ConditionsAwareAuthorize is not conditions-aware: it converts the Authorize decision.
func (r *WorkspaceReviews) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(r.Authorize(ctx, attrs))
}

// EvaluateConditions is not supported.
func (*WorkspaceReviews) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// authenticated gives the reviewed user the groups a Kubernetes authenticator gives every
// authenticated user: kcp evaluates a review with exactly the groups it is sent, so a user
// authenticated here without system:authenticated would lose whatever kcp grants to all
// (discovery included).
func authenticated(attrs authorizer.Attributes) authorizer.Attributes {
	u := attrs.GetUser()
	if u == nil || u.GetName() == user.Anonymous {
		return attrs
	}
	// This server's own groups of kcp's requests mean nothing to kcp.
	groups := slices.DeleteFunc(slices.Clone(u.GetGroups()), IsServerGroup)
	if !slices.Contains(groups, user.AllAuthenticated) {
		groups = append(groups, user.AllAuthenticated)
	}
	if slices.Equal(groups, u.GetGroups()) {
		return attrs
	}
	return userAttributes{Attributes: attrs, user: &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: groups, Extra: u.GetExtra()}}
}

type userAttributes struct {
	authorizer.Attributes
	user user.Info
}

func (a userAttributes) GetUser() user.Info { return a.user }

func (r *WorkspaceReviews) forCluster(cluster clusters.Name) (authorizer.Authorizer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if authz, ok := r.byName.Get(cluster); ok {
		return authz.(authorizer.Authorizer), nil
	}
	client, err := r.clients.Client(cluster)
	if err != nil {
		return nil, err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             reviewAllowTTL,
		DenyCacheTTL:              reviewDenyTTL,
		WebhookRetryBackoff:       genericoptions.DefaultAuthWebhookRetryBackoff(),
		Compiler:                  r.compiler,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("access reviews in logical cluster %s: %w", cluster, err)
	}
	r.byName.Add(cluster, authz)
	return authz, nil
}

// ByCluster authorizes the default cluster by Default and logical clusters by Clusters; with
// Clusters nil, logical clusters are refused.
type ByCluster struct {
	Default  authorizer.Authorizer
	Clusters authorizer.Authorizer
}

// Authorize implements authorizer.Authorizer.
func (b ByCluster) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if clusters.From(ctx) == clusters.DefaultCluster {
		return b.Default.Authorize(ctx, attrs)
	}
	if b.Clusters == nil {
		return authorizer.DecisionDeny, "this server cannot ask kcp about logical clusters (no --kcp-kubeconfig)", nil
	}
	return b.Clusters.Authorize(ctx, attrs)
}

// ConditionsAwareAuthorize is not conditions-aware: it converts the Authorize decision.
func (b ByCluster) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(b.Authorize(ctx, attrs))
}

// EvaluateConditions is not supported.
func (ByCluster) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}
