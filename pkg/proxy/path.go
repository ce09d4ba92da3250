package proxy

import (
	"fmt"
	"path"
	"strings"
)

// CleanPath is the proxied inner path as it is sent: empty segments dropped, a trailing slash
// kept. The inner path arrives decoded once by the router; it is rejected when it still holds
// escapes of '/', '\' or '.' (a second decoding further down could turn them into separators
// or traversal), '..' or '.' segments, NUL bytes or backslashes. Whatever decides about a
// request by its path (renaming, the admission relay, long-running checks) reads the cleaned
// one, so that /apis/x//v1/... is judged as the /apis/x/v1/... the target serves.
func CleanPath(inner string) (string, error) {
	segments, trailingSlash, err := pathSegments(inner)
	if err != nil {
		return "", err
	}
	cleaned := "/" + strings.Join(segments, "/")
	if trailingSlash && len(segments) > 0 {
		cleaned += "/"
	}
	return cleaned, nil
}

func pathSegments(inner string) ([]string, bool, error) {
	if strings.ContainsAny(inner, "\x00\\") {
		return nil, false, fmt.Errorf("path %q contains a NUL byte or a backslash", inner)
	}
	if lower := strings.ToLower(inner); strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(lower, "%2e") || strings.Contains(lower, "%00") {
		return nil, false, fmt.Errorf("path %q contains an encoded '/', '\\', '.' or NUL", inner)
	}
	var segments []string
	for _, s := range strings.Split(inner, "/") {
		switch s {
		case "":
			continue
		case ".", "..":
			return nil, false, fmt.Errorf("path %q contains a %q segment", inner, s)
		}
		segments = append(segments, s)
	}
	return segments, strings.HasSuffix(inner, "/"), nil
}

// JoinPath joins the proxied inner path onto the target's base path, refusing what CleanPath
// refuses. The result always lies under base.
func JoinPath(base, inner string) (string, error) {
	segments, trailingSlash, err := pathSegments(inner)
	if err != nil {
		return "", err
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
