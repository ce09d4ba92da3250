package version

import (
	"runtime/debug"
	"strconv"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	basecompatibility "k8s.io/component-base/compatibility"
	baseversion "k8s.io/component-base/version"
)

// Set at link time, as Kubernetes sets its own in k8s.io/component-base/version (which
// must stay Kubernetes' version: the API machinery derives its feature gates from it):
//
//	go build -ldflags "-X github.com/kcp-dev/mount-apiserver/pkg/version.gitVersion=v0.1.0 \
//	  -X github.com/kcp-dev/mount-apiserver/pkg/version.gitCommit=$(git rev-parse HEAD)" ./cmd/mount-apiserver
var (
	gitVersion   string
	gitCommit    string
	gitTreeState string
	buildDate    string
)

// develVersion is reported when neither the linker nor the Go build information gives a
// version, as under go run.
const develVersion = "v0.0.0-devel"

// Get returns the version of this binary: gitVersion if it was set at link time; otherwise the
// main module's version from the Go build information (a tag or pseudo-version under go build
// or go install), or the VCS revision the binary was built from. Major and Minor are those of
// the version.
func Get() apimachineryversion.Info {
	info := baseversion.Get()
	if gitVersion != "" {
		info.GitVersion, info.GitCommit, info.GitTreeState, info.BuildDate = gitVersion, gitCommit, gitTreeState, buildDate
	} else {
		bi, _ := debug.ReadBuildInfo()
		fromBuildInfo(&info, bi)
	}
	info.Major, info.Minor = "", ""
	if v, err := utilversion.ParseSemantic(info.GitVersion); err == nil {
		info.Major, info.Minor = strconv.FormatUint(uint64(v.Major()), 10), strconv.FormatUint(uint64(v.Minor()), 10)
	}
	return info
}

// fromBuildInfo fills in the version, commit, tree state and date from the Go build
// information, which may be nil.
func fromBuildInfo(info *apimachineryversion.Info, bi *debug.BuildInfo) {
	info.GitVersion, info.GitCommit, info.GitTreeState, info.BuildDate = develVersion, "", "", ""
	if bi == nil {
		return
	}
	var revision, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		case "vcs.time":
			info.BuildDate = s.Value
		}
	}
	info.GitCommit = revision
	switch modified {
	case "true":
		info.GitTreeState = "dirty"
	case "false":
		info.GitTreeState = "clean"
	}
	if _, err := utilversion.ParseSemantic(bi.Main.Version); err == nil {
		info.GitVersion = bi.Main.Version
		return
	}
	if revision != "" {
		// Build metadata, unlike a pre-release, may be any hexadecimal string.
		short := revision
		if len(short) > 12 {
			short = short[:12]
		}
		info.GitVersion = develVersion + "+" + short
		if modified == "true" {
			info.GitVersion += ".dirty"
		}
	}
}

// Effective reports Server(...) as the version of effective: the Kubernetes version of its
// binary version with Get() as build metadata. It keeps effective's emulation and compatibility
// versions, which describe the Kubernetes API machinery.
func Effective(effective basecompatibility.EffectiveVersion) basecompatibility.EffectiveVersion {
	return effectiveVersion{EffectiveVersion: effective, info: Server(Kubernetes(effective.BinaryVersion()), Get())}
}

type effectiveVersion struct {
	basecompatibility.EffectiveVersion
	info apimachineryversion.Info
}

func (v effectiveVersion) Info() *apimachineryversion.Info {
	info := v.info
	if base := v.EffectiveVersion.Info(); base != nil {
		info.EmulationMajor, info.EmulationMinor = base.EmulationMajor, base.EmulationMinor
		info.MinCompatibilityMajor, info.MinCompatibilityMinor = base.MinCompatibilityMajor, base.MinCompatibilityMinor
	}
	return &info
}
