package version

import (
	"fmt"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	baseversion "k8s.io/component-base/version"
)

// BuildMetadataPrefix starts the build metadata of the server's version; the project's own
// version follows it: v1.37.2+mount-apiserver-v0.1.0.
const BuildMetadataPrefix = "mount-apiserver-"

// Kubernetes returns the version of Kubernetes this binary builds on: major and minor of the
// API machinery's binary version (nil: the one k8s.io/component-base was released with), the
// patch of the k8s.io/apiserver module it is built with (v0.<minor>.<patch>), 0 if the build
// information does not say.
func Kubernetes(binary *utilversion.Version) string {
	if binary == nil {
		v, err := utilversion.ParseGeneric(baseversion.DefaultKubeBinaryVersion)
		if err != nil {
			return "v" + baseversion.DefaultKubeBinaryVersion + ".0"
		}
		binary = v
	}
	bi, _ := debug.ReadBuildInfo()
	return kubernetes(binary, bi)
}

func kubernetes(binary *utilversion.Version, bi *debug.BuildInfo) string {
	var patch uint
	if bi != nil {
		for _, d := range bi.Deps {
			if d.Path != "k8s.io/apiserver" {
				continue
			}
			if d.Replace != nil {
				d = d.Replace
			}
			if v, err := utilversion.ParseSemantic(d.Version); err == nil && v.Major() == 0 && v.Minor() == binary.Minor() {
				patch = v.Patch()
			}
		}
	}
	return fmt.Sprintf("v%d.%d.%d", binary.Major(), binary.Minor(), patch)
}

var notInBuildMetadata = regexp.MustCompile(`[^0-9A-Za-z.-]+`)

// Server is what the server reports at /version, as kcp does: the Kubernetes version kube it
// builds on, whose major and minor kubectl compares with its own (0.0 warned of a skew on
// every call), with the project's version as build metadata. Commit, tree state and date are
// the project's.
func Server(kube string, project apimachineryversion.Info) apimachineryversion.Info {
	info := project
	// Build metadata is dot-separated [0-9A-Za-z-]: the project's own "+" becomes a dot.
	meta := notInBuildMetadata.ReplaceAllString(strings.ReplaceAll(project.GitVersion, "+", "."), "-")
	info.GitVersion = kube + "+" + BuildMetadataPrefix + meta
	info.Major, info.Minor = "", ""
	if v, err := utilversion.ParseSemantic(kube); err == nil {
		info.Major, info.Minor = strconv.FormatUint(uint64(v.Major()), 10), strconv.FormatUint(uint64(v.Minor()), 10)
	}
	return info
}

// String is what a command's --version or version prints: the project's version, the
// Kubernetes version it builds on, and the commit.
func String(command string) string {
	info := Get()
	s := fmt.Sprintf("%s %s (Kubernetes %s", command, info.GitVersion, Kubernetes(nil))
	if info.GitCommit != "" {
		s += ", commit " + info.GitCommit
		if info.GitTreeState == "dirty" {
			s += ", dirty"
		}
	}
	return s + ", " + info.GoVersion + " " + info.Platform + ")"
}
