package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// markdownFiles returns every Markdown file of the repository, but for git's and build output.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "_output") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.EqualFold(filepath.Ext(p), ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestMarkdownLinks follows every relative link of every Markdown file of the repository
// (README.md, docs/, artifacts/, ...): the file or directory it names exists in the
// repository, and its #fragment is a heading or anchor of the page it names, as GitHub makes
// them.
func TestMarkdownLinks(t *testing.T) {
	root := repoRoot()
	files := markdownFiles(t, root)
	for _, want := range []string{"README.md", "docs/images.md", "docs/reference/api.md", "docs/reference/flags.md"} {
		if !slices.Contains(files, filepath.Join(root, filepath.FromSlash(want))) {
			t.Errorf("%s not found among the Markdown files", want)
		}
	}
	pages := map[string]page{}
	links := 0
	for _, f := range files {
		problems, err := Check(root, f, pages)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
		links += len(pages[f].links)
	}
	t.Logf("%d links in %d Markdown files", links, len(files))
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Run it in a Kubernetes cluster":           "run-it-in-a-kubernetes-cluster",
		"Users of a standalone server":             "users-of-a-standalone-server",
		"`--root-directory` and `--cert-dir`":      "--root-directory-and---cert-dir",
		"spec.rewrites.groups[]":                   "specrewritesgroups",
		"Generic flags (mount-apiserver)":          "generic-flags-mount-apiserver",
		"What's new? *Really*":                     "whats-new-really",
		"[Linked](other.md) heading":               "linked-heading",
		"Figures: 1,000 mounts &amp; 2 cores":      "figures-1000-mounts--2-cores",
		"KUBERNETES_SERVICE_HOST":                  "kubernetes_service_host",
		"Ünïcode stays":                            "ünïcode-stays",
		"mount-apiserver kubeconfig":               "mount-apiserver-kubeconfig",
		"<a name=\"x\"></a>Heading with an anchor": "heading-with-an-anchor",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestCheck checks the checker on a small repository of its own: each broken link is found,
// and nothing else.
func TestCheck(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/other.md", "# Other\n\n## Part\n\n## Part\n\nSetext\n------\n\n<a id=\"custom\"></a>\n")
	write("hack/script.sh", "one\ntwo\nthree\n")
	write("README.md", strings.Join([]string{
		"# Title",
		"[ok](docs/other.md) [ok](docs/other.md#part) [ok](docs/other.md#part-1) [ok](docs/other.md#setext)",
		"[ok](docs/other.md#custom) [ok](#title) [ok](hack/) [ok](hack/script.sh#L2-L3) [ok](/docs/other.md)",
		"[ok](https://example.com/missing.md) [ok](mailto:x@example.com) ![ok](docs/other.md \"title\")",
		"[broken: no file](docs/missing.md)",
		"[broken: no heading](docs/other.md#part-2)",
		"[broken: own heading](#nothing)",
		"[broken: line](hack/script.sh#L9)",
		"[broken: fragment of code](hack/script.sh#main)",
		"[broken: outside](../outside.md)",
		"[broken: fragment of a directory](hack/#x)",
		"`[not a link](nowhere.md)` \\[not a link either\\](nowhere.md)",
		"```sh",
		"[not a link in code](nowhere.md)",
		"```",
		"[ref]: docs/nothing.md",
		"<a href=\"docs/none.md\">html</a>",
	}, "\n"))
	problems, err := Check(root, filepath.Join(root, "README.md"), map[string]page{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		// README.md:<line>: <dest>: <problem>
		parts := strings.SplitN(p, ": ", 3)
		got = append(got, parts[1])
	}
	want := []string{"docs/missing.md", "docs/other.md#part-2", "#nothing", "hack/script.sh#L9", "hack/script.sh#main", "../outside.md", "hack/#x", "docs/nothing.md", "docs/none.md"}
	if !slices.Equal(got, want) {
		t.Errorf("problems %q\nwant links %q", problems, want)
	}
}
