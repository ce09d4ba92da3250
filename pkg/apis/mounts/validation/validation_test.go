package validation

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

func validURLMount() *mounts.Mount {
	return &mounts.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", ResourceVersion: "1"},
		Spec: mounts.MountSpec{
			Type:     mounts.MountTypeURL,
			Ref:      mounts.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: "prod", Name: "kubeconfig"},
			Identity: mounts.MountIdentity{Mode: mounts.IdentityModeImpersonate},
		},
	}
}

func validWorkspaceMount(t mounts.MountType) *mounts.Mount {
	return &mounts.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: "team", ResourceVersion: "1"},
		Spec: mounts.MountSpec{
			Type:     t,
			Ref:      mounts.ObjectReference{APIVersion: "tenancy.kcp.io/v1alpha1", Kind: "Workspace", Name: "root:org:team-a"},
			Identity: mounts.MountIdentity{Mode: mounts.IdentityModeImpersonate},
		},
	}
}

// validAgentTunnelMount is a tunnel mount with the agent's credentials: no reference.
func validAgentTunnelMount() *mounts.Mount {
	m := validURLMount()
	m.Spec.Ref = mounts.ObjectReference{}
	m.Spec.Tunnel = &mounts.MountTunnel{Credentials: mounts.TunnelCredentialsAgent}
	return m
}

func testCA(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "test"}, key)
	if err != nil {
		t.Fatal(err)
	}
	data, err := certutil.EncodeCertificates(cert)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// expectErrors checks that errs holds exactly the wanted "<type> <field>" pairs, in order.
func expectErrors(t *testing.T, errs field.ErrorList, want []string) {
	t.Helper()
	var got []string
	for _, e := range errs {
		got = append(got, string(e.Type)+" "+e.Field)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n got: %q\nwant: %q\nfull: %v", got, want, errs.ToAggregate())
	}
}

