package integration

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// imageRegistry is the repository prefix of the bundles' images, hack/build-images.sh's default.
const imageRegistry = "ghcr.io/kcp-dev"

// kustomize renders dir with the real kubectl, as kubectl apply -k would.
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	bin, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bin, "kubectl"), "kustomize", dir).Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			t.Fatalf("kubectl kustomize %s: %v: %s", dir, err, exitErr.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return out
}

// containerImages returns the images of every container and init container of the workloads
// in rendered, by "<kind>/<name>/<container>".
func containerImages(t *testing.T, rendered []byte) map[string]string {
	t.Helper()
	images := map[string]string{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(rendered)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return images
		}
		if err != nil {
			t.Fatal(err)
		}
		var obj unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			t.Fatal(err)
		}
		podSpec := []string{"spec", "template", "spec"}
		switch obj.GetKind() {
		case "Pod":
			podSpec = []string{"spec"}
		case "CronJob":
			podSpec = []string{"spec", "jobTemplate", "spec", "template", "spec"}
		}
		for _, field := range []string{"containers", "initContainers"} {
			containers, _, err := unstructured.NestedSlice(obj.Object, append(slices.Clone(podSpec), field)...)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range containers {
				c := c.(map[string]any)
				images[obj.GetKind()+"/"+obj.GetName()+"/"+c["name"].(string)], _ = c["image"].(string)
			}
		}
	}
}

// bundles returns every directory below artifacts/ with a kustomization.yaml.
func bundles(t *testing.T) []string {
	t.Helper()
	var dirs []string
	root := filepath.Join(framework.RepoRoot(), "artifacts")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestBundleImages renders every kustomize bundle under artifacts/ with the real kubectl and
// checks that each container runs ghcr.io/kcp-dev/<its binary>:<hack/VERSION>, the image
// hack/build-images.sh builds by default (a versioned tag: no :latest, whose Always pull
// policy would ignore an image loaded into the nodes). Then, for each bundle with images, a
// kustomization of a user's own lists the bundle and overrides the image with an images:
// stanza, as docs/images.md shows: kubectl kustomize of it renders the new name and tag, and
// nothing else changes.
func TestBundleImages(t *testing.T) {
	v, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "hack", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(v))
	withImages := map[string]bool{}
	for _, dir := range bundles(t) {
		rel, _ := filepath.Rel(framework.RepoRoot(), dir)
		t.Run(rel, func(t *testing.T) {
			base := kustomize(t, dir)
			images := containerImages(t, base)
			for where, image := range images {
				container := where[strings.LastIndex(where, "/")+1:]
				if want := imageRegistry + "/" + container + ":" + version; image != want {
					t.Errorf("%s: image %q, want %q", where, image, want)
				}
			}
			if len(images) == 0 {
				return
			}
			withImages[rel] = true

			// A user's kustomization next to a clone of the repository.
			work := t.TempDir()
			if err := os.Symlink(framework.RepoRoot(), filepath.Join(work, "mount-apiserver")); err != nil {
				t.Fatal(err)
			}
			overlay := filepath.Join(work, "my-deployment")
			if err := os.Mkdir(overlay, 0o755); err != nil {
				t.Fatal(err)
			}
			var stanza strings.Builder
			for _, image := range images {
				name, _, _ := strings.Cut(image, ":")
				stanza.WriteString("  - name: " + name + "\n    newName: registry.example.com/mirror/" + filepath.Base(name) + "\n    newTag: v9.8.7\n")
			}
			kustomization := "resources:\n  - ../mount-apiserver/" + filepath.ToSlash(rel) + "\nimages:\n" + stanza.String()
			if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
				t.Fatal(err)
			}
			overridden := kustomize(t, overlay)
			for where, image := range containerImages(t, overridden) {
				container := where[strings.LastIndex(where, "/")+1:]
				if want := "registry.example.com/mirror/" + container + ":v9.8.7"; image != want {
					t.Errorf("overridden %s: image %q, want %q", where, image, want)
				}
			}
			// Only the image lines differ.
			for _, image := range images {
				name, _, _ := strings.Cut(image, ":")
				base = bytes.ReplaceAll(base, []byte(image), []byte("registry.example.com/mirror/"+filepath.Base(name)+":v9.8.7"))
			}
			if !bytes.Equal(base, overridden) {
				t.Errorf("the override changed more than the images:\n%s\nwant\n%s", overridden, base)
			}
		})
	}
	for _, want := range []string{"artifacts/apiservice", "artifacts/agent"} {
		if !withImages[want] {
			t.Errorf("%s has no container images", want)
		}
	}
}

// TestImagesDocOverride runs the kustomization docs/images.md shows (between
// <!-- images-override --> and <!-- /images-override -->) as it stands, in a directory next
// to a clone of the repository, and checks that it deploys the images it names.
func TestImagesDocOverride(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "docs", "images.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "<!-- images-override -->")
	block, _, ok2 := strings.Cut(rest, "<!-- /images-override -->")
	if !ok || !ok2 {
		t.Fatal("docs/images.md has no <!-- images-override --> ... <!-- /images-override --> block")
	}
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```yaml")
	block = strings.TrimSuffix(block, "```")
	var k struct {
		Images []struct{ Name, NewName, NewTag string }
	}
	if err := yaml.Unmarshal([]byte(block), &k); err != nil {
		t.Fatalf("the page's kustomization: %v", err)
	}
	if len(k.Images) == 0 {
		t.Fatal("the page's kustomization overrides no image")
	}

	work := t.TempDir()
	if err := os.Symlink(framework.RepoRoot(), filepath.Join(work, "mount-apiserver")); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(work, "my-deployment")
	if err := os.Mkdir(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	images := containerImages(t, kustomize(t, overlay))
	if len(images) == 0 {
		t.Fatal("the page's kustomization deploys no container")
	}
	for where, image := range images {
		found := false
		for _, i := range k.Images {
			found = found || image == i.NewName+":"+i.NewTag
		}
		if !found {
			t.Errorf("%s runs %s, not an image the page's kustomization names", where, image)
		}
	}
}
