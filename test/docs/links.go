package docs

import (
	"bufio"
	"fmt"
	"html"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Link is a link of a page: its line and destination as written.
type Link struct {
	Line int
	Dest string
}

var (
	// [text](dest) and ![alt](dest), dest optionally in <>, optionally followed by a title.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// [label]: dest
	referenceDefinition = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// href="dest" and src="dest" of inline HTML.
	htmlLink = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]*)"`)
	// id="x" and name="x" of inline HTML: anchors besides the headings'.
	htmlAnchor = regexp.MustCompile(`(?i)<[a-z][^>]*\b(?:id|name)\s*=\s*"([^"]*)"`)
	// An ATX heading.
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	// A fence opening or closing a code block.
	fence = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	// A scheme: an external link.
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// GitHub's line fragments of a file that is not rendered: #L10, #L10-L20.
	lineFragment = regexp.MustCompile(`^L(\d+)(?:-L(\d+))?$`)
)

// page is a Markdown file read for its links and anchors.
type page struct {
	links   []Link
	anchors map[string]bool
}

// parse reads a Markdown page: its links, outside code, and the anchors of its headings as
// GitHub makes them (duplicates numbered -1, -2, ...) and of its inline HTML.
func parse(markdown string) page {
	p := page{anchors: map[string]bool{}}
	seen := map[string]int{}
	var fenceMark string
	lines := strings.Split(markdown, "\n")
	for i, line := range lines {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case fenceMark == "":
				fenceMark = m[1]
				continue
			case m[1][0] == fenceMark[0] && len(m[1]) >= len(fenceMark) && strings.TrimSpace(line[strings.Index(line, m[1])+len(m[1]):]) == "":
				fenceMark = ""
				continue
			}
		}
		if fenceMark != "" {
			continue
		}
		text := withoutCodeSpans(line)
		heading := ""
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			heading = m[2]
		} else if i+1 < len(lines) && strings.TrimSpace(line) != "" && isSetextUnderline(lines[i+1]) && !strings.HasPrefix(strings.TrimSpace(line), "|") {
			heading = strings.TrimSpace(line)
		}
		if heading != "" {
			slug := Slug(heading)
			n := seen[slug]
			seen[slug] = n + 1
			if n > 0 {
				slug += "-" + strconv.Itoa(n)
			}
			p.anchors[slug] = true
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(text, -1) {
			p.anchors[m[1]] = true
		}
		escaped := strings.NewReplacer(`\[`, "\x00", `\]`, "\x00", `\(`, "\x00", `\)`, "\x00").Replace(text)
		for _, m := range inlineLink.FindAllStringSubmatch(escaped, -1) {
			p.links = append(p.links, Link{Line: i + 1, Dest: strings.Trim(m[1], "<>")})
		}
		if m := referenceDefinition.FindStringSubmatch(escaped); m != nil {
			p.links = append(p.links, Link{Line: i + 1, Dest: strings.Trim(m[1], "<>")})
		}
		for _, m := range htmlLink.FindAllStringSubmatch(text, -1) {
			p.links = append(p.links, Link{Line: i + 1, Dest: m[1]})
		}
	}
	return p
}

// isSetextUnderline says whether line underlines the line above as a heading (=== or ---).
func isSetextUnderline(line string) bool {
	t := strings.TrimSpace(line)
	if t == "" || len(line)-len(strings.TrimLeft(line, " ")) > 3 {
		return false
	}
	return strings.Trim(t, "=") == "" || strings.Trim(t, "-") == "" && !strings.Contains(t, " ")
}

// withoutCodeSpans blanks `code spans`: a link in code is no link.
func withoutCodeSpans(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		n := 0
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		run := line[i : i+n]
		end := strings.Index(line[i+n:], run)
		if end < 0 {
			b.WriteString(run)
			i += n
			continue
		}
		b.WriteString(strings.Repeat(" ", n+end+n))
		i += n + end + n
	}
	return b.String()
}

var (
	markdownLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag      = regexp.MustCompile(`<[^>]+>`)
)

// Slug is the anchor GitHub gives a heading: its text without Markdown (links keep their
// text, code spans their content, emphasis markers go), in lower case, with every character
// but letters, digits, spaces, hyphens and underscores dropped and spaces made hyphens.
func Slug(heading string) string {
	s := markdownLink.ReplaceAllString(heading, "$1")
	s = html.UnescapeString(htmlTag.ReplaceAllString(s, ""))
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Check returns what is wrong with the links of the Markdown file at file, which lies below
// root: relative links to files or directories that do not exist or lie outside root, and
// fragments that name no anchor of the Markdown page they point to (or no line of another
// file). Links with a scheme (https:, mailto:) are not followed.
func Check(root, file string, pages map[string]page) ([]string, error) {
	p, err := load(file, pages)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, l := range p.links {
		if problem := checkLink(root, file, l.Dest, pages); problem != "" {
			rel, _ := filepath.Rel(root, file)
			problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", rel, l.Line, l.Dest, problem))
		}
	}
	return problems, nil
}

func load(file string, pages map[string]page) (page, error) {
	if p, ok := pages[file]; ok {
		return p, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return page{}, err
	}
	p := parse(string(data))
	pages[file] = p
	return p, nil
}

func checkLink(root, file, dest string, pages map[string]page) string {
	if dest == "" {
		return "empty link"
	}
	if scheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return ""
	}
	pathPart, fragment, hasFragment := strings.Cut(dest, "#")
	if i := strings.Index(pathPart, "?"); i >= 0 {
		pathPart = pathPart[:i]
	}
	decoded, err := url.PathUnescape(pathPart)
	if err != nil {
		return "bad escape: " + err.Error()
	}
	target := file
	if decoded != "" {
		if strings.HasPrefix(decoded, "/") {
			// GitHub resolves a leading slash against the repository's root.
			target = filepath.Join(root, filepath.FromSlash(decoded))
		} else {
			target = filepath.Join(filepath.Dir(file), filepath.FromSlash(decoded))
		}
	}
	if rel, err := filepath.Rel(root, target); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "outside the repository"
	}
	fi, err := os.Stat(target)
	if err != nil {
		return "no such file or directory"
	}
	if !hasFragment {
		return ""
	}
	fragment, err = url.PathUnescape(fragment)
	if err != nil {
		return "bad escape: " + err.Error()
	}
	switch {
	case fi.IsDir():
		return "a fragment of a directory"
	case strings.HasSuffix(strings.ToLower(target), ".md"):
		p, err := load(target, pages)
		if err != nil {
			return err.Error()
		}
		if !p.anchors[fragment] {
			return "no heading or anchor #" + fragment + " in " + filepath.Base(target)
		}
	default:
		m := lineFragment.FindStringSubmatch(fragment)
		if m == nil {
			return "fragment #" + fragment + " of a file that is not Markdown (only #L<n> and #L<n>-L<m> are)"
		}
		data, err := os.ReadFile(target)
		if err != nil {
			return err.Error()
		}
		lines := countLines(string(data))
		for _, n := range m[1:] {
			if v, _ := strconv.Atoi(n); n != "" && (v < 1 || v > lines) {
				return fmt.Sprintf("line %s of a file of %d lines", n, lines)
			}
		}
	}
	return ""
}

func countLines(s string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 64*1024), len(s)+1)
	for sc.Scan() {
		n++
	}
	return n
}