func TestValidateMount(t *testing.T) {
	ca := testCA(t)
	tests := []struct {
		name   string
		mount  func() *mounts.Mount
		errors []string
	}{
		{"valid URL mount", validURLMount, nil},
		{"valid Workspace mount", func() *mounts.Mount { return validWorkspaceMount(mounts.MountTypeWorkspace) }, nil},
		{"valid Redirect mount", func() *mounts.Mount { return validWorkspaceMount(mounts.MountTypeRedirect) }, nil},
		{"valid workspace logical cluster name", func() *mounts.Mount {
			m := validWorkspaceMount(mounts.MountTypeWorkspace)
			m.Spec.Ref.Name = "2x7kq3n1zzz"
			return m
		}, nil},
		{"valid with everything", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.CABundle = ca
			m.Spec.Identity.UserPrefix = "hub:"
			m.Spec.Identity.GroupPrefix = "hub-"
			m.Spec.Timeouts = &mounts.MountTimeouts{ConnectSeconds: ptr.To[int32](300), RequestSeconds: ptr.To[int32](1)}
			return m
		}, nil},
		{"valid MountCredentials", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Identity.Mode = mounts.IdentityModeMountCredentials
			return m
		}, nil},
		{"tunnel with Server credentials", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Tunnel = &mounts.MountTunnel{Credentials: mounts.TunnelCredentialsServer}
			m.Spec.CABundle = ca
			return m
		}, nil},
		{"tunnel with Server credentials needs its Secret", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Tunnel = &mounts.MountTunnel{Credentials: mounts.TunnelCredentialsServer}
			m.Spec.Ref = mounts.ObjectReference{}
			return m
		}, []string{"FieldValueRequired spec.ref.kind", "FieldValueRequired spec.ref.namespace", "FieldValueRequired spec.ref.name"}},
		{"tunnel with Agent credentials", validAgentTunnelMount, nil},
		{"tunnel with Agent credentials and a Secret", func() *mounts.Mount {
			m := validAgentTunnelMount()
			m.Spec.Ref = validURLMount().Spec.Ref
			return m
		}, []string{"FieldValueForbidden spec.ref"}},
		{"tunnel with Agent credentials and MountCredentials", func() *mounts.Mount {
			m := validAgentTunnelMount()
			m.Spec.Identity.Mode = mounts.IdentityModeMountCredentials
			return m
		}, []string{"FieldValueInvalid spec.identity.mode"}},
		{"tunnel with Agent credentials and a CA bundle", func() *mounts.Mount {
			m := validAgentTunnelMount()
			m.Spec.CABundle = ca
			return m
		}, []string{"FieldValueForbidden spec.caBundle"}},
		{"tunnel with Agent credentials and prefixes", func() *mounts.Mount {
			m := validAgentTunnelMount()
			m.Spec.Identity.UserPrefix = "hub:"
			return m
		}, nil},
		{"tunnel naming its agent", func() *mounts.Mount {
			m := validAgentTunnelMount()
			m.Spec.Tunnel.AgentUser = "system:serviceaccount:edge:agent-1"
			return m
		}, nil},
		{"tunnel naming the anonymous user as its agent", func() *mounts.Mount {
			m := validAgentTunnelMount()
			m.Spec.Tunnel.AgentUser = "system:anonymous"
			return m
		}, []string{"FieldValueInvalid spec.tunnel.agentUser"}},
		{"tunnel naming its agent with a trailing space", func() *mounts.Mount {
			m := validAgentTunnelMount()
			m.Spec.Tunnel.AgentUser = "agent "
			return m
		}, []string{"FieldValueInvalid spec.tunnel.agentUser"}},
		{"tunnel naming its agent at length", func() *mounts.Mount {
			m := validAgentTunnelMount()
			m.Spec.Tunnel.AgentUser = strings.Repeat("a", MaxAgentUserLength+1)
			return m
		}, []string{"FieldValueTooLong spec.tunnel.agentUser"}},
		{"tunnel credentials missing", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Tunnel = &mounts.MountTunnel{}
			return m
		}, []string{"FieldValueRequired spec.tunnel.credentials"}},
		{"tunnel credentials unknown", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Tunnel = &mounts.MountTunnel{Credentials: "Both"}
			return m
		}, []string{"FieldValueNotSupported spec.tunnel.credentials"}},
		{"tunnel on a Workspace mount", func() *mounts.Mount {
			m := validWorkspaceMount(mounts.MountTypeWorkspace)
			m.Spec.Tunnel = &mounts.MountTunnel{Credentials: mounts.TunnelCredentialsAgent}
			return m
		}, []string{"FieldValueForbidden spec.tunnel"}},
		{"name missing", func() *mounts.Mount { m := validURLMount(); m.Name = ""; return m },
			[]string{"FieldValueRequired metadata.name"}},
		{"name not a DNS subdomain", func() *mounts.Mount { m := validURLMount(); m.Name = "Prod_1"; return m },
			[]string{"FieldValueInvalid metadata.name"}},
		{"namespace set on cluster-scoped", func() *mounts.Mount { m := validURLMount(); m.Namespace = "x"; return m },
			[]string{"FieldValueForbidden metadata.namespace"}},
		{"type missing", func() *mounts.Mount { m := validURLMount(); m.Spec.Type = ""; return m },
			[]string{"FieldValueRequired spec.type"}},
		{"type unsupported", func() *mounts.Mount { m := validURLMount(); m.Spec.Type = "Bogus"; return m },
			[]string{"FieldValueNotSupported spec.type"}},
		{"ref kind ConfigMap for URL", func() *mounts.Mount { m := validURLMount(); m.Spec.Ref.Kind = "ConfigMap"; return m },
			[]string{"FieldValueNotSupported spec.ref.kind"}},
		{"ref kind missing", func() *mounts.Mount { m := validURLMount(); m.Spec.Ref.Kind = ""; return m },
			[]string{"FieldValueRequired spec.ref.kind"}},
		{"ref apiVersion missing", func() *mounts.Mount { m := validURLMount(); m.Spec.Ref.APIVersion = ""; return m },
			[]string{"FieldValueRequired spec.ref.apiVersion"}},
		{"ref apiVersion wrong for Secret", func() *mounts.Mount { m := validURLMount(); m.Spec.Ref.APIVersion = "v2"; return m },
			[]string{"FieldValueNotSupported spec.ref.apiVersion"}},
		{"ref Secret namespace missing", func() *mounts.Mount { m := validURLMount(); m.Spec.Ref.Namespace = ""; return m },
			[]string{"FieldValueRequired spec.ref.namespace"}},
		{"ref Secret namespace invalid", func() *mounts.Mount { m := validURLMount(); m.Spec.Ref.Namespace = "a.b"; return m },
			[]string{"FieldValueInvalid spec.ref.namespace"}},
		{"ref Secret name missing", func() *mounts.Mount { m := validURLMount(); m.Spec.Ref.Name = ""; return m },
			[]string{"FieldValueRequired spec.ref.name"}},
		{"ref Secret name invalid", func() *mounts.Mount { m := validURLMount(); m.Spec.Ref.Name = "A/B"; return m },
			[]string{"FieldValueInvalid spec.ref.name"}},
		{"ref kind Secret for Workspace", func() *mounts.Mount {
			m := validWorkspaceMount(mounts.MountTypeWorkspace)
			m.Spec.Ref.Kind = "Secret"
			return m
		}, []string{"FieldValueNotSupported spec.ref.kind"}},
		{"ref Workspace apiVersion wrong", func() *mounts.Mount {
			m := validWorkspaceMount(mounts.MountTypeRedirect)
			m.Spec.Ref.APIVersion = "v1"
			return m
		}, []string{"FieldValueNotSupported spec.ref.apiVersion"}},
		{"ref Workspace namespace forbidden", func() *mounts.Mount {
			m := validWorkspaceMount(mounts.MountTypeWorkspace)
			m.Spec.Ref.Namespace = "default"
			return m
		}, []string{"FieldValueForbidden spec.ref.namespace"}},
		{"ref Workspace path missing", func() *mounts.Mount {
			m := validWorkspaceMount(mounts.MountTypeWorkspace)
			m.Spec.Ref.Name = ""
			return m
		}, []string{"FieldValueRequired spec.ref.name"}},
		{"ref Workspace path with traversal", func() *mounts.Mount {
			m := validWorkspaceMount(mounts.MountTypeWorkspace)
			m.Spec.Ref.Name = "root:../other"
			return m
		}, []string{"FieldValueInvalid spec.ref.name"}},
		{"ref Workspace path with empty segment", func() *mounts.Mount {
			m := validWorkspaceMount(mounts.MountTypeWorkspace)
			m.Spec.Ref.Name = "root::team"
			return m
		}, []string{"FieldValueInvalid spec.ref.name"}},
		{"ref Workspace path too long", func() *mounts.Mount {
			m := validWorkspaceMount(mounts.MountTypeWorkspace)
			m.Spec.Ref.Name = strings.Repeat("a", 1013)
			return m
		}, []string{"FieldValueTooLong spec.ref.name"}},
		{"identity mode missing", func() *mounts.Mount { m := validURLMount(); m.Spec.Identity.Mode = ""; return m },
			[]string{"FieldValueRequired spec.identity.mode"}},
		{"identity mode unsupported", func() *mounts.Mount { m := validURLMount(); m.Spec.Identity.Mode = "Anonymous"; return m },
			[]string{"FieldValueNotSupported spec.identity.mode"}},
		{"user prefix with MountCredentials", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Identity.Mode = mounts.IdentityModeMountCredentials
			m.Spec.Identity.UserPrefix = "hub:"
			return m
		}, []string{"FieldValueForbidden spec.identity.userPrefix"}},
		{"group prefix system:", func() *mounts.Mount { m := validURLMount(); m.Spec.Identity.GroupPrefix = "system:"; return m },
			[]string{"FieldValueInvalid spec.identity.groupPrefix"}},
		{"group prefix part of system:", func() *mounts.Mount { m := validURLMount(); m.Spec.Identity.GroupPrefix = "sys"; return m },
			[]string{"FieldValueInvalid spec.identity.groupPrefix"}},
		{"user prefix system:serviceaccount:", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Identity.UserPrefix = "system:serviceaccount:"
			return m
		}, []string{"FieldValueInvalid spec.identity.userPrefix"}},
		{"user prefix with space", func() *mounts.Mount { m := validURLMount(); m.Spec.Identity.UserPrefix = "a b"; return m },
			[]string{"FieldValueInvalid spec.identity.userPrefix"}},
		{"user prefix too long", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Identity.UserPrefix = strings.Repeat("h", 64)
			return m
		}, []string{"FieldValueTooLong spec.identity.userPrefix"}},
		{"caBundle for Workspace", func() *mounts.Mount {
			m := validWorkspaceMount(mounts.MountTypeWorkspace)
			m.Spec.CABundle = ca
			return m
		}, []string{"FieldValueForbidden spec.caBundle"}},
		{"caBundle not PEM", func() *mounts.Mount { m := validURLMount(); m.Spec.CABundle = []byte("foo"); return m },
			[]string{"FieldValueInvalid spec.caBundle"}},
		{"caBundle with a key", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.CABundle = []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
			return m
		}, []string{"FieldValueInvalid spec.caBundle"}},
		{"caBundle with a broken certificate", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.CABundle = []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
			return m
		}, []string{"FieldValueInvalid spec.caBundle"}},
		{"caBundle too large", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.CABundle = []byte(strings.Repeat(string(ca), MaxCABundleBytes/len(ca)+1))
			return m
		}, []string{"FieldValueTooLong spec.caBundle"}},
		{"connectSeconds zero", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Timeouts = &mounts.MountTimeouts{ConnectSeconds: ptr.To[int32](0)}
			return m
		}, []string{"FieldValueInvalid spec.timeouts.connectSeconds"}},
		{"connectSeconds too large", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Timeouts = &mounts.MountTimeouts{ConnectSeconds: ptr.To[int32](301)}
			return m
		}, []string{"FieldValueInvalid spec.timeouts.connectSeconds"}},
		{"requestSeconds negative", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Timeouts = &mounts.MountTimeouts{RequestSeconds: ptr.To[int32](-1)}
			return m
		}, []string{"FieldValueInvalid spec.timeouts.requestSeconds"}},
		{"requestSeconds too large", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Timeouts = &mounts.MountTimeouts{RequestSeconds: ptr.To[int32](3601)}
			return m
		}, []string{"FieldValueInvalid spec.timeouts.requestSeconds"}},
		{"several errors at once", func() *mounts.Mount {
			m := validURLMount()
			m.Spec.Type = "Bogus"
			m.Spec.Identity.GroupPrefix = "system:"
			m.Spec.Timeouts = &mounts.MountTimeouts{ConnectSeconds: ptr.To[int32](0)}
			return m
		}, []string{"FieldValueNotSupported spec.type", "FieldValueInvalid spec.identity.groupPrefix", "FieldValueInvalid spec.timeouts.connectSeconds"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErrors(t, ValidateMount(tt.mount()), tt.errors)
		})
	}
}

