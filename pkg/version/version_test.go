package version

import (
	"runtime/debug"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	basecompatibility "k8s.io/component-base/compatibility"
)

func TestFromBuildInfo(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-11-22T10:00:00Z"}, {Key: "vcs.modified", Value: modified}}
	}
	for _, c := range []struct {
		name                   string
		bi                     *debug.BuildInfo
		version, commit, state string
	}{
		{"no build info", nil, "v0.0.0-devel", "", ""},
		{"go run", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "v0.0.0-devel", "", ""},
		{"go install @tag", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}}, "v0.3.1", "", ""},
		{"go build in a clone", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261122100000-0123456789ab+dirty"}, Settings: vcs("true")},
			"v0.0.0-20261122100000-0123456789ab+dirty", rev, "dirty"},
		{"revision only", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("false")}, "v0.0.0-devel+0123456789ab", rev, "clean"},
		{"revision only, modified", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")}, "v0.0.0-devel+0123456789ab.dirty", rev, "dirty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			info := apimachineryversion.Info{GitVersion: "v0.0.0-master+$Format:%H$", GitCommit: "$Format:%H$"}
			fromBuildInfo(&info, c.bi)
			if info.GitVersion != c.version || info.GitCommit != c.commit || info.GitTreeState != c.state {
				t.Errorf("got %q %q %q, want %q %q %q", info.GitVersion, info.GitCommit, info.GitTreeState, c.version, c.commit, c.state)
			}
			// kubectl version parses the server's gitVersion as a semantic version.
			if _, err := utilversion.ParseSemantic(info.GitVersion); err != nil {
				t.Errorf("kubectl cannot parse %q: %v", info.GitVersion, err)
			}
		})
	}
}

func TestEffectiveKeepsEmulationVersion(t *testing.T) {
	base := basecompatibility.NewEffectiveVersionFromString("1.37", "1.36", "1.36")
	base.SetEmulationVersion(utilversion.MajorMinor(1, 36))
	info := Effective(base).Info()
	// Test binaries carry no link-time version and no VCS information.
	if info.GitVersion != develVersion || info.Major != "0" || info.Minor != "0" {
		t.Errorf("version %q (%s.%s), want %s (0.0)", info.GitVersion, info.Major, info.Minor, develVersion)
	}
	if info.EmulationMajor != "1" || info.EmulationMinor != "36" {
		t.Errorf("emulation version %s.%s, want 1.36", info.EmulationMajor, info.EmulationMinor)
	}
	if Effective(base).BinaryVersion().String() != base.BinaryVersion().String() {
		t.Error("the binary version of the API machinery changed")
	}
}
