package authorization

import (
	"context"
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
