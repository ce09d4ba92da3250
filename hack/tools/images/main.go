package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The non-root user of distroless' "nonroot" images, which the bundles' securityContext names.
const (
	uid  = 65532
	home = "/home/nonroot"
	// binDir holds the binary; the entrypoint names it by its full path.
	binDir = "/usr/local/bin"
)

// image is what differs between the two images.
type image struct {
	name        string
	description string
	// ports the binary listens on by default, as the image's ExposedPorts.
	ports []string
	// dirs are created owned by the non-root user, for volumes mounted there: a runtime copies
	// an image directory's owner into a new empty volume (docker's named volumes).
	dirs []string
}

var images = map[string]image{
	"mount-apiserver": {
		name:        "mount-apiserver",
		description: "Serves the mounts.kcp.io API: remote Kubernetes clusters and kcp workspaces behind one API",
		ports:       []string{"6443/tcp"},
		// The bundle's --root-directory.
		dirs: []string{"/var/lib/mount-apiserver"},
	},
	"mount-agent": {
		name:        "mount-agent",
		description: "Opens a Mount's reverse tunnel to mount-apiserver, for a cluster the server cannot reach",
	},
}

type options struct {
	binDir, outputDir, registry, version, revision, source, licenses, caBundle, arch string
	created                                                                          int64
	names                                                                            []string
}

func main() {
	var o options
	var names string
	flag.StringVar(&o.binDir, "bin-dir", "", "Directory of the static linux binaries, named as the images.")
	flag.StringVar(&o.outputDir, "output-dir", "", "Directory to write <name>.tar and oci/<name>/ into.")
	flag.StringVar(&o.registry, "registry", "ghcr.io/kcp-dev", "Repository prefix of the image names.")
	flag.StringVar(&o.version, "version", "", "Version: the image tag and the org.opencontainers.image.version label.")
	flag.StringVar(&o.revision, "revision", "", "Git commit of the sources (org.opencontainers.image.revision).")
	flag.StringVar(&o.source, "source", "https://github.com/kcp-dev/mount-apiserver", "URL of the sources (org.opencontainers.image.source).")
	flag.StringVar(&o.licenses, "licenses", "", "SPDX license expression (org.opencontainers.image.licenses); left out when empty.")
	flag.StringVar(&o.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM file of the CA certificates to install as /etc/ssl/certs/ca-certificates.crt.")
	flag.StringVar(&o.arch, "arch", "", "GOARCH of the binaries.")
	flag.Int64Var(&o.created, "created", 0, "Creation time in Unix seconds, of the image and its files (reproducible builds: the commit's time).")
	flag.StringVar(&names, "images", "mount-apiserver,mount-agent", "Images to assemble, comma-separated.")
	flag.Parse()
	o.names = strings.Split(names, ",")
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	for flagName, v := range map[string]string{"bin-dir": o.binDir, "output-dir": o.outputDir, "version": o.version, "revision": o.revision, "arch": o.arch} {
		if v == "" {
			return fmt.Errorf("--%s is required", flagName)
		}
	}
	created := time.Unix(o.created, 0).UTC()
	certs, err := os.ReadFile(o.caBundle)
	if err != nil {
		return fmt.Errorf("reading the CA certificates (install Debian's ca-certificates, or name a bundle with --ca-bundle): %w", err)
	}
	if !bytes.Contains(certs, []byte("-----BEGIN CERTIFICATE-----")) {
		return fmt.Errorf("%s holds no PEM certificate", o.caBundle)
	}
	base, err := newLayer(created, baseFiles(certs))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(o.outputDir, "oci"), 0o755); err != nil {
		return err
	}
	for _, n := range o.names {
		spec, ok := images[n]
		if !ok {
			return fmt.Errorf("unknown image %q", n)
		}
		ref, err := name.NewTag(o.registry+"/"+spec.name+":"+o.version, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("image name of %s with version %q: %w", n, o.version, err)
		}
		img, err := build(o, spec, base, created)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if err := write(o.outputDir, spec.name, ref, img); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%s@%s\n  %s\n  %s\n", ref, digest, filepath.Join(o.outputDir, spec.name+".tar"), filepath.Join(o.outputDir, "oci", spec.name))
	}
	return nil
}

