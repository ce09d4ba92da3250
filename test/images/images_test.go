package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The images' user and the names the bundles in artifacts/ deploy.
const (
	uid      = 65532
	registry = "ghcr.io/kcp-dev"
)

var names = []string{"mount-apiserver", "mount-agent"}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// version is hack/VERSION's, the tag build-images.sh gives by default.
func version(t *testing.T) string {
	t.Helper()
	v, err := os.ReadFile(filepath.Join(repoRoot(), "hack", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(v))
}

// The output of one run of hack/build-images.sh, shared by the tests of one test binary and
// removed by TestMain: building the two static binaries is what costs.
var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// built runs hack/build-images.sh once, as a user would, into a temporary OUTPUT_DIR.
func built(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "build-images-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command(filepath.Join(repoRoot(), "hack", "build-images.sh"))
		cmd.Env = append(os.Environ(), "OUTPUT_DIR="+buildDir)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("hack/build-images.sh: %w\n%s", err, out)
			return
		}
		// How long it takes is worth seeing in CI's log, but it is no assertion.
		fmt.Printf("hack/build-images.sh took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// revision is the commit build-images.sh labels the images with.
func revision(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", repoRoot(), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// config is the part of an image's configuration (OCI image-spec config.json) the tests read.
type config struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		Env          []string            `json:"Env"`
		WorkingDir   string              `json:"WorkingDir"`
		Labels       map[string]string   `json:"Labels"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Volumes      map[string]struct{} `json:"Volumes"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// archive is a docker-archive tarball as docker load reads it.
type archive struct {
	files    map[string][]byte
	manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
}

func readArchive(t *testing.T, file string) archive {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := archive{files: map[string][]byte{}}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			t.Errorf("%s: entry %s of type %c; docker load reads regular files", file, hdr.Name, hdr.Typeflag)
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		a.files[hdr.Name] = data
	}
	if err := json.Unmarshal(a.files["manifest.json"], &a.manifest); err != nil {
		t.Fatalf("%s: manifest.json: %v", file, err)
	}
	return a
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// entry is a file of an image's filesystem, from its layers.
type entry struct {
	hdr  *tar.Header
	data []byte
}

// unpack reads a gzip-compressed layer and checks its uncompressed digest against diffID.
func unpack(t *testing.T, compressed []byte, diffID string, into map[string]entry) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if got := "sha256:" + sha256Hex(raw); got != diffID {
		t.Errorf("layer's uncompressed digest %s, the config's diff_id %s", got, diffID)
	}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		p := path.Clean("/" + hdr.Name)
		if p != "/"+strings.TrimSuffix(hdr.Name, "/") {
			t.Errorf("layer entry %q is not a clean relative path", hdr.Name)
		}
		into[p] = entry{hdr: hdr, data: data}
	}
}

// image is one image read from its docker-archive tarball.
type image struct {
	name   string
	tags   []string
	config config
	files  map[string]entry
}

func readImage(t *testing.T, dir, name string) image {
	t.Helper()
	a := readArchive(t, filepath.Join(dir, "images", name+".tar"))
	if len(a.manifest) != 1 {
		t.Fatalf("%s.tar: manifest.json has %d images, want 1", name, len(a.manifest))
	}
	m := a.manifest[0]
	rawConfig, ok := a.files[m.Config]
	if !ok {
		t.Fatalf("%s.tar: config %s missing", name, m.Config)
	}
	if want := "sha256:" + sha256Hex(rawConfig); m.Config != want {
		t.Errorf("%s.tar: config file %s, its digest is %s", name, m.Config, want)
	}
	img := image{name: name, tags: m.RepoTags, files: map[string]entry{}}
	if err := json.Unmarshal(rawConfig, &img.config); err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != len(img.config.RootFS.DiffIDs) || len(m.Layers) == 0 {
		t.Fatalf("%s.tar: %d layers, %d diff_ids", name, len(m.Layers), len(img.config.RootFS.DiffIDs))
	}
	for i, l := range m.Layers {
		data, ok := a.files[l]
		if !ok {
			t.Fatalf("%s.tar: layer %s missing", name, l)
		}
		unpack(t, data, img.config.RootFS.DiffIDs[i], img.files)
	}
	return img
}

// TestImageArchives reads each image's tarball as docker load does (manifest.json with
// RepoTags, the config and the layers it names, digests as named) and checks the image:
// named as the bundles deploy it, its entrypoint the static binary (no shell), the non-root
// user 65532 with a passwd entry, OCI labels of version and revision, CA certificates.
func TestImageArchives(t *testing.T) {
	dir := built(t)
	v, rev := version(t), revision(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			img := readImage(t, dir, name)
			if want := []string{registry + "/" + name + ":" + v}; !slices.Equal(img.tags, want) {
				t.Errorf("RepoTags %v, want %v", img.tags, want)
			}
			c := img.config
			if c.OS != "linux" || c.Architecture != runtime.GOARCH {
				t.Errorf("platform %s/%s, want linux/%s", c.OS, c.Architecture, runtime.GOARCH)
			}
			bin := "/usr/local/bin/" + name
			if !slices.Equal(c.Config.Entrypoint, []string{bin}) || len(c.Config.Cmd) != 0 {
				t.Errorf("entrypoint %q, cmd %q; want [%s] and none", c.Config.Entrypoint, c.Config.Cmd, bin)
			}
			if c.Config.User != "65532:65532" {
				t.Errorf("user %q, want 65532:65532 (the bundles' runAsUser)", c.Config.User)
			}
			if len(c.Config.Volumes) != 0 {
				t.Errorf("volumes %v: a runtime would create them; the bundles mount what the binary writes", c.Config.Volumes)
			}
			for label, want := range map[string]string{
				"org.opencontainers.image.title":    name,
				"org.opencontainers.image.version":  v,
				"org.opencontainers.image.revision": rev,
				"org.opencontainers.image.source":   "https://github.com/kcp-dev/mount-apiserver",
				"org.opencontainers.image.licenses": "Apache-2.0",
			} {
				if got := c.Config.Labels[label]; got != want {
					t.Errorf("label %s=%q, want %q", label, got, want)
				}
			}
			if _, err := time.Parse(time.RFC3339, c.Config.Labels["org.opencontainers.image.created"]); err != nil {
				t.Errorf("label org.opencontainers.image.created: %v", err)
			}

			// The binary, static: it needs no loader and no libc, which the image does not have.
			b, ok := img.files[bin]
			if !ok || b.hdr.Typeflag != tar.TypeReg || b.hdr.Mode&0o111 == 0 || b.hdr.Uid != 0 {
				t.Fatalf("%s is not a root-owned executable in the image", bin)
			}
			if bytes.Contains(b.data, []byte("/lib64/ld-linux")) || bytes.Contains(b.data, []byte("/lib/ld-linux")) {
				t.Errorf("%s names a dynamic loader: not a static binary", bin)
			}
			var executables []string
			for p, e := range img.files {
				if e.hdr.Typeflag == tar.TypeReg && e.hdr.Mode&0o111 != 0 {
					executables = append(executables, p)
				}
				// Only the user's own directories are theirs to write.
				if e.hdr.Uid != 0 && e.hdr.Uid != uid {
					t.Errorf("%s owned by %d", p, e.hdr.Uid)
				}
			}
			if !slices.Equal(executables, []string{bin}) {
				t.Errorf("executables %v, want only %s (no shell, nothing else to run)", executables, bin)
			}
			if !bytes.Contains(img.files["/etc/passwd"].data, []byte("nonroot:x:65532:65532:")) {
				t.Errorf("/etc/passwd has no entry for 65532: %q", img.files["/etc/passwd"].data)
			}
			certs := img.files["/etc/ssl/certs/ca-certificates.crt"].data
			if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(certs) {
				t.Error("/etc/ssl/certs/ca-certificates.crt holds no certificate")
			}
			if home := img.files["/home/nonroot"]; home.hdr == nil || home.hdr.Uid != uid || c.Config.WorkingDir != "/home/nonroot" {
				t.Errorf("home directory of 65532 missing or not the working directory (%q)", c.Config.WorkingDir)
			}
		})
	}
}