func TestValidateMountErrorMessages(t *testing.T) {
	m := validURLMount()
	m.Spec.Ref.Kind = "ConfigMap"
	errs := ValidateMount(m)
	if len(errs) != 1 || errs[0].Error() != `spec.ref.kind: Unsupported value: "ConfigMap": supported values: "Secret"` {
		t.Errorf("unexpected message: %v", errs)
	}
}

func TestValidateMountUpdate(t *testing.T) {
	old := validURLMount()

	changed := validURLMount()
	changed.Spec.Type = mounts.MountTypeWorkspace
	changed.Spec.Ref = mounts.ObjectReference{APIVersion: "tenancy.kcp.io/v1alpha1", Kind: "Workspace", Name: "root:a"}
	expectErrors(t, ValidateMountUpdate(changed, old), nil)

	invalid := validURLMount()
	invalid.Spec.Ref.Namespace = ""
	expectErrors(t, ValidateMountUpdate(invalid, old), []string{"FieldValueRequired spec.ref.namespace"})

	renamed := validURLMount()
	renamed.Name = "other"
	expectErrors(t, ValidateMountUpdate(renamed, old), []string{"FieldValueInvalid metadata.name"})
}

func TestValidateMountStatusUpdate(t *testing.T) {
	now := metav1.Now()
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "TargetReachable", LastTransitionTime: now}
	tests := []struct {
		name   string
		status mounts.MountStatus
		errors []string
	}{
		{"empty", mounts.MountStatus{}, nil},
		{"valid", mounts.MountStatus{
			Phase:              mounts.MountPhaseReady,
			Conditions:         []metav1.Condition{ready},
			URL:                "https://hub.example:6443/apis/mounts.kcp.io/v1alpha1/mounts/prod/proxy",
			ObservedGeneration: 3,
		}, nil},
		{"every phase", mounts.MountStatus{Phase: mounts.MountPhaseInitializing}, nil},
		{"phase unsupported", mounts.MountStatus{Phase: "Broken"}, []string{"FieldValueNotSupported status.phase"}},
		{"condition without reason", mounts.MountStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: now}}},
			[]string{"FieldValueRequired status.conditions[0].reason"}},
		{"condition with bad status", mounts.MountStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: "Maybe", Reason: "X", LastTransitionTime: now}}},
			[]string{"FieldValueNotSupported status.conditions[0].status"}},
		{"duplicate condition", mounts.MountStatus{Conditions: []metav1.Condition{ready, ready}},
			[]string{"FieldValueDuplicate status.conditions[1]"}},
		{"URL relative", mounts.MountStatus{URL: "/apis/x"}, []string{"FieldValueInvalid status.URL"}},
		{"URL not http", mounts.MountStatus{URL: "ftp://x/"}, []string{"FieldValueInvalid status.URL"}},
		{"URL without host", mounts.MountStatus{URL: "https:///x"}, []string{"FieldValueInvalid status.URL"}},
		{"URL with credentials", mounts.MountStatus{URL: "https://user:secret@x/"}, []string{"FieldValueInvalid status.URL"}},
		{"URL with query", mounts.MountStatus{URL: "https://x/?a=b"}, []string{"FieldValueInvalid status.URL"}},
		{"URL unparsable", mounts.MountStatus{URL: "https://x/%zz"}, []string{"FieldValueInvalid status.URL"}},
		{"URL too long", mounts.MountStatus{URL: "https://x/" + strings.Repeat("a", MaxURLLength)}, []string{"FieldValueTooLong status.URL"}},
		{"observedGeneration negative", mounts.MountStatus{ObservedGeneration: -1}, []string{"FieldValueInvalid status.observedGeneration"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := validURLMount()
			m := validURLMount()
			m.Status = tt.status
			expectErrors(t, ValidateMountStatusUpdate(m, old), tt.errors)
		})
	}
}

func TestCredentialsNeverEchoed(t *testing.T) {
	m := validURLMount()
	m.Status.URL = "https://user:s3cr3t@x/"
	for _, e := range ValidateMountStatusUpdate(m, validURLMount()) {
		if strings.Contains(e.Error(), "s3cr3t") {
			t.Errorf("error echoes the credential: %v", e)
		}
	}
}
