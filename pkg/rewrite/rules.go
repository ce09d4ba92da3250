package rewrite

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// direction says which way names are rewritten.
type direction int

const (
	// toTarget rewrites presented names to the target's (requests).
	toTarget direction = iota
	// toPresented rewrites the target's names to presented ones (responses).
	toPresented
)

// groupRule is one compiled spec.rewrites.groups entry.
type groupRule struct {
	presented   string
	target      string
	kindPrefix  string // for kinds
	lowerPrefix string // for resources, singular and short names
}

// side returns the group of the rule on the side d rewrites from, and on the side it rewrites to.
func (g *groupRule) side(d direction) (from, to string) {
	if d == toTarget {
		return g.presented, g.target
	}
	return g.target, g.presented
}

// kind renames a kind; ok is false when the kind is not one of the rule's (no prefix).
func (g *groupRule) kind(d direction, kind string) (string, bool) {
	if kind == "" || metaKinds[kind] {
		return kind, false
	}
	if d == toTarget {
		return g.kindPrefix + kind, true
	}
	if !strings.HasPrefix(kind, g.kindPrefix) || len(kind) == len(g.kindPrefix) {
		return kind, false
	}
	return kind[len(g.kindPrefix):], true
}

// resource renames a resource, a singular or a short name, with or without "/subresource".
// "*" and "*/sub" stay as they are.
func (g *groupRule) resource(d direction, res string) (string, bool) {
	if res == "" || res == "*" || strings.HasPrefix(res, "*/") {
		return res, false
	}
	if d == toTarget {
		return g.lowerPrefix + res, true
	}
	if !strings.HasPrefix(res, g.lowerPrefix) || len(res) == len(g.lowerPrefix) || res[len(g.lowerPrefix)] == '/' {
		return res, false
	}
	return res[len(g.lowerPrefix):], true
}

// metaKinds are kinds that any group version serves (options, Status, watch events) and that
// never take a kind prefix.
var metaKinds = map[string]bool{
	"Status": true, "WatchEvent": true, "DeleteOptions": true, "ListOptions": true,
	"GetOptions": true, "CreateOptions": true, "UpdateOptions": true, "PatchOptions": true,
	"Table": true, "TableOptions": true, "PartialObjectMetadata": true,
	"PartialObjectMetadataList": true, "APIResourceList": true, "APIGroup": true,
	"APIGroupList": true, "APIVersions": true, "Scale": true,
}

// prefixRule is one compiled spec.rewrites.metadataKeyPrefixes entry.
type prefixRule struct {
	presented, target string
}

// Rules are compiled rewrite rules of one Mount. A nil *Rules renames nothing.
type Rules struct {
	groups   []*groupRule
	prefixes []prefixRule

	byPresented map[string]*groupRule
	// byTarget lists the rules of one target group, longest kind prefix first, so that a kind
	// finds the rule whose prefix it carries.
	byTarget map[string][]*groupRule

	// tokens are byte strings of which at least one occurs in any JSON that needs rewriting in
	// that direction; a document without any (and without escapes) passes untouched.
	tokens       [2][][]byte
	tokenStrings [2][]string

	// general turns the fast path off, for tests that compare both.
	general bool
}

// Compile checks and compiles rewrite rules. Nil or empty rules compile to nil Rules. Rules
// are expected to be validated (invertible) already; Compile only refuses what it cannot use.
func Compile(in *mounts.MountRewrites) (*Rules, error) {
	if in == nil || (len(in.Groups) == 0 && len(in.MetadataKeyPrefixes) == 0) {
		return nil, nil
	}
	r := &Rules{byPresented: map[string]*groupRule{}, byTarget: map[string][]*groupRule{}}
	type targetKey struct{ target, prefix string }
	seen := map[targetKey]bool{}
	for i, g := range in.Groups {
		if g.Presented == "" || g.Target == "" {
			return nil, fmt.Errorf("groups[%d]: presented and target groups must not be empty", i)
		}
		if strings.ContainsAny(g.Presented+g.Target, "/\"\\ ") || strings.ContainsAny(g.KindPrefix, "/\"\\ ") {
			return nil, fmt.Errorf("groups[%d]: group names and kind prefix must not contain '/', '\"', '\\' or spaces", i)
		}
		if _, dup := r.byPresented[g.Presented]; dup {
			return nil, fmt.Errorf("groups[%d]: presented group %q is renamed twice", i, g.Presented)
		}
		k := targetKey{g.Target, g.KindPrefix}
		if seen[k] {
			return nil, fmt.Errorf("groups[%d]: target group %q with kind prefix %q is used twice", i, g.Target, g.KindPrefix)
		}
		seen[k] = true
		gr := &groupRule{presented: g.Presented, target: g.Target, kindPrefix: g.KindPrefix, lowerPrefix: strings.ToLower(g.KindPrefix)}
		r.groups = append(r.groups, gr)
		r.byPresented[gr.presented] = gr
		r.byTarget[gr.target] = append(r.byTarget[gr.target], gr)
	}
	for _, rs := range r.byTarget {
		sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].kindPrefix) > len(rs[j].kindPrefix) })
	}
	for i, p := range in.MetadataKeyPrefixes {
		if p.Presented == "" || p.Target == "" {
			return nil, fmt.Errorf("metadataKeyPrefixes[%d]: presented and target prefixes must not be empty", i)
		}
		if strings.ContainsAny(p.Presented+p.Target, "\"\\") {
			return nil, fmt.Errorf("metadataKeyPrefixes[%d]: prefixes must not contain '\"' or '\\'", i)
		}
		r.prefixes = append(r.prefixes, prefixRule{presented: p.Presented, target: p.Target})
	}
	// Longest prefix first: the most specific rule wins.
	sort.SliceStable(r.prefixes, func(i, j int) bool { return len(r.prefixes[i].presented) > len(r.prefixes[j].presented) })
	for _, g := range r.groups {
		r.tokenStrings[toTarget] = append(r.tokenStrings[toTarget], g.presented)
		r.tokenStrings[toPresented] = append(r.tokenStrings[toPresented], g.target)
	}
	for _, p := range r.prefixes {
		r.tokenStrings[toTarget] = append(r.tokenStrings[toTarget], p.presented)
		r.tokenStrings[toPresented] = append(r.tokenStrings[toPresented], p.target)
	}
	for d, ts := range r.tokenStrings {
		for _, t := range ts {
			r.tokens[d] = append(r.tokens[d], []byte(t))
		}
	}
	return r, nil
}