// TestOCILayouts reads each OCI image layout as skopeo (oci:<dir>:<tag>) and crane push read
// it: the index names the image by tag (org.opencontainers.image.ref.name) and by full name
// (io.containerd.image.name); every blob is there under its digest, with OCI media types; and
// it is the image of the tarball (same config).
func TestOCILayouts(t *testing.T) {
	dir := built(t)
	v := version(t)
	type descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Annotations map[string]string `json:"annotations"`
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			root := filepath.Join(dir, "images", "oci", name)
			blob := func(d descriptor) []byte {
				t.Helper()
				algo, hexDigest, _ := strings.Cut(d.Digest, ":")
				data, err := os.ReadFile(filepath.Join(root, "blobs", algo, hexDigest))
				if err != nil {
					t.Fatal(err)
				}
				if algo != "sha256" || sha256Hex(data) != hexDigest || int64(len(data)) != d.Size {
					t.Fatalf("blob %s: digest or size (%d, want %d) do not match", d.Digest, len(data), d.Size)
				}
				return data
			}
			layoutFile, err := os.ReadFile(filepath.Join(root, "oci-layout"))
			if err != nil {
				t.Fatal(err)
			}
			var lf struct {
				Version string `json:"imageLayoutVersion"`
			}
			if err := json.Unmarshal(layoutFile, &lf); err != nil || lf.Version != "1.0.0" {
				t.Fatalf("oci-layout %s: %v", layoutFile, err)
			}
			rawIndex, err := os.ReadFile(filepath.Join(root, "index.json"))
			if err != nil {
				t.Fatal(err)
			}
			var index struct {
				SchemaVersion int          `json:"schemaVersion"`
				Manifests     []descriptor `json:"manifests"`
			}
			if err := json.Unmarshal(rawIndex, &index); err != nil {
				t.Fatal(err)
			}
			if index.SchemaVersion != 2 || len(index.Manifests) != 1 {
				t.Fatalf("index.json: schemaVersion %d, %d manifests; want 2 and one", index.SchemaVersion, len(index.Manifests))
			}
			md := index.Manifests[0]
			if md.MediaType != "application/vnd.oci.image.manifest.v1+json" {
				t.Errorf("manifest media type %s", md.MediaType)
			}
			if got := md.Annotations["org.opencontainers.image.ref.name"]; got != v {
				t.Errorf("ref.name %q, want the tag %q", got, v)
			}
			if got, want := md.Annotations["io.containerd.image.name"], registry+"/"+name+":"+v; got != want {
				t.Errorf("io.containerd.image.name %q, want %q", got, want)
			}
			var manifest struct {
				MediaType string       `json:"mediaType"`
				Config    descriptor   `json:"config"`
				Layers    []descriptor `json:"layers"`
			}
			if err := json.Unmarshal(blob(md), &manifest); err != nil {
				t.Fatal(err)
			}
			if manifest.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
				t.Errorf("config media type %s", manifest.Config.MediaType)
			}
			blob(manifest.Config)
			for _, l := range manifest.Layers {
				if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
					t.Errorf("layer media type %s", l.MediaType)
				}
				blob(l)
			}
			a := readArchive(t, filepath.Join(dir, "images", name+".tar"))
			if len(a.manifest) != 1 || a.manifest[0].Config != manifest.Config.Digest {
				t.Errorf("the layout's config %s is not the tarball's", manifest.Config.Digest)
			}
		})
	}
}

