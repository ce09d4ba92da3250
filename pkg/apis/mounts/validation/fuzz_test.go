package validation

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// FuzzValidateMount feeds arbitrary JSON-decoded specs and statuses to the validators.
// Properties: they never panic; every error names a field under metadata, spec or status with
// a known error type; a spec or status they accept keeps the invariants the server relies on
// (a supported type and mode, prefixes outside "system:", timeouts in range, a status URL that
// is absolute http(s) without user information, query or fragment; rewrites only on URL mounts,
// one to one, never chained, within the lengths of Kubernetes names). The seed corpus is
// testdata/fuzz/FuzzValidateMount.
func FuzzValidateMount(f *testing.F) {
	f.Add([]byte(`{"Type":"URL","Ref":{"APIVersion":"v1","Kind":"Secret","Namespace":"a","Name":"b"},"Identity":{"Mode":"Impersonate"}}`), []byte(`{"Phase":"Ready","URL":"https://x/"}`))
	f.Add([]byte(`{"Type":"Workspace","Ref":{"Kind":"Workspace","Name":"root:a"},"CABundle":"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="}`), []byte(`{"URL":"http://[::1"}`))
	f.Add([]byte(`{"Type":"URL","Ref":{},"Identity":{"Mode":"Impersonate"},"Tunnel":{"Credentials":"Agent"}}`), []byte(`{}`))
	f.Add([]byte(`{"Type":"URL","Identity":{"Mode":"MountCredentials"},"Tunnel":{"Credentials":"Server"}}`), []byte(`{}`))
	f.Add([]byte(`{"Timeouts":{"ConnectSeconds":-5},"Identity":{"Mode":"MountCredentials","UserPrefix":"system"}}`), []byte(`{"Conditions":[{"type":""}]}`))
	f.Add([]byte(`{"Rewrites":{"Groups":[{"Presented":"kubevirt.io","Target":"x.io","KindPrefix":"P"}],"MetadataKeyPrefixes":[{"Presented":"a.io/","Target":"b.io/"}]}}`), []byte(`{}`))
	f.Add([]byte(`{"Rewrites":{"Groups":[{"Presented":"a.io","Target":"b.io"},{"Presented":"b.io","Target":"a.io"}],"MetadataKeyPrefixes":[{"Presented":"a.io/","Target":"a.io/x"}]}}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, spec, status []byte) {
		m := validURLMount()
		if json.Unmarshal(spec, &m.Spec) != nil {
			return
		}
		_ = json.Unmarshal(status, &m.Status)
		create := ValidateMount(m)
		checkErrors(t, "ValidateMount", create)
		checkErrors(t, "ValidateMountUpdate", ValidateMountUpdate(m, validURLMount()))
		statusErrs := ValidateMountStatusUpdate(m, validURLMount())
		checkErrors(t, "ValidateMountStatusUpdate", statusErrs)
		if len(create) == 0 {
			checkSpecInvariants(t, &m.Spec)
		}
		if len(statusErrs) == 0 {
			checkStatusInvariants(t, &m.Status)
		}
	})
}

func checkErrors(t *testing.T, what string, errs field.ErrorList) {
	t.Helper()
	for _, e := range errs {
		root, _, _ := strings.Cut(e.Field, ".")
		root, _, _ = strings.Cut(root, "[")
		if root != "metadata" && root != "spec" && root != "status" {
			t.Fatalf("%s: error without a field path under metadata, spec or status: %q: %v", what, e.Field, e)
		}
		switch e.Type {
		case field.ErrorTypeRequired, field.ErrorTypeInvalid, field.ErrorTypeNotSupported, field.ErrorTypeForbidden, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeDuplicate:
		default:
			t.Fatalf("%s: unexpected error type %q: %v", what, e.Type, e)
		}
	}
}

func checkSpecInvariants(t *testing.T, s *mounts.MountSpec) {
	t.Helper()
	if !supportedTypes.Has(s.Type) || !supportedModes.Has(s.Identity.Mode) {
		t.Fatalf("accepted type %q, mode %q", s.Type, s.Identity.Mode)
	}
	for _, p := range []string{s.Identity.UserPrefix, s.Identity.GroupPrefix} {
		if p == "" {
			continue
		}
		if s.Identity.Mode != mounts.IdentityModeImpersonate || strings.HasPrefix(p, "system:") || strings.HasPrefix("system:", p) || len(p) > MaxPrefixLength {
			t.Fatalf("accepted prefix %q with mode %q", p, s.Identity.Mode)
		}
	}
	agent := s.Tunnel != nil && s.Tunnel.Credentials == mounts.TunnelCredentialsAgent
	if s.Type == mounts.MountTypeURL && !agent && (s.Ref.Kind != secretKind || s.Ref.Namespace == "" || s.Ref.Name == "") {
		t.Fatalf("accepted a URL mount whose reference is not a Secret: %+v", s.Ref)
	}
	if tun := s.Tunnel; tun != nil {
		if s.Type != mounts.MountTypeURL || !supportedTunnelCredentials.Has(tun.Credentials) {
			t.Fatalf("accepted tunnel %+v on a %s mount", *tun, s.Type)
		}
		if agent && (s.Ref != (mounts.ObjectReference{}) || s.Identity.Mode != mounts.IdentityModeImpersonate || len(s.CABundle) > 0) {
			t.Fatalf("accepted an agent-credential tunnel with a reference, mode %q or a CA bundle", s.Identity.Mode)
		}
	}
	if s.Type != mounts.MountTypeURL && (len(s.CABundle) > 0 || !workspacePathRE.MatchString(s.Ref.Name)) {
		t.Fatalf("accepted a %s mount with a CA bundle or reference %q", s.Type, s.Ref.Name)
	}
	checkRewriteInvariants(t, s)
	if to := s.Timeouts; to != nil {
		if c := to.ConnectSeconds; c != nil && (*c < 1 || *c > MaxConnectSeconds) {
			t.Fatalf("accepted connectSeconds %d", *c)
		}
		if r := to.RequestSeconds; r != nil && (*r < 1 || *r > MaxRequestSeconds) {
			t.Fatalf("accepted requestSeconds %d", *r)
		}
	}
}

func checkStatusInvariants(t *testing.T, s *mounts.MountStatus) {
	t.Helper()
	if s.Phase != "" && !supportedPhase.Has(s.Phase) {
		t.Fatalf("accepted phase %q", s.Phase)
	}
	if s.URL == "" {
		return
	}
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		t.Fatalf("accepted status URL %q", s.URL)
	}
}

// checkRewriteInvariants: accepted rewrites are a bijection that never chains, and every name
// they produce fits where Kubernetes puts it.
func checkRewriteInvariants(t *testing.T, s *mounts.MountSpec) {
	t.Helper()
	r := s.Rewrites
	if r == nil || (len(r.Groups) == 0 && len(r.MetadataKeyPrefixes) == 0) {
		return
	}
	if s.Type != mounts.MountTypeURL {
		t.Fatalf("accepted rewrites on a %s mount", s.Type)
	}
	presented, target := map[string]bool{}, map[string]bool{}
	for _, g := range r.Groups {
		for _, name := range []string{g.Presented, g.Target} {
			if name == "" || len(name) > MaxRewriteGroupLength || len(utilvalidation.IsDNS1123Subdomain(name)) > 0 || reservedGroup(name) != "" {
				t.Fatalf("accepted group %q", name)
			}
		}
		if presented[g.Presented] || target[g.Target] || g.Presented == g.Target {
			t.Fatalf("accepted a rule that is not one to one: %+v", r.Groups)
		}
		presented[g.Presented], target[g.Target] = true, true
		if g.KindPrefix != "" && (!kindPrefixRE.MatchString(g.KindPrefix) || len(g.KindPrefix) > MaxKindPrefixLength) {
			t.Fatalf("accepted kind prefix %q", g.KindPrefix)
		}
		// The longest renamed CRD name: a 63-character resource name in the target group.
		if utilvalidation.DNS1123LabelMaxLength+1+len(g.Target) > utilvalidation.DNS1123SubdomainMaxLength {
			t.Fatalf("accepted target group %q that a CRD name may not fit", g.Target)
		}
	}
	for name := range presented {
		if target[name] {
			t.Fatalf("accepted chained group rules: %+v", r.Groups)
		}
	}
	for i, a := range r.MetadataKeyPrefixes {
		for _, p := range []string{a.Presented, a.Target} {
			domain, ok := strings.CutSuffix(p, "/")
			if !ok || len(utilvalidation.IsQualifiedName(domain+"/x")) > 0 || reservedKeyPrefix(domain) != "" {
				t.Fatalf("accepted key prefix %q", p)
			}
		}
		for j, b := range r.MetadataKeyPrefixes {
			if strings.HasPrefix(b.Target, a.Presented) || strings.HasPrefix(a.Presented, b.Target) ||
				(i != j && (strings.HasPrefix(b.Presented, a.Presented) || strings.HasPrefix(b.Target, a.Target))) {
				t.Fatalf("accepted overlapping key prefixes: %+v", r.MetadataKeyPrefixes)
			}
		}
	}
}
