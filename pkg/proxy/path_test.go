package proxy

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

func TestJoinPath(t *testing.T) {
	tests := []struct {
		base, inner, want string
		wantErr           bool
	}{
		{"", "api/v1/namespaces", "/api/v1/namespaces", false},
		{"", "/api/v1/namespaces", "/api/v1/namespaces", false},
		{"", "", "/", false},
		{"", "/", "/", false},
		{"", "apis/", "/apis/", false},
		{"/clusters/root:org", "api/v1/pods", "/clusters/root:org/api/v1/pods", false},
		{"/clusters/root:org/", "/api", "/clusters/root:org/api", false},
		{"/prefix", "a//b", "/prefix/a/b", false},
		{"/prefix", "api/v1/namespaces/default/pods/p:8080/proxy/x", "/prefix/api/v1/namespaces/default/pods/p:8080/proxy/x", false},
		{"/clusters/a", "../b/api", "", true},
		{"/clusters/a", "api/../../b", "", true},
		{"/clusters/a", "./api", "", true},
		{"/clusters/a", "api/..", "", true},
		{"/clusters/a", "..", "", true},
		{"", "api%2F..%2F..", "", true},
		{"", "api%2f", "", true},
		{"", "%2e%2e/x", "", true},
		{"", "api%5c..", "", true},
		{"", "api\\..\\x", "", true},
		{"", "api\x00", "", true},
		{"", "api%00", "", true},
		// A literal '%' (the caller sent %25, decoded once by the router) is data, not an
		// escape: it reaches the target encoded again as %25.
		{"/prefix", "api/v1/namespaces/default/configmaps/50%", "/prefix/api/v1/namespaces/default/configmaps/50%", false},
		{"", "a%b/c", "/a%b/c", false},
		{"", "a%25b", "/a%25b", false},
		{"/clusters/a", "%", "/clusters/a/%", false},
		{"/clusters/a", "%/../..", "", true},
		{"/clusters/a", "%25/..", "", true},
	}
	for _, tt := range tests {
		got, err := JoinPath(tt.base, tt.inner)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("JoinPath(%q, %q) = %q, %v; want %q, error %v", tt.base, tt.inner, got, err, tt.want, tt.wantErr)
		}
	}
}

// FuzzJoinPath feeds arbitrary inner paths (the caller's input) against the bases the server
// builds. Properties of an accepted path: it lies under the base, has no '.' or '..' segment,
// NUL or backslash, is clean, and reaches the target unchanged once set as url.URL.Path and
// parsed again (what the target decodes is what was checked). The seed corpus is
// testdata/fuzz/FuzzJoinPath.
func FuzzJoinPath(f *testing.F) {
	for _, s := range []string{"api/v1", "../x", "a/%2e%2e/b", "a//b/", "%2F", "..%2f", "a/./b", "a/b/.."} {
		f.Add(uint8(0), s)
	}
	bases := []string{"", "/clusters/root:org:team", "/k8s/clusters/c-1/", "/services/mounts/clusters/2x7kq3n1", "/a%20b"}
	f.Fuzz(func(t *testing.T, which uint8, inner string) {
		base := bases[int(which)%len(bases)]
		got, err := JoinPath(base, inner)
		if err != nil {
			return
		}
		cleanBase := strings.TrimSuffix(base, "/")
		if !strings.HasPrefix(got, cleanBase+"/") {
			t.Fatalf("JoinPath(%q, %q) = %q escapes the base", base, inner, got)
		}
		if c := path.Clean(got); c != strings.TrimSuffix(got, "/") && got != "/" {
			t.Fatalf("JoinPath(%q, %q) = %q is not clean (%q)", base, inner, got, c)
		}
		if strings.ContainsAny(got, "\x00\\") {
			t.Fatalf("JoinPath(%q, %q) = %q holds a NUL or backslash", base, inner, got)
		}
		for _, seg := range strings.Split(strings.TrimPrefix(got, cleanBase), "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("JoinPath(%q, %q) = %q has a %q segment", base, inner, got, seg)
			}
		}
		sent := "https://target" + (&url.URL{Path: got}).EscapedPath()
		if u, err := url.Parse(sent); err != nil || u.Path != got {
			t.Fatalf("JoinPath(%q, %q) = %q is sent as %q, which does not decode to it (%v)", base, inner, got, sent, err)
		}
	})
}