// rootfs writes an image's files into a directory to chroot into, owned as in the image. As
// a pod of the bundles has them, the root filesystem is not writable by the user: only the
// volumes, given as dirs, are.
func rootfs(t *testing.T, img image, volumes ...string) string {
	t.Helper()
	root := t.TempDir()
	paths := make([]string, 0, len(img.files))
	for p := range img.files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		e := img.files[p]
		target := filepath.Join(root, p)
		mode := fs.FileMode(e.hdr.Mode) & fs.ModePerm
		owner := e.hdr.Uid
		if slices.Contains(volumes, p) {
			owner = uid
		} else if owner == uid {
			// Read-only for the user, as a read-only root filesystem is.
			owner = 0
			mode = 0o755
		}
		switch e.hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, mode); err != nil {
				t.Fatal(err)
			}
			// tmp's sticky bit.
			if e.hdr.Mode&0o1000 != 0 {
				mode |= fs.ModeSticky
			}
		case tar.TypeReg:
			if err := os.WriteFile(target, e.data, mode); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: unexpected type %c", p, e.hdr.Typeflag)
		}
		if err := os.Chown(target, owner, owner); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(target, mode); err != nil {
			t.Fatal(err)
		}
	}
	// The chroot's root itself (the temporary directory is the test user's).
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// inImage returns a command that runs the image's entrypoint with args as the container runtime
// would: in the image's files (chroot), as its user, with its environment and working directory.
func inImage(t *testing.T, img image, root string, args ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("running the image's binary in its own files needs root (chroot); the tests run as root")
	}
	ep := img.config.Config.Entrypoint
	cmd := exec.Command(filepath.Join(root, ep[0]), append(ep[1:], args...)...)
	cmd.Path = ep[0] // resolved inside the chroot
	cmd.Dir = img.config.Config.WorkingDir
	cmd.Env = img.config.Config.Env
	user, group, _ := strings.Cut(img.config.Config.User, ":")
	u, _ := strconv.Atoi(user)
	g, _ := strconv.Atoi(group)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: uint32(u), Gid: uint32(g)},
		// Nothing is left behind if the test binary dies.
		Pdeathsig: syscall.SIGKILL,
	}
	return cmd
}

