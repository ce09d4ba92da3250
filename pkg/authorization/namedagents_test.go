package authorization

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// answer is a delegate that answers one decision, and counts its calls.
type answer struct {
	authorizer.Authorizer
	d     authorizer.Decision
	calls int
}

func (a *answer) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	a.calls++
	return a.d, "delegate", nil
}

// TestNamedAgents: a mount that names its agent lets that user attach and no other, whatever
// the delegate says; everything else, and mounts not known yet, are the delegate's.
func TestNamedAgents(t *testing.T) {
	mountsNaming := map[string]string{"edge": "system:serviceaccount:edge:agent", "plain": ""}
	agentOf := func(_ context.Context, name string) (string, bool) {
		u, ok := mountsNaming[name]
		return u, ok
	}
	agent := &user.DefaultInfo{Name: "system:serviceaccount:edge:agent"}
	other := &user.DefaultInfo{Name: "system:serviceaccount:edge:other", Groups: []string{user.SystemPrivilegedGroup}}
	for _, c := range []struct {
		name                      string
		who                       user.Info
		verb, subresource, nameOf string
		delegate                  authorizer.Decision
		want                      authorizer.Decision
		asked                     bool
	}{
		{"the named agent gets", agent, "get", "attach", "edge", authorizer.DecisionNoOpinion, authorizer.DecisionAllow, false},
		{"the named agent creates", agent, "create", "attach", "edge", authorizer.DecisionDeny, authorizer.DecisionAllow, false},
		{"another user, even allowed by the delegate", other, "create", "attach", "edge", authorizer.DecisionAllow, authorizer.DecisionDeny, false},
		{"the named agent, another verb", agent, "delete", "attach", "edge", authorizer.DecisionNoOpinion, authorizer.DecisionNoOpinion, true},
		{"the named agent, another subresource", agent, "get", "proxy", "edge", authorizer.DecisionNoOpinion, authorizer.DecisionNoOpinion, true},
		{"the named agent, the mount itself", agent, "get", "", "edge", authorizer.DecisionNoOpinion, authorizer.DecisionNoOpinion, true},
		{"a mount naming none", other, "create", "attach", "plain", authorizer.DecisionAllow, authorizer.DecisionAllow, true},
		{"a mount not known yet", agent, "create", "attach", "new", authorizer.DecisionNoOpinion, authorizer.DecisionNoOpinion, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			delegate := &answer{d: c.delegate}
			named := &NamedAgents{}
			named.ReadFrom(agentOf)
			d, reason, err := WithNamedAgents(named, delegate).Authorize(context.Background(), authorizer.AttributesRecord{
				User: c.who, Verb: c.verb, APIGroup: "mounts.kcp.io", Resource: "mounts", Subresource: c.subresource, Name: c.nameOf, ResourceRequest: true,
			})
			if err != nil || d != c.want || (delegate.calls > 0) != c.asked {
				t.Errorf("got %v (%q, %v), delegate asked %d times; want %v, asked %v", d, reason, err, delegate.calls, c.want, c.asked)
			}
		})
	}

	// Before the cache exists, the delegate decides everything.
	delegate := &answer{d: authorizer.DecisionNoOpinion}
	if d, _, _ := WithNamedAgents(&NamedAgents{}, delegate).Authorize(context.Background(), authorizer.AttributesRecord{
		User: agent, Verb: "create", APIGroup: "mounts.kcp.io", Resource: "mounts", Subresource: "attach", Name: "edge", ResourceRequest: true,
	}); d != authorizer.DecisionNoOpinion || delegate.calls != 1 {
		t.Errorf("without a cache: %v, delegate asked %d times", d, delegate.calls)
	}
}
