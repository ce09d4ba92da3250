package lending

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// recorder allows what allow says and records every question.
type recorder struct {
	asked []string
	allow func(authorizer.Attributes) bool
}

func (r *recorder) authorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		r.asked = append(r.asked, a.GetVerb()+" "+a.GetResource())
		if r.allow(a) {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, "denied", nil
	})
}

func agentMount() *mounts.Mount {
	return &mounts.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: "edge"},
		Spec: mounts.MountSpec{
			Type:     mounts.MountTypeURL,
			Identity: mounts.MountIdentity{Mode: mounts.IdentityModeImpersonate},
			Tunnel:   &mounts.MountTunnel{Credentials: mounts.TunnelCredentialsAgent},
		},
	}
}

func attrs(op admission.Operation, m, old *mounts.Mount) admission.Attributes {
	if old == nil {
		return admission.NewAttributesRecord(m, nil, mounts.Kind("Mount").WithVersion("v1alpha1"), "", m.Name,
			mounts.Resource("mounts").WithVersion("v1alpha1"), "", op, nil, false, &user.DefaultInfo{Name: "alice"})
	}
	return admission.NewAttributesRecord(m, old, mounts.Kind("Mount").WithVersion("v1alpha1"), "", m.Name,
		mounts.Resource("mounts").WithVersion("v1alpha1"), "", op, nil, false, &user.DefaultInfo{Name: "alice"})
}

// TestAgentCredentialsNeedLend: a mount with the agent's credentials references no Secret, so
// no Secret is asked about; creating it, and every change of what it lends, needs "lend".
func TestAgentCredentialsNeedLend(t *testing.T) {
	for _, c := range []struct {
		name    string
		lend    bool
		op      admission.Operation
		old     func() *mounts.Mount
		change  func(*mounts.Mount)
		allowed bool
		asked   string
	}{
		{name: "create with lend", lend: true, op: admission.Create, allowed: true, asked: "lend mounts"},
		{name: "create without lend", op: admission.Create, asked: "lend mounts"},
		{name: "prefix change without lend", op: admission.Update, old: agentMount,
			change: func(m *mounts.Mount) { m.Spec.Identity.UserPrefix = "edge:" }, asked: "lend mounts"},
		{name: "timeouts change without lend", op: admission.Update, old: agentMount,
			change: func(m *mounts.Mount) { m.Spec.Timeouts = &mounts.MountTimeouts{} }, allowed: true},
		{name: "Server to Agent without lend", op: admission.Update, old: func() *mounts.Mount {
			m := agentMount()
			m.Spec.Tunnel.Credentials = mounts.TunnelCredentialsServer
			m.Spec.Ref = mounts.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: "a", Name: "b"}
			return m
		}, asked: "lend mounts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mountsAuthz := &recorder{allow: func(a authorizer.Attributes) bool { return c.lend && a.GetVerb() == VerbLend }}
			secretsAuthz := &recorder{allow: func(authorizer.Attributes) bool { return true }}
			p, err := New(mountsAuthz.authorizer(), secretsAuthz.authorizer(), nil)
			if err != nil {
				t.Fatal(err)
			}
			m := agentMount()
			if c.change != nil {
				c.change(m)
			}
			var old *mounts.Mount
			if c.old != nil {
				old = c.old()
			}
			err = p.Validate(context.Background(), attrs(c.op, m, old), nil)
			if (err == nil) != c.allowed {
				t.Fatalf("allowed = %v, want %v: %v", err == nil, c.allowed, err)
			}
			if err != nil && !strings.Contains(err.Error(), "spec.tunnel.credentials") {
				t.Errorf("error does not name spec.tunnel.credentials: %v", err)
			}
			if len(secretsAuthz.asked) != 0 {
				t.Errorf("asked about a Secret: %v", secretsAuthz.asked)
			}
			if got := strings.Join(mountsAuthz.asked, ","); got != c.asked {
				t.Errorf("asked %q, want %q", got, c.asked)
			}
		})
	}
}
