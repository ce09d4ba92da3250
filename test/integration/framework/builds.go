package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// builds holds the commands this process built for its tests, each built at most once, in one
// temporary directory that RemoveBuilds deletes. Test processes that left their binaries behind
// (70-130 MiB each) once filled a CI machine's disk mid-run.
var builds = struct {
	sync.Mutex
	dir  string
	bins map[string]*build
}{bins: map[string]*build{}}

type build struct {
	once sync.Once
	path string
	err  error
}

// buildCommand builds the main package pkg into this process's build directory as name.
func buildCommand(pkg, name string) (string, error) {
	builds.Lock()
	b, ok := builds.bins[name]
	if !ok {
		b = &build{}
		builds.bins[name] = b
	}
	builds.Unlock()
	b.once.Do(func() {
		builds.Lock()
		if builds.dir == "" {
			dir, err := os.MkdirTemp("", "mount-apiserver-builds-")
			if err != nil {
				builds.Unlock()
				b.err = fmt.Errorf("creating the build directory: %w", err)
				return
			}
			builds.dir = dir
		}
		out := filepath.Join(builds.dir, name)
		builds.Unlock()
		if output, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, output)
			return
		}
		b.path = out
	})
	return b.path, b.err
}

// RemoveBuilds deletes the binaries this process built; later builds start afresh. Call it when
// the process's tests or benchmarks are done (Main does).
func RemoveBuilds() {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
	builds.dir = ""
	builds.bins = map[string]*build{}
}

// Main runs a test package's tests and removes what they built: a package's TestMain is
// os.Exit(framework.Main(m)).
func Main(m *testing.M) int {
	defer RemoveBuilds()
	return m.Run()
}