// versionArgs is how each binary prints its version.
var versionArgs = map[string][]string{
	"mount-apiserver": {"--version"},
	"mount-agent":     {"version"},
}

// TestImageBinariesRun runs each image's binary from the image's own files as its user and
// checks that it prints the version build-images.sh stamped into it.
func TestImageBinariesRun(t *testing.T) {
	dir := built(t)
	v := version(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			img := readImage(t, dir, name)
			root := rootfs(t, img)
			args := versionArgs[name]
			command := name + " " + strings.Join(args, " ")
			out, err := inImage(t, img, root, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s in the image: %v\n%s", command, err, out)
			}
			if !strings.Contains(string(out), v) {
				t.Errorf("%s printed %q, not the version %s", command, out, v)
			}
		})
	}
}

// TestServerImageReadOnlyRoot runs the server's image as artifacts/apiservice's Deployment does
// (its --root-directory on a volume, /tmp a volume, the rest read-only for the user) until it
// answers /readyz with its generated certificate: the image has what the server needs to start
// (embedded etcd, certificates, admin kubeconfig) and writes nowhere else.
func TestServerImageReadOnlyRoot(t *testing.T) {
	img := readImage(t, built(t), "mount-apiserver")
	const dataDir = "/var/lib/mount-apiserver"
	root := rootfs(t, img, dataDir, "/tmp")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := inImage(t, img, root, "--root-directory="+dataDir, "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("mount-apiserver did not stop within a minute of SIGTERM")
		}
	})

	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case err := <-exited:
			t.Fatalf("mount-apiserver exited: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("mount-apiserver not ready within 2 minutes:\n%s", logs.String())
		}
		if ready(filepath.Join(root, dataDir, "pki", "ca.crt"), port) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The version build-images.sh stamped, as kubectl version reads it (no authentication).
	var info struct {
		GitVersion string `json:"gitVersion"`
		GitCommit  string `json:"gitCommit"`
	}
	if err := getJSON(filepath.Join(root, dataDir, "pki", "ca.crt"), port, "/version", &info); err != nil {
		t.Fatal(err)
	}
	if v := version(t); !strings.Contains(info.GitVersion, v) || info.GitCommit != revision(t) {
		t.Errorf("/version says %q at %q, want %s at %s", info.GitVersion, info.GitCommit, v, revision(t))
	}
	// What it wrote is on the volume, the user's.
	for _, f := range []string{"admin.kubeconfig", "pki/ca.crt"} {
		if fi, err := os.Stat(filepath.Join(root, dataDir, f)); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uid {
			t.Errorf("%s/%s not written by the image's user: %v", dataDir, f, err)
		}
	}
}

// ready says whether the server answers /readyz with 200, verified against its generated CA.
func ready(caFile string, port int) bool {
	return getJSON(caFile, port, "/readyz", nil) == nil
}

// getJSON GETs path from the server on port, verified against its generated CA in caFile, and
// decodes the answer into into unless it is nil.
func getJSON(caFile string, port int, path string, into any) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://127.0.0.1:" + strconv.Itoa(port) + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(body, into)
}
