package proxy

import (
	"fmt"
	"path"
	"strings"
)

// JoinPath joins the proxied inner path onto the target's base path. The inner path arrives
// decoded once by the router; it is rejected when it still holds escapes of '/', '\' or '.'
// (a second decoding further down could turn them into separators or traversal), '..' or '.'
// segments, NUL bytes or backslashes. The result always lies under base.
func JoinPath(base, inner string) (string, error) {
	if strings.ContainsAny(inner, "\x00\\") {
		return "", fmt.Errorf("path %q contains a NUL byte or a backslash", inner)
	}
	if lower := strings.ToLower(inner); strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(lower, "%2e") || strings.Contains(lower, "%00") {
		return "", fmt.Errorf("path %q contains an encoded '/', '\\', '.' or NUL", inner)
	}
	trailingSlash := strings.HasSuffix(inner, "/")
	var segments []string
	for _, s := range strings.Split(inner, "/") {
		switch s {
		case "":
			continue
		case ".", "..":
			return "", fmt.Errorf("path %q contains a %q segment", inner, s)
		}
		segments = append(segments, s)
	}
	base = strings.TrimSuffix(base, "/")
	joined := base + "/" + strings.Join(segments, "/")
	if trailingSlash && len(segments) > 0 {
		joined += "/"
	}
	// Defence in depth: whatever the rules above let through must stay under base. The
	// result is a decoded path (the caller sets it as url.URL.Path, which encodes it again),
	// so it is cleaned as a path, not parsed as a URL: a literal '%' is data here.
	cleanBase := path.Clean("/" + base)
	if cleaned := path.Clean(joined); cleaned != cleanBase && !strings.HasPrefix(cleaned, strings.TrimSuffix(cleanBase, "/")+"/") {
		return "", fmt.Errorf("path %q escapes the target's base path", inner)
	}
	return joined, nil
}
