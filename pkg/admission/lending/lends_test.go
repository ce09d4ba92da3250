package lending

import (
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// TestRewritesAreLent: renames decide what a mount's credentials do in the target (which
// group a caller's request writes), so a change of spec.rewrites is checked like a new mount.
func TestRewritesAreLent(t *testing.T) {
	base := mounts.MountSpec{Type: mounts.MountTypeURL, Rewrites: &mounts.MountRewrites{
		Groups:              []mounts.GroupRewrite{{Presented: "a.io", Target: "b.io", KindPrefix: "P"}},
		MetadataKeyPrefixes: []mounts.PrefixRewrite{{Presented: "a.io/", Target: "b.io/"}},
	}}
	changes := map[string]func(*mounts.MountSpec){
		"added":                 func(s *mounts.MountSpec) { s.Rewrites = nil },
		"group target":          func(s *mounts.MountSpec) { s.Rewrites.Groups[0].Target = "c.io" },
		"kind prefix":           func(s *mounts.MountSpec) { s.Rewrites.Groups[0].KindPrefix = "" },
		"key prefix":            func(s *mounts.MountSpec) { s.Rewrites.MetadataKeyPrefixes[0].Target = "c.io/" },
		"key prefix rule added": func(s *mounts.MountSpec) { s.Rewrites.MetadataKeyPrefixes = nil },
	}
	for name, change := range changes {
		changed := base.DeepCopy()
		change(changed)
		if apiequality.Semantic.DeepEqual(Lends(&base), Lends(changed)) {
			t.Errorf("%s: a change of spec.rewrites is not a change of what the mount lends", name)
		}
	}
}
