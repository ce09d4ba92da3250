package main

import (
	"strings"
	"unicode"
)

// text turns plain text (a doc comment, a flag's help) into Markdown for a table cell: line
// breaks become <br>, and what Markdown would read as markup is escaped, except inside
// `code spans`, which stay code. Pipes are escaped everywhere, as tables need.
func text(s string) string {
	s = strings.TrimSpace(s)
	var b strings.Builder
	parts := strings.Split(s, "`")
	// An unpaired backtick is text.
	if len(parts)%2 == 0 {
		parts[len(parts)-2] += "`" + parts[len(parts)-1]
		parts = parts[:len(parts)-1]
	}
	for i, p := range parts {
		if i%2 == 1 {
			b.WriteString("`" + strings.ReplaceAll(strings.ReplaceAll(p, "|", `\|`), "\n", " ") + "`")
			continue
		}
		runes := []rune(p)
		for j, r := range runes {
			switch r {
			case '\n':
				b.WriteString("<br>")
			case '|', '*', '[', ']', '\\':
				b.WriteString(`\` + string(r))
			case '<':
				b.WriteString("&lt;")
			case '>':
				b.WriteString("&gt;")
			case '&':
				b.WriteString("&amp;")
			case '_':
				// Inside a word an underscore is no emphasis (KUBERNETES_SERVICE_HOST).
				if j > 0 && j < len(runes)-1 && isWord(runes[j-1]) && isWord(runes[j+1]) {
					b.WriteRune(r)
				} else {
					b.WriteString(`\_`)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}

func isWord(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// code is s as a code span for a table cell.
func code(s string) string {
	if s == "" {
		return ""
	}
	fence := "`"
	if strings.Contains(s, "`") {
		fence = "``"
		s = " " + s + " "
	}
	return fence + strings.ReplaceAll(s, "|", `\|`) + fence
}

// anchor is the fragment GitHub gives a heading: lower case, punctuation other than hyphens
// and underscores dropped, spaces as hyphens (test/docs computes it the same way).
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
