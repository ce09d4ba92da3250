package integration

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// realKubectl is the kubectl of hack/kube-binaries.sh, of the Kubernetes version this server
// is built with.
func realKubectl(t *testing.T) string {
	t.Helper()
	dir, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "kubectl")
}

// serverVersion reads /version without credentials.
func serverVersion(t *testing.T, s *framework.Server) apimachineryversion.Info {
	t.Helper()
	c, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, c, s.URL+"/version")
	var info apimachineryversion.Info
	if err := json.Unmarshal([]byte(body), &info); code != http.StatusOK || err != nil {
		t.Fatalf("/version: %d %v %s", code, err, body)
	}
	return info
}

// TestKubectlVersion runs the real kubectl version against the binary as go build makes it,
// and as a release build with the version set at link time.
func TestKubectlVersion(t *testing.T) {
	kubectl := realKubectl(t)
	for _, c := range []struct {
		name string
		bin  framework.Binary
		// want ends the version (the Kubernetes version the server builds on, with the
		// project's as build metadata); empty takes whatever the build information gives.
		want, major, minor string
	}{
		{name: "go build", bin: framework.BuildBinary(t)},
		{name: "ldflags", bin: framework.BuildBinaryWith(t, "-ldflags=-X github.com/kcp-dev/mount-apiserver/pkg/version.gitVersion=v0.4.2-rc.1"), want: "+mount-apiserver-v0.4.2-rc.1", major: "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.bin.Start(t, t.TempDir(), "--status-controller=false")
			info := serverVersion(t, p.Server)
			if c.want != "" && (!strings.HasSuffix(info.GitVersion, c.want) || info.Major != c.major) {
				t.Errorf("/version: %q (%s.%s), want ...%q (%s.x)", info.GitVersion, info.Major, info.Minor, c.want, c.major)
			}
			if _, err := utilversion.ParseSemantic(info.GitVersion); err != nil {
				t.Errorf("/version's gitVersion %q is no semantic version: %v", info.GitVersion, err)
			}
			// The API machinery's version stays what it is.
			if info.EmulationMajor != "1" || info.EmulationMinor == "" {
				t.Errorf("emulation version %s.%s, want Kubernetes 1.x", info.EmulationMajor, info.EmulationMinor)
			}
			out, err := exec.Command(kubectl, "--kubeconfig", p.Kubeconfig, "version").CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl version: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "Server Version: "+info.GitVersion+"\n") {
				t.Errorf("kubectl version does not print the server's version %q:\n%s", info.GitVersion, out)
			}
			t.Logf("kubectl version:\n%s", out)
		})
	}
}