// mentions reports whether data may need rewriting in direction d: it names a group or key
// prefix of the rules, or holds escapes that could hide one.
func (r *Rules) mentions(d direction, data []byte) bool {
	if r == nil {
		return false
	}
	if bytes.IndexByte(data, '\\') >= 0 {
		return true
	}
	for _, t := range r.tokens[d] {
		if bytes.Contains(data, t) {
			return true
		}
	}
	return false
}

// mentionsString is mentions for a string (a gjson result's raw JSON), without a copy.
func (r *Rules) mentionsString(d direction, s string) bool {
	if r == nil {
		return false
	}
	if strings.IndexByte(s, '\\') >= 0 {
		return true
	}
	for _, t := range r.tokenStrings[d] {
		if strings.Contains(s, t) {
			return true
		}
	}
	return false
}

// ruleForGroup returns the rule that renames group g in direction d. For a target group that
// several rules share, kind (or, without a kind, resource) picks the rule by its prefix.
func (r *Rules) ruleForGroup(d direction, group, kind, resource string) *groupRule {
	if r == nil {
		return nil
	}
	if d == toTarget {
		return r.byPresented[group]
	}
	rs := r.byTarget[group]
	switch {
	case len(rs) == 0:
		return nil
	case len(rs) == 1:
		return rs[0]
	}
	for _, g := range rs {
		if kind != "" && strings.HasPrefix(kind, g.kindPrefix) {
			return g
		}
		if kind == "" && resource != "" && strings.HasPrefix(resource, g.lowerPrefix) {
			return g
		}
	}
	return rs[len(rs)-1]
}

// gvk renames an apiVersion and kind pair. Objects of groups without a rule come back as
// they are.
func (r *Rules) gvk(d direction, apiVersion, kind string) (string, string, bool) {
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return apiVersion, kind, false // core group
	}
	g := r.ruleForGroup(d, group, kind, "")
	if g == nil {
		return apiVersion, kind, false
	}
	_, to := g.side(d)
	k, _ := g.kind(d, kind)
	return to + "/" + version, k, true
}

// groupResource renames a group and a resource (or "resource/subresource").
func (r *Rules) groupResource(d direction, group, resource string) (string, string, bool) {
	g := r.ruleForGroup(d, group, "", resource)
	if g == nil {
		return group, resource, false
	}
	_, to := g.side(d)
	res, _ := g.resource(d, resource)
	return to, res, true
}

// key renames a label, annotation or finalizer key by the longest matching prefix.
func (r *Rules) key(d direction, k string) (string, bool) {
	return r.keyWithin(d, "", k)
}

// keyWithin renames the key in pre+k (managedFields write "f:<key>"), in one allocation.
func (r *Rules) keyWithin(d direction, pre, k string) (string, bool) {
	if r == nil {
		return pre + k, false
	}
	best := -1
	for i, p := range r.prefixes {
		from := p.presented
		if d == toPresented {
			from = p.target
		}
		if strings.HasPrefix(k, from) && (best < 0 || len(from) > len(r.prefixFrom(d, best))) {
			best = i
		}
	}
	if best < 0 {
		return pre + k, false
	}
	p := r.prefixes[best]
	if d == toTarget {
		return pre + p.target + k[len(p.presented):], true
	}
	return pre + p.presented + k[len(p.target):], true
}

func (r *Rules) prefixFrom(d direction, i int) string {
	if d == toTarget {
		return r.prefixes[i].presented
	}
	return r.prefixes[i].target
}

// hidden reports whether a target group is not shown through the mount: its name is a
// presented name of a rule (the presented group wins), or it is a rule's target group (shown
// only under the presented name).
func (r *Rules) hiddenTargetGroup(group string) bool {
	if r == nil {
		return false
	}
	_, presented := r.byPresented[group]
	_, target := r.byTarget[group]
	return presented || target
}
