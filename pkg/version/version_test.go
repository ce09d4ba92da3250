package version

import (
	"runtime/debug"
	"strings"
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
	// Test binaries carry no link-time version and no VCS information; kubectl 1.37 sees no
	// skew against 1.37.
	if !strings.HasPrefix(info.GitVersion, "v1.37.") || !strings.HasSuffix(info.GitVersion, "+"+BuildMetadataPrefix+develVersion) || info.Major != "1" || info.Minor != "37" {
		t.Errorf("version %q (%s.%s), want v1.37.x+%s%s (1.37)", info.GitVersion, info.Major, info.Minor, BuildMetadataPrefix, develVersion)
	}
	if info.EmulationMajor != "1" || info.EmulationMinor != "36" {
		t.Errorf("emulation version %s.%s, want 1.36", info.EmulationMajor, info.EmulationMinor)
	}
	if Effective(base).BinaryVersion().String() != base.BinaryVersion().String() {
		t.Error("the binary version of the API machinery changed")
	}
}

func TestServer(t *testing.T) {
	for project, want := range map[string]string{
		"v0.1.0":                          "v1.37.2+mount-apiserver-v0.1.0",
		"v0.1.0-dev":                      "v1.37.2+mount-apiserver-v0.1.0-dev",
		"v0.0.0-devel+0123456789ab.dirty": "v1.37.2+mount-apiserver-v0.0.0-devel.0123456789ab.dirty",
		"v0.0.0-20261122100000-0123456789ab+dirty": "v1.37.2+mount-apiserver-v0.0.0-20261122100000-0123456789ab.dirty",
		"v0.2.0_rc/1": "v1.37.2+mount-apiserver-v0.2.0-rc-1",
	} {
		info := Server("v1.37.2", apimachineryversion.Info{GitVersion: project, GitCommit: "abc", GitTreeState: "clean"})
		if info.GitVersion != want || info.Major != "1" || info.Minor != "37" || info.GitCommit != "abc" || info.GitTreeState != "clean" {
			t.Errorf("%s: %+v, want %s (1.37)", project, info, want)
		}
		// kubectl version parses the server's gitVersion as a semantic version.
		if v, err := utilversion.ParseSemantic(info.GitVersion); err != nil || v.Major() != 1 || v.Minor() != 37 || v.Patch() != 2 {
			t.Errorf("kubectl reads %q as %v, %v", info.GitVersion, v, err)
		}
	}
}

func TestKubernetes(t *testing.T) {
	binary := utilversion.MajorMinor(1, 37)
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "v1.37.0"},
		{"apiserver v0.37.2", &debug.BuildInfo{Deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.37.5"}, {Path: "k8s.io/apiserver", Version: "v0.37.2"}}}, "v1.37.2"},
		{"replaced", &debug.BuildInfo{Deps: []*debug.Module{{Path: "k8s.io/apiserver", Version: "v0.37.2", Replace: &debug.Module{Version: "v0.37.3"}}}}, "v1.37.3"},
		{"another minor", &debug.BuildInfo{Deps: []*debug.Module{{Path: "k8s.io/apiserver", Version: "v0.38.1"}}}, "v1.37.0"},
	} {
		if got := kubernetes(binary, c.bi); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	// This test binary's own build information names k8s.io/apiserver.
	if got := Kubernetes(nil); !strings.HasPrefix(got, "v1.") {
		t.Errorf("Kubernetes(nil) = %s", got)
	}
}
