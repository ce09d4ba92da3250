package validation

import (
	"strings"
	"testing"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

func withRewrites(r *mounts.MountRewrites) func() *mounts.Mount {
	return func() *mounts.Mount {
		m := validURLMount()
		m.Spec.Rewrites = r
		return m
	}
}

func TestValidateRewrites(t *testing.T) {
	g := func(p, tg, kp string) mounts.GroupRewrite {
		return mounts.GroupRewrite{Presented: p, Target: tg, KindPrefix: kp}
	}
	k := func(p, tg string) mounts.PrefixRewrite { return mounts.PrefixRewrite{Presented: p, Target: tg} }
	long := func(n int) string {
		return strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", n)
	}
	tests := []struct {
		name     string
		rewrites *mounts.MountRewrites
		errors   []string
	}{
		{"nil", nil, nil},
		{"empty", &mounts.MountRewrites{}, nil},
		{"deckhouse's renames", &mounts.MountRewrites{
			Groups: []mounts.GroupRewrite{
				g("kubevirt.io", "x.virtualization.deckhouse.io", "Prefixed"),
				g("cdi.kubevirt.io", "cdi.x.virtualization.deckhouse.io", "Prefixed"),
				g("clone.kubevirt.io", "clone.x.virtualization.deckhouse.io", ""),
			},
			MetadataKeyPrefixes: []mounts.PrefixRewrite{
				k("kubevirt.io/", "x.virtualization.deckhouse.io/"),
				k("cdi.kubevirt.io/", "cdi.x.virtualization.deckhouse.io/"),
			},
		}, nil},
		{"core group", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{g("", "x.io", ""), g("y.io", "", "")}},
			[]string{"FieldValueRequired spec.rewrites.groups[0].presented", "FieldValueRequired spec.rewrites.groups[1].target"}},
		{"groups Kubernetes serves", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{
			g("rbac.authorization.k8s.io", "x.io", ""), g("y.io", "apps", ""), g("k8s.io", "z.io", ""), g("w.io", "batch", "")}},
			[]string{"FieldValueInvalid spec.rewrites.groups[0].presented", "FieldValueInvalid spec.rewrites.groups[1].target",
				"FieldValueInvalid spec.rewrites.groups[2].presented", "FieldValueInvalid spec.rewrites.groups[3].target"}},
		{"this server's and kcp's groups", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{
			g("mounts.kcp.io", "x.io", ""), g("y.io", "tenancy.kcp.io", "")}},
			[]string{"FieldValueInvalid spec.rewrites.groups[0].presented", "FieldValueInvalid spec.rewrites.groups[1].target"}},
		{"not DNS subdomains", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{g("Kubevirt.io", "x_y.io", "")}},
			[]string{"FieldValueInvalid spec.rewrites.groups[0].presented", "FieldValueInvalid spec.rewrites.groups[0].target"}},
		{"presented equals target", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{g("a.io", "a.io", "")}},
			[]string{"FieldValueInvalid spec.rewrites.groups[0].target"}},
		{"two rules present one group", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{g("a.io", "b.io", ""), g("a.io", "c.io", "")}},
			[]string{"FieldValueDuplicate spec.rewrites.groups[1].presented"}},
		{"two groups onto one target, even with distinct kind prefixes", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{g("a.io", "c.io", "A"), g("b.io", "c.io", "AB")}},
			[]string{"FieldValueInvalid spec.rewrites.groups[1].target"}},
		{"chained rules", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{g("a.io", "b.io", ""), g("b.io", "c.io", "")}},
			[]string{"FieldValueInvalid spec.rewrites.groups[1].presented"}},
		{"a swap is chained too", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{g("a.io", "b.io", ""), g("b.io", "a.io", "")}},
			[]string{"FieldValueInvalid spec.rewrites.groups[0].presented", "FieldValueInvalid spec.rewrites.groups[1].presented"}},
		{"kind prefixes", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{
			g("a.io", "b.io", "prefixed"), g("c.io", "d.io", "My-"), g("e.io", "f.io", "X9"), g("g.io", "h.io", "Ü"), g("i.io", "j.io", "A"+strings.Repeat("b", MaxKindPrefixLength))}},
			[]string{"FieldValueInvalid spec.rewrites.groups[0].kindPrefix", "FieldValueInvalid spec.rewrites.groups[1].kindPrefix",
				"FieldValueInvalid spec.rewrites.groups[3].kindPrefix", "FieldValueTooLong spec.rewrites.groups[4].kindPrefix"}},
		{"renamed CRD names must fit 253 characters", &mounts.MountRewrites{Groups: []mounts.GroupRewrite{
			g("a.io", long(MaxRewriteGroupLength-183), ""), g(long(MaxRewriteGroupLength-183+1), "b.io", "")}},
			[]string{"FieldValueTooLong spec.rewrites.groups[1].presented"}},
		{"too many rules", &mounts.MountRewrites{Groups: make([]mounts.GroupRewrite, MaxRewriteRules+1)},
			[]string{"FieldValueTooMany spec.rewrites.groups"}},
		{"key prefixes: form", &mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{
			k("kubevirt.io", "x.io/"), k("", "y.io/"), k("a/b/", "z.io/"), k("UPPER.io/", "w.io/")}},
			[]string{"FieldValueInvalid spec.rewrites.metadataKeyPrefixes[0].presented", "FieldValueRequired spec.rewrites.metadataKeyPrefixes[1].presented",
				"FieldValueInvalid spec.rewrites.metadataKeyPrefixes[2].presented", "FieldValueInvalid spec.rewrites.metadataKeyPrefixes[3].presented"}},
		{"key prefixes of Kubernetes", &mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{
			k("kubernetes.io/", "x.io/"), k("y.io/", "node-role.kubernetes.io/"), k("k8s.io/", "z.io/")}},
			[]string{"FieldValueInvalid spec.rewrites.metadataKeyPrefixes[0].presented", "FieldValueInvalid spec.rewrites.metadataKeyPrefixes[1].target",
				"FieldValueInvalid spec.rewrites.metadataKeyPrefixes[2].presented"}},
		{"key prefix too long", &mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{k(strings.Repeat("a.", 127)+"/", "x.io/")}},
			[]string{"FieldValueTooLong spec.rewrites.metadataKeyPrefixes[0].presented"}},
		{"key prefixes overlap", &mounts.MountRewrites{MetadataKeyPrefixes: []mounts.PrefixRewrite{
			k("a.io/", "b.io/"), k("a.io/", "c.io/"), k("d.io/", "b.io/"), k("e.io/", "e.io/"), k("c.io/", "f.io/")}},
			[]string{"FieldValueInvalid spec.rewrites.metadataKeyPrefixes[3].target",
				"FieldValueInvalid spec.rewrites.metadataKeyPrefixes[1].presented",
				"FieldValueInvalid spec.rewrites.metadataKeyPrefixes[2].target",
				"FieldValueInvalid spec.rewrites.metadataKeyPrefixes[4].presented"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErrors(t, ValidateMount(withRewrites(tt.rewrites)()), tt.errors)
		})
	}
}

func TestRewritesOnlyForURLMounts(t *testing.T) {
	m := validWorkspaceMount(mounts.MountTypeWorkspace)
	m.Spec.Rewrites = &mounts.MountRewrites{Groups: []mounts.GroupRewrite{{Presented: "a.io", Target: "b.io"}}}
	expectErrors(t, ValidateMount(m), []string{"FieldValueForbidden spec.rewrites"})
	m.Spec.Rewrites = &mounts.MountRewrites{}
	expectErrors(t, ValidateMount(m), nil)
}