// build assembles one image: the shared base layer, then the binary.
func build(o options, spec image, base v1.Layer, created time.Time) (v1.Image, error) {
	bin, err := os.ReadFile(filepath.Join(o.binDir, spec.name))
	if err != nil {
		return nil, err
	}
	files := []file{dir("usr/", 0o755, 0), dir("usr/local/", 0o755, 0), dir("usr/local/bin/", 0o755, 0)}
	for _, d := range spec.dirs {
		files = append(files, parents(d)...)
		files = append(files, dir(strings.TrimPrefix(d, "/")+"/", 0o700, uid))
	}
	files = append(files, regular(strings.TrimPrefix(binDir, "/")+"/"+spec.name, 0o755, bin))
	app, err := newLayer(created, files)
	if err != nil {
		return nil, err
	}

	labels := map[string]string{
		"org.opencontainers.image.title":       spec.name,
		"org.opencontainers.image.description": spec.description,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	if o.licenses != "" {
		labels["org.opencontainers.image.licenses"] = o.licenses
	}
	cfg := v1.Config{
		Entrypoint: []string{binDir + "/" + spec.name},
		User:       fmt.Sprintf("%d:%d", uid, uid),
		WorkingDir: home,
		Env:        []string{"PATH=" + binDir, "HOME=" + home},
		Labels:     labels,
	}
	if len(spec.ports) > 0 {
		cfg.ExposedPorts = map[string]struct{}{}
		for _, p := range spec.ports {
			cfg.ExposedPorts[p] = struct{}{}
		}
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	by := "hack/build-images.sh"
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: by + ": /etc/passwd, /etc/group, CA certificates, " + home + ", /tmp", Comment: "base"}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: by + ": " + binDir + "/" + spec.name}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.Created = v1.Time{Time: created}
	cf.Author = o.source
	cf.OS, cf.Architecture = "linux", o.arch
	return mutate.ConfigFile(img, cf)
}

// write writes img as <out>/<name>.tar (docker's archive format, with its name in RepoTags)
// and as the OCI image layout <out>/oci/<name>/, named by the annotations containerd, skopeo
// and crane read.
func write(out, imageName string, ref name.Tag, img v1.Image) error {
	tarPath := filepath.Join(out, imageName+".tar")
	tmp := tarPath + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return err
	}
	if err := os.Rename(tmp, tarPath); err != nil {
		return err
	}
	dir := filepath.Join(out, "oci", imageName)
	// A layout's index.json grows with every AppendImage: start from an empty one.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.String(),
	}))
}

// file is one entry of a layer.
type file struct {
	hdr  tar.Header
	data []byte
}

func dir(path string, mode int64, owner int) file {
	return file{hdr: tar.Header{Typeflag: tar.TypeDir, Name: path, Mode: mode, Uid: owner, Gid: owner}}
}

func regular(path string, mode int64, data []byte) file {
	return file{hdr: tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: mode, Size: int64(len(data))}, data: data}
}

// parents returns the directories above path, root-owned, e.g. var/ and var/lib/ for
// /var/lib/x.
func parents(path string) []file {
	var out []file
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 1; i < len(parts); i++ {
		out = append(out, dir(strings.Join(parts[:i], "/")+"/", 0o755, 0))
	}
	return out
}

// baseFiles is what a static Go binary needs of an operating system: a name for its user,
// the CA certificates crypto/x509 reads on Linux, a home and a /tmp.
func baseFiles(certs []byte) []file {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + strconv.Itoa(uid) + ":" + strconv.Itoa(uid) + ":nonroot:" + home + ":/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:" + strconv.Itoa(uid) + ":\n"
	return []file{
		dir("etc/", 0o755, 0),
		regular("etc/passwd", 0o644, []byte(passwd)),
		regular("etc/group", 0o644, []byte(group)),
		dir("etc/ssl/", 0o755, 0),
		dir("etc/ssl/certs/", 0o755, 0),
		regular("etc/ssl/certs/ca-certificates.crt", 0o644, certs),
		dir("home/", 0o755, 0),
		dir(strings.TrimPrefix(home, "/")+"/", 0o700, uid),
		dir("root/", 0o700, 0),
		dir("tmp/", 0o1777, 0),
	}
}

// newLayer writes files into an uncompressed tar with fixed times and owners, so that the same
// inputs give the same digest, and returns it as a gzip-compressed layer, compressed once.
func newLayer(created time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := f.hdr
		hdr.ModTime = created
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	if len(data) == 0 {
		return nil, errors.New("empty layer")
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithCompressedCaching, tarball.WithMediaType(types.OCILayer))
}
