package authorization

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// TestAgentGroup: the agents of a mount may attach to that mount and do nothing else.
func TestAgentGroup(t *testing.T) {
	agent := &user.DefaultInfo{Name: "edge-agent", Groups: []string{AgentGroupPrefix + "edge"}}
	for _, c := range []struct {
		verb, subresource, name string
		allowed                 bool
	}{
		{"get", "attach", "edge", true},
		{"create", "attach", "edge", true},
		{"get", "attach", "other", false},
		{"get", "attach", "", false},
		{"get", "proxy", "edge", false},
		{"get", "", "edge", false},
		{"delete", "attach", "edge", false},
	} {
		d, _, _ := Standalone{}.Authorize(context.Background(), authorizer.AttributesRecord{
			User: agent, Verb: c.verb, APIGroup: "mounts.kcp.io", Resource: "mounts", Subresource: c.subresource, Name: c.name, ResourceRequest: true,
		})
		if (d == authorizer.DecisionAllow) != c.allowed {
			t.Errorf("%s mounts/%s %q: %v", c.verb, c.subresource, c.name, d)
		}
	}
	editor := &user.DefaultInfo{Name: "e", Groups: []string{EditorsGroup}}
	if d, _, _ := (Standalone{}).Authorize(context.Background(), authorizer.AttributesRecord{
		User: editor, Verb: "create", APIGroup: "mounts.kcp.io", Resource: "mounts", Subresource: "attach", Name: "edge", ResourceRequest: true,
	}); d == authorizer.DecisionAllow {
		t.Error("an editor may attach")
	}
}

// TestDeniedNamesTheGrantingGroups: a refusal names exactly the groups that grant what was
// asked; an editor refused "lend" does not read that editors may lend.
func TestDeniedNamesTheGrantingGroups(t *testing.T) {
	editor := &user.DefaultInfo{Name: "e", Groups: []string{EditorsGroup, user.AllAuthenticated}}
	viewer := &user.DefaultInfo{Name: "v", Groups: []string{ViewersGroup, user.AllAuthenticated}}
	for _, c := range []struct {
		user      user.Info
		verb, res string
		want      string
	}{
		{editor, "lend", "", `grants "lend" on mounts.mounts.kcp.io prod only to the group mount-apiserver:admins (see docs/users.md)`},
		{viewer, "create", "", `grants "create" on mounts.mounts.kcp.io prod only to the groups mount-apiserver:admins, mount-apiserver:editors (see docs/users.md)`},
		{viewer, "create", "proxy", `grants "create" on mounts/proxy.mounts.kcp.io prod only to the groups mount-apiserver:admins, mount-apiserver:editors (see docs/users.md)`},
		{editor, "create", "attach", `grants "create" on mounts/attach.mounts.kcp.io prod only to the groups mount-apiserver:admins, mount-apiserver:agent:prod (see docs/users.md)`},
	} {
		d, reason, _ := Standalone{}.Authorize(context.Background(), authorizer.AttributesRecord{
			User: c.user, Verb: c.verb, APIGroup: "mounts.kcp.io", Resource: "mounts", Subresource: c.res, Name: "prod", ResourceRequest: true,
		})
		if d == authorizer.DecisionAllow || !strings.HasSuffix(reason, c.want) {
			t.Errorf("%s %s %s: %v %q, want %q", c.user.GetName(), c.verb, c.res, d, reason, c.want)
		}
	}
}

// TestRulesForAgreesWithAuthorize: the rules a SelfSubjectRulesReview shows allow exactly
// what Authorize allows, for each group, on every resource and verb the server knows.
func TestRulesForAgreesWithAuthorize(t *testing.T) {
	resources := []struct{ group, resource, subresource string }{
		{"mounts.kcp.io", "mounts", ""}, {"mounts.kcp.io", "mounts", "status"}, {"mounts.kcp.io", "mounts", "proxy"}, {"mounts.kcp.io", "mounts", "attach"},
		{"", "secrets", ""}, {"", "events", ""}, {"events.k8s.io", "events", ""},
		{"authentication.k8s.io", "selfsubjectreviews", ""}, {"authorization.k8s.io", "selfsubjectaccessreviews", ""}, {"authorization.k8s.io", "selfsubjectrulesreviews", ""},
		{"", "pods", ""},
	}
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "lend"}
	for _, groups := range [][]string{{EditorsGroup}, {ViewersGroup}, {AdminsGroup}, {AgentGroupPrefix + "prod"}, {}} {
		u := &user.DefaultInfo{Name: "u", Groups: append(groups, user.AllAuthenticated)}
		rules, nonResource, incomplete, err := Standalone{}.RulesFor(context.Background(), u, "ns")
		if err != nil || incomplete || len(nonResource) == 0 {
			t.Fatalf("%v: %v %v %v", groups, err, incomplete, nonResource)
		}
		for _, r := range resources {
			for _, verb := range verbs {
				for _, name := range []string{"prod", "other"} {
					attrs := authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: r.group, Resource: r.resource, Subresource: r.subresource, Name: name, ResourceRequest: true}
					d, _, _ := Standalone{}.Authorize(context.Background(), attrs)
					if byRules := rulesAllow(rules, attrs); byRules != (d == authorizer.DecisionAllow) {
						t.Errorf("%v: %s %s/%s %s: Authorize %v, rules %v", groups, verb, r.resource, r.subresource, name, d, byRules)
					}
				}
			}
		}
	}
}

func rulesAllow(rules []authorizer.ResourceRuleInfo, a authorizer.Attributes) bool {
	resource := a.GetResource()
	if a.GetSubresource() != "" {
		resource += "/" + a.GetSubresource()
	}
	match := func(list []string, s string) bool { return slices.Contains(list, "*") || slices.Contains(list, s) }
	for _, r := range rules {
		if match(r.GetVerbs(), a.GetVerb()) && match(r.GetAPIGroups(), a.GetAPIGroup()) && match(r.GetResources(), resource) &&
			(len(r.GetResourceNames()) == 0 || slices.Contains(r.GetResourceNames(), a.GetName())) {
			return true
		}
	}
	return false
}

func TestValidateGroup(t *testing.T) {
	for group, want := range map[string]string{
		AdminsGroup: "", EditorsGroup: "", ViewersGroup: "", AgentGroupPrefix + "edge": "", "team-a": "", "oidc:devs": "",
		"mount-apiserver:admin":        `"mount-apiserver:admin" is not a group of the standalone server; its groups are mount-apiserver:admins, mount-apiserver:editors, mount-apiserver:viewers and mount-apiserver:agent:<mount name>`,
		"mount-apiserver:agent:":       `"mount-apiserver:agent:": "" is not a mount name`,
		"mount-apiserver:agent:Edge_1": `"mount-apiserver:agent:Edge_1": "Edge_1" is not a mount name`,
		"system:masters":               `"system:masters": the groups of system: are the server's own; mount-apiserver:admins may do everything`,
		"":                             "empty group",
	} {
		err := ValidateGroup(group)
		if (want == "") != (err == nil) || err != nil && !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", group, err, want)
		}
	}
}
