package authorization

import (
	"context"
	"fmt"
	"slices"
	"sort"
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

// Groups are the groups of the standalone server with fixed rights, in the order of their
// rights, most first.
var Groups = []string{AdminsGroup, EditorsGroup, ViewersGroup}

var (
	readVerbs  = []string{"get", "list", "watch"}
	writeVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	// discovery is what every user may read, as Kubernetes' system:discovery and
	// system:public-info-viewer roles allow.
	discovery = []string{"/api", "/apis", "/openapi", "/version", "/healthz", "/livez", "/readyz"}
)

// grant allows verbs (nil: every verb) on resource ("mounts", "mounts/status", ...) of an API
// group.
type grant struct {
	apiGroup, resource string
	verbs              []string
}

func (g grant) allows(a authorizer.Attributes) bool {
	resource := a.GetResource()
	if a.GetSubresource() != "" {
		resource += "/" + a.GetSubresource()
	}
	return a.GetAPIGroup() == g.apiGroup && resource == g.resource && (g.verbs == nil || slices.Contains(g.verbs, a.GetVerb()))
}

func (g grant) rule() authorizer.ResourceRuleInfo {
	verbs := g.verbs
	if verbs == nil {
		verbs = []string{"*"}
	}
	return &authorizer.DefaultResourceRuleInfo{Verbs: verbs, APIGroups: []string{g.apiGroup}, Resources: []string{g.resource}}
}

// Self reviews (whoami, can-i) are every authenticated user's, as Kubernetes' system:basic-user
// role grants them.
var selfReviews = []grant{
	{"authentication.k8s.io", "selfsubjectreviews", []string{"create"}},
	{"authorization.k8s.io", "selfsubjectaccessreviews", []string{"create"}},
	{"authorization.k8s.io", "selfsubjectrulesreviews", []string{"create"}},
}

// grants are the rights of the editors and viewers.
var grants = map[string][]grant{
	EditorsGroup: {
		{mounts.GroupName, "mounts", writeVerbs},
		{mounts.GroupName, "mounts/status", readVerbs},
		{mounts.GroupName, "mounts/proxy", nil},
		{"", "secrets", writeVerbs},
		{"", "events", readVerbs},
		{"events.k8s.io", "events", readVerbs},
	},
	ViewersGroup: {
		{mounts.GroupName, "mounts", readVerbs},
		{mounts.GroupName, "mounts/status", readVerbs},
		{mounts.GroupName, "mounts/proxy", []string{"get"}},
		// The Events of mounts, which kubectl describe shows; only the server writes them.
		{"", "events", readVerbs},
		{"events.k8s.io", "events", readVerbs},
	},
}

// Standalone authorizes by the groups above; system:masters (the loopback client) may do
// everything. It also says what a user may do (RulesFor), for SelfSubjectRulesReviews.
type Standalone struct{}

var (
	_ authorizer.Authorizer   = Standalone{}
	_ authorizer.RuleResolver = Standalone{}
)

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
	if allowed(u.GetGroups(), a) {
		return authorizer.DecisionAllow, "", nil
	}
	if !a.IsResourceRequest() {
		return authorizer.DecisionNoOpinion, "", nil
	}
	return authorizer.DecisionNoOpinion, denied(a), nil
}

// allowed says whether members of groups may do a.
func allowed(groups []string, a authorizer.Attributes) bool {
	if slices.Contains(groups, user.SystemPrivilegedGroup) || slices.Contains(groups, AdminsGroup) {
		return true
	}
	if !a.IsResourceRequest() {
		path := a.GetPath()
		return a.GetVerb() == "get" && slices.ContainsFunc(discovery, func(p string) bool { return path == p || strings.HasPrefix(path, p+"/") })
	}
	if a.GetAPIGroup() == mounts.GroupName && a.GetResource() == "mounts" && a.GetSubresource() == "attach" &&
		(a.GetVerb() == "get" || a.GetVerb() == "create") && a.GetName() != "" && slices.Contains(groups, AgentGroupPrefix+a.GetName()) {
		return true
	}
	if slices.Contains(groups, user.AllAuthenticated) && slices.ContainsFunc(selfReviews, func(g grant) bool { return g.allows(a) }) {
		return true
	}
	for _, group := range groups {
		if slices.ContainsFunc(grants[group], func(g grant) bool { return g.allows(a) }) {
			return true
		}
	}
	return false
}

// denied says which groups grant what a asks, and only those: an editor refused "lend" must
// not read that editors may do it.
func denied(a authorizer.Attributes) string {
	what := fmt.Sprintf("%q on %s", a.GetVerb(), describeResource(a))
	var granting []string
	for _, g := range Groups {
		if allowed([]string{g}, a) {
			granting = append(granting, g)
		}
	}
	if a.GetAPIGroup() == mounts.GroupName && a.GetResource() == "mounts" && a.GetSubresource() == "attach" && a.GetName() != "" &&
		allowed([]string{AgentGroupPrefix + a.GetName()}, a) {
		granting = append(granting, AgentGroupPrefix+a.GetName())
	}
	switch len(granting) {
	case 1:
		return fmt.Sprintf("the standalone server grants %s only to the group %s (see docs/users.md)", what, granting[0])
	default:
		return fmt.Sprintf("the standalone server grants %s only to the groups %s (see docs/users.md)", what, strings.Join(granting, ", "))
	}
}

func describeResource(a authorizer.Attributes) string {
	resource := a.GetResource()
	if a.GetSubresource() != "" {
		resource += "/" + a.GetSubresource()
	}
	if a.GetAPIGroup() != "" {
		resource += "." + a.GetAPIGroup()
	}
	if a.GetName() != "" {
		resource += " " + a.GetName()
	}
	return resource
}

// RulesFor implements authorizer.RuleResolver: what members of u's groups may do, everywhere
// (the rights of the standalone server are not per namespace).
func (Standalone) RulesFor(_ context.Context, u user.Info, _ string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	groups := u.GetGroups()
	if slices.Contains(groups, user.SystemPrivilegedGroup) || slices.Contains(groups, AdminsGroup) {
		return []authorizer.ResourceRuleInfo{&authorizer.DefaultResourceRuleInfo{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}},
			[]authorizer.NonResourceRuleInfo{&authorizer.DefaultNonResourceRuleInfo{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}, false, nil
	}
	var rules []authorizer.ResourceRuleInfo
	if slices.Contains(groups, user.AllAuthenticated) {
		for _, g := range selfReviews {
			rules = append(rules, g.rule())
		}
	}
	sorted := sets.List(sets.New(groups...))
	for _, group := range sorted {
		for _, g := range grants[group] {
			rules = append(rules, g.rule())
		}
		if name, ok := strings.CutPrefix(group, AgentGroupPrefix); ok && name != "" {
			rules = append(rules, &authorizer.DefaultResourceRuleInfo{Verbs: []string{"get", "create"}, APIGroups: []string{mounts.GroupName}, Resources: []string{"mounts/attach"}, ResourceNames: []string{name}})
		}
	}
	urls := make([]string, 0, 2*len(discovery))
	for _, p := range discovery {
		urls = append(urls, p, p+"/*")
	}
	sort.Strings(urls)
	return rules, []authorizer.NonResourceRuleInfo{&authorizer.DefaultNonResourceRuleInfo{Verbs: []string{"get"}, NonResourceURLs: urls}}, false, nil
}
