package authorization

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// The groups the standalone server knows. A user in none of them may only read discovery.
const (
	// AdminsGroup may do everything, including lend mounts' credentials as they are. It is
	// the group of the admin kubeconfig: unlike system:masters, its members are impersonated
	// on the targets of mounts, so the admin can use Impersonate mounts.
	AdminsGroup = "mount-apiserver:admins"
	// EditorsGroup may manage mounts (but not lend their credentials as they are) and
	// Secrets, and proxy through mounts with every verb.
	EditorsGroup = "mount-apiserver:editors"
	// ViewersGroup may read mounts and send read requests (get) through their proxies.
	ViewersGroup = "mount-apiserver:viewers"
	// AgentGroupPrefix followed by a mount's name is the group of that mount's agents: they
	// may attach to that mount (mounts/<name>/attach) and do nothing else, as an RBAC rule
	// with resourceNames would say in a cluster.
	AgentGroupPrefix = "mount-apiserver:agent:"
)

var (
	readVerbs  = sets.New("get", "list", "watch")
	writeVerbs = sets.New("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
	// discovery is what every authenticated user may read, as Kubernetes'
	// system:discovery and system:public-info-viewer roles allow.
	discovery = []string{"/api", "/apis", "/openapi", "/version", "/healthz", "/livez", "/readyz"}
)

// Standalone authorizes by the groups above; system:masters (the loopback client) may do
// everything.
type Standalone struct{}

var _ authorizer.Authorizer = Standalone{}

// ConditionsAwareAuthorize is not conditions-aware: it converts the Authorize decision.
func (s Standalone) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(s.Authorize(ctx, a))
}

// EvaluateConditions is not supported.
func (Standalone) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// Authorize implements authorizer.Authorizer.
func (Standalone) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "no user", nil
	}
	groups := u.GetGroups()
	switch {
	case slices.Contains(groups, user.SystemPrivilegedGroup), slices.Contains(groups, AdminsGroup):
		return authorizer.DecisionAllow, "", nil
	case !a.IsResourceRequest():
		path := a.GetPath()
		if a.GetVerb() == "get" && slices.ContainsFunc(discovery, func(p string) bool { return path == p || strings.HasPrefix(path, p+"/") }) {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	}
	mountsResource := a.GetAPIGroup() == mounts.GroupName && a.GetResource() == "mounts"
	secrets := a.GetAPIGroup() == "" && a.GetResource() == "secrets" && a.GetSubresource() == ""
	verb := a.GetVerb()
	if mountsResource && a.GetSubresource() == "attach" && (verb == "get" || verb == "create") && a.GetName() != "" &&
		slices.Contains(groups, AgentGroupPrefix+a.GetName()) {
		return authorizer.DecisionAllow, "", nil
	}
	if slices.Contains(groups, EditorsGroup) {
		switch {
		case mountsResource && a.GetSubresource() == "" && writeVerbs.Has(verb),
			mountsResource && a.GetSubresource() == "status" && readVerbs.Has(verb),
			mountsResource && a.GetSubresource() == "proxy",
			secrets && writeVerbs.Has(verb):
			return authorizer.DecisionAllow, "", nil
		}
	}
	if slices.Contains(groups, ViewersGroup) {
		switch {
		case mountsResource && (a.GetSubresource() == "" || a.GetSubresource() == "status") && readVerbs.Has(verb),
			mountsResource && a.GetSubresource() == "proxy" && verb == "get":
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "the standalone server grants this only to the groups " + AdminsGroup + ", " + EditorsGroup + " or " + ViewersGroup + ", and attaching to mount <name> to " + AgentGroupPrefix + "<name> (see docs/users.md)", nil
}
