package integration

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// The documentation's shell blocks and their marks. Every fenced block in a shell language
// (sh, bash, shell, console, zsh) of README.md and docs/ is preceded, on the lines right
// before its fence, by exactly one HTML comment that says who runs it:
//
//	<!-- run: MODE [before=HOOK,...] [after=HOOK,...] -->
//	    The page's test runs the block in MODE (docModes), in the page's order, in one shell
//	    session per page and mode; HOOKs (docHooks) run before or after it, standing in for
//	    what a test cannot do as a user would (a Deployment's pod, Ctrl-C on the server).
//	<!-- not-run: REASON -->
//	    Nobody runs it; REASON says why (it needs a real cloud cluster, kcp's binaries, or it
//	    is `go run` of the server that the test replaces by the binary it built).
//	<!-- test: MARK -->
//	    Only on pages with a test of their own (docOwnRunners), which interprets MARK.
//
// Other comments (e.g. <!-- tour -->, which TestReadmeTour's callers use) may stand next to
// the mark.

// docShellLanguages are the fence languages of commands a user is told to run.
var docShellLanguages = []string{"sh", "bash", "shell", "console", "zsh"}

// docOwnRunners are pages whose blocks a test of their own runs with marks of its own.
var docOwnRunners = map[string]string{
	"docs/kcp.md": "TestKcpDocsSteps",
}

// shellBlock is one fenced shell block of a page.
type shellBlock struct {
	Page string // relative to the repository root, with slashes
	Line int    // line of the opening fence, from 1
	Lang string
	Body string
	// Mark is the block's mark comment without <!-- and -->, e.g. "run: standalone".
	Mark string
	// Comments are all the comments right before the fence.
	Comments []string

	// Of a run mark:
	Mode          string
	Before, After []string

	// indent is the fence's indentation (in list items), which the body's lines lose.
	indent string
}

func (b shellBlock) String() string { return fmt.Sprintf("%s:%d", b.Page, b.Line) }

var docMarkPattern = regexp.MustCompile(`^(run|not-run|test):\s*(.*)$`)

// docPages returns README.md and every Markdown file under docs/, relative to root.
func docPages(t testing.TB, root string) []string {
	t.Helper()
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && path == filepath.Join(root, "docs") {
				return filepath.SkipDir
			}
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pages[1:])
	return pages
}

// parseDocBlocks returns the fenced blocks in shell languages of page (relative to root), and
// the problems of their marks.
func parseDocBlocks(root, page string) ([]shellBlock, []string, error) {
	f, err := os.Open(filepath.Join(root, filepath.FromSlash(page)))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var (
		blocks   []shellBlock
		problems []string
		comments []string // the comment lines right before the current line
		open     *shellBlock
		fence    string
		body     strings.Builder
	)
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		trimmed := strings.TrimSpace(line)
		if open != nil || fence != "" {
			if strings.HasPrefix(trimmed, "```") && strings.Trim(trimmed, "`") == "" && len(trimmed) >= len(fence) {
				if open != nil {
					open.Body = body.String()
					blocks = append(blocks, *open)
				}
				open, fence = nil, ""
				body.Reset()
				continue
			}
			if open != nil {
				// Fences inside list items are indented; their lines carry the indentation.
				body.WriteString(strings.TrimPrefix(line, open.indent) + "\n")
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") {
			ticks := len(trimmed) - len(strings.TrimLeft(trimmed, "`"))
			fence = strings.Repeat("`", ticks)
			lang := strings.TrimSpace(trimmed[ticks:])
			if i := strings.IndexAny(lang, " {"); i >= 0 {
				lang = lang[:i]
			}
			if slices.Contains(docShellLanguages, lang) {
				b := shellBlock{Page: page, Line: n, Lang: lang, Comments: comments}
				b.indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
				problems = append(problems, b.parseMark()...)
				open = &b
			}
			comments = nil
			continue
		}
		if strings.HasPrefix(trimmed, "<!--") && strings.HasSuffix(trimmed, "-->") {
			comments = append(comments, strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(trimmed, "<!--"), "-->")))
			continue
		}
		comments = nil
	}
	if err := scanner.Err(); err != nil {
		return nil, nil, err
	}
	if open != nil {
		problems = append(problems, fmt.Sprintf("%s: the block is never closed", open))
	}
	return blocks, problems, nil
}

// parseMark finds the block's one mark among the comments before it and checks it.
func (b *shellBlock) parseMark() []string {
	var marks []string
	for _, c := range b.Comments {
		if docMarkPattern.MatchString(c) {
			marks = append(marks, c)
		}
	}
	switch len(marks) {
	case 0:
		return []string{fmt.Sprintf("%s: a %s block without a mark: put <!-- run: MODE -->, or <!-- not-run: REASON --> with the reason, on the line before its fence", b, b.Lang)}
	case 1:
	default:
		return []string{fmt.Sprintf("%s: more than one mark: %q", b, marks)}
	}
	b.Mark = marks[0]
	m := docMarkPattern.FindStringSubmatch(b.Mark)
	kind, rest := m[1], strings.TrimSpace(m[2])
	switch kind {
	case "not-run":
		if len(rest) < 10 {
			return []string{fmt.Sprintf("%s: not-run needs its reason, in words: %q", b, b.Mark)}
		}
	case "test":
		if _, ok := docOwnRunners[b.Page]; !ok {
			return []string{fmt.Sprintf("%s: %q: only pages with a test of their own (%v) take test marks", b, b.Mark, docOwnRunners)}
		}
	case "run":
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return []string{fmt.Sprintf("%s: run needs a mode", b)}
		}
		b.Mode = fields[0]
		if _, ok := docModes[b.Mode]; !ok {
			return []string{fmt.Sprintf("%s: unknown mode %q (known: %v)", b, b.Mode, docModeNames())}
		}
		for _, f := range fields[1:] {
			key, value, ok := strings.Cut(f, "=")
			var hooks []string
			if ok {
				hooks = strings.Split(value, ",")
			}
			for _, h := range hooks {
				if _, known := docHooks[b.Mode][h]; !known {
					return []string{fmt.Sprintf("%s: mode %s has no hook %q", b, b.Mode, h)}
				}
			}
			switch {
			case ok && key == "before":
				b.Before = append(b.Before, hooks...)
			case ok && key == "after":
				b.After = append(b.After, hooks...)
			default:
				return []string{fmt.Sprintf("%s: %q: expected before=HOOK or after=HOOK", b, f)}
			}
		}
	}
	return nil
}

func docModeNames() []string {
	var names []string
	for name := range docModes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// TestDocsBlocksAreMarked checks every shell block of README.md and docs/: each says which test
// runs it in which mode, or why nobody does; a page with a test of its own names it.
func TestDocsBlocksAreMarked(t *testing.T) {
	root := framework.RepoRoot()
	var total, run, notRun int
	for _, page := range docPages(t, root) {
		blocks, problems, err := parseDocBlocks(root, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
		for _, b := range blocks {
			total++
			switch {
			case b.Mode != "":
				run++
			case strings.HasPrefix(b.Mark, "not-run"):
				notRun++
				t.Logf("%s: %s", b, b.Mark)
			}
		}
	}
	t.Logf("%d shell blocks: %d run by TestDocs and TestReadmeTour, %d not run, the rest by their page's own test", total, run, notRun)
	if total == 0 {
		t.Fatal("no shell blocks found: the parser is broken")
	}
	// The pages' own tests exist.
	src, err := os.ReadFile(filepath.Join(root, "test", "integration", "kcp_docs_test.go"))
	for page, test := range docOwnRunners {
		if _, statErr := os.Stat(filepath.Join(root, page)); statErr != nil {
			continue
		}
		if err != nil || !strings.Contains(string(src), "func "+test+"(") {
			t.Errorf("%s is run by %s, which test/integration/kcp_docs_test.go does not define", page, test)
		}
	}
}

// TestDocsMarkParser feeds the parser the cases it must refuse or accept.
func TestDocsMarkParser(t *testing.T) {
	dir := t.TempDir()
	page := "docs/p.md"
	if err := os.MkdirAll(filepath.Join(dir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	content := "text\n\n```sh\necho unmarked\n```\n\n<!-- run: standalone -->\n```sh\necho a\n```\n\n" +
		"<!-- run: standalone after=nope -->\n```bash\necho b\n```\n\n<!-- not-run: why -->\n```console\n$ x\n```\n\n" +
		"<!-- tour -->\n<!-- run: aggregated after=agent-pod -->\n```sh\necho c\n```\n\n```yaml\nnot: shell\n```\n\n" +
		"- item\n\n  <!-- not-run: needs a real cloud cluster -->\n  ```sh\n  echo indented\n  ```\n" +
		"<!-- run: standalone -->\n\n```sh\necho blank line between\n```\n"
	if err := os.WriteFile(filepath.Join(dir, page), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, problems, err := parseDocBlocks(dir, page)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 7 {
		t.Fatalf("blocks: %d, want 7: %+v", len(blocks), blocks)
	}
	wantProblems := []string{"docs/p.md:3: a sh block without a mark", "docs/p.md:13: mode standalone has no hook", "docs/p.md:18: not-run needs its reason", "docs/p.md:40: a sh block without a mark"}
	if len(problems) != len(wantProblems) {
		t.Fatalf("problems: %q", problems)
	}
	for i, want := range wantProblems {
		if !strings.HasPrefix(problems[i], want) {
			t.Errorf("problem %d: %q, want %q...", i, problems[i], want)
		}
	}
	if b := blocks[4]; b.Mode != "aggregated" || !slices.Equal(b.After, []string{"agent-pod"}) || b.Body != "echo c\n" || !slices.Contains(b.Comments, "tour") {
		t.Errorf("the aggregated block: %+v", b)
	}
	if b := blocks[5]; b.Body != "echo indented\n" || b.Mark != "not-run: needs a real cloud cluster" {
		t.Errorf("the indented block: %+v", b)
	}
}

// docReasonSources are the files that define the reasons of a Mount's conditions and of the
// proxy's answers, which docs/troubleshooting.md explains.
var docReasonSources = []string{
	"pkg/controller/status/status.go",
	"pkg/controller/agentconnected/controller.go",
	"pkg/proxy/handler.go",
	"pkg/proxy/errors.go",
	"pkg/proxy/tunnel.go",
	"pkg/proxy/workspace.go",
	"pkg/tunnel/agent/credentials.go",
}

var docReasonPattern = regexp.MustCompile(`(?m)^\s*(?:const\s+)?Reason\w*\s*(?:metav1\.StatusReason\s*)?=\s*"(\w+)"`)

// TestTroubleshootingNamesEveryReason checks that docs/troubleshooting.md says what each
// condition reason and each reason of the proxy's answers means: every Reason constant of
// the status controller, the AgentConnected controller, the proxy and the agent.
func TestTroubleshootingNamesEveryReason(t *testing.T) {
	root := framework.RepoRoot()
	page, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, file := range docReasonSources {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docReasonPattern.FindAllStringSubmatch(string(src), -1) {
			reasons = append(reasons, m[1])
			if !strings.Contains(string(page), "`"+m[1]+"`") {
				t.Errorf("docs/troubleshooting.md does not explain reason %s (%s)", m[1], file)
			}
		}
	}
	if len(reasons) < 20 {
		t.Fatalf("found only %d reasons (%v): the pattern misses their definitions", len(reasons), reasons)
	}
	t.Logf("%d reasons: %v", len(reasons), reasons)
}
