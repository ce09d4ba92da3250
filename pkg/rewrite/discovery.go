package rewrite

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// document rewrites a checked discovery or OpenAPI document: OpenAPI as it is read, discovery
// whole.
func (q Request) document(data []byte, l *lease) (io.Reader, error) {
	if q.Class == OpenAPI {
		return q.rules.openAPI(q, data, l)
	}
	out, err := q.discoveryDocument(data)
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(out), nil
}

// discoveryDocument rewrites a discovery document.
func (q Request) discoveryDocument(data []byte) ([]byte, error) {
	// The document is only read while the rewrite is made: no copy of it as a string.
	doc := gjson.Parse(unsafeString(data))
	switch kind := doc.Get("kind").String(); kind {
	case "APIGroupList":
		return q.rules.groupList(data, doc)
	case "APIGroupDiscoveryList":
		return q.rules.aggregatedList(data, doc, q.rule)
	case "APIGroup":
		if q.rule == nil {
			return data, nil
		}
		return q.rules.apiGroup(doc, q.rule)
	case "APIResourceList":
		if q.rule == nil {
			return data, nil
		}
		return q.rules.resourceList(doc, q.rule)
	default:
		// A Status or anything else.
		return q.rules.object(toPresented, data, typeHint{})
	}
}

// presentedGroups returns the rules under which a target group is presented (several when
// rules share a target group with distinct kind prefixes, in rule order), and whether the
// group is dropped: a target group that carries a presented name and is no rule's target.
func (r *Rules) presentedGroups(target string) ([]*groupRule, bool) {
	var rs []*groupRule
	for _, g := range r.groups {
		if g.target == target {
			rs = append(rs, g)
		}
	}
	if len(rs) > 0 {
		return rs, false
	}
	_, presented := r.byPresented[target]
	return nil, presented
}

// groupList rewrites an APIGroupList (/apis): renamed groups under their presented names,
// once each, and no target group that carries a presented name.
func (r *Rules) groupList(data []byte, doc gjson.Result) ([]byte, error) {
	var items []string
	doc.Get("groups").ForEach(func(_, g gjson.Result) bool {
		rs, drop := r.presentedGroups(g.Get("name").String())
		switch {
		case drop:
		case len(rs) == 0:
			items = append(items, g.Raw)
		default:
			for _, rule := range rs {
				out, err := r.apiGroup(g, rule)
				if err != nil {
					return false
				}
				items = append(items, string(out))
			}
		}
		return true
	})
	e := &pathEditor{data: data}
	e.setRaw("groups", "["+strings.Join(items, ",")+"]")
	return e.data, e.err
}

// apiGroup renames an APIGroup: name, versions[].groupVersion, preferredVersion.groupVersion.
func (r *Rules) apiGroup(g gjson.Result, rule *groupRule) ([]byte, error) {
	e := &pathEditor{data: []byte(g.Raw)}
	e.setString("name", rule.presented)
	g.Get("versions").ForEach(func(i, v gjson.Result) bool {
		e.setString("versions."+i.String()+".groupVersion", rule.presented+"/"+v.Get("version").String())
		return true
	})
	if pv := g.Get("preferredVersion"); pv.IsObject() {
		e.setString("preferredVersion.groupVersion", rule.presented+"/"+pv.Get("version").String())
	}
	return e.data, e.err
}

// resourceList rewrites an APIResourceList (/apis/<g>/<v>) for one rule: groupVersion, and
// the rule's resources (those with its prefix) renamed; other resources of the target group
// are not presented.
func (r *Rules) resourceList(doc gjson.Result, rule *groupRule) ([]byte, error) {
	e := &pathEditor{data: []byte(doc.Raw)}
	if gv := doc.Get("groupVersion"); gv.Type == gjson.String {
		_, v, _ := strings.Cut(gv.Str, "/")
		e.setString("groupVersion", rule.presented+"/"+v)
	}
	var items []string
	doc.Get("resources").ForEach(func(_, res gjson.Result) bool {
		if out, ok := r.apiResource(res, rule); ok {
			items = append(items, out)
		}
		return true
	})
	e.setRaw("resources", "["+strings.Join(items, ",")+"]")
	return e.data, e.err
}

// ownsResource reports whether a target resource (or "resource/sub") is presented by rule.
func (r *Rules) ownsResource(rule *groupRule, resource string) bool {
	base, _, _ := strings.Cut(resource, "/")
	if _, ok := rule.resource(toPresented, base); !ok && rule.lowerPrefix != "" {
		return false
	}
	return r.ruleForGroup(toPresented, rule.target, "", base) == rule
}

// apiResource renames one APIResource of rule's target group; ok is false when the resource
// is not the rule's.
func (r *Rules) apiResource(res gjson.Result, rule *groupRule) (string, bool) {
	name := res.Get("name").String()
	if !r.ownsResource(rule, name) {
		return "", false
	}
	e := &pathEditor{data: []byte(res.Raw)}
	e.renameResourceNames(res, rule, "name", name, "singularName")
	g := res.Get("group")
	if g.Type == gjson.String && g.Str == rule.target {
		e.setString("group", rule.presented)
	}
	if g.Str == "" || g.Str == rule.target {
		if v := res.Get("kind"); v.Type == gjson.String {
			if nk, ok := rule.kind(toPresented, v.Str); ok {
				e.setString("kind", nk)
			}
		}
	}
	return string(e.data), e.err == nil
}

// aggregatedList rewrites an APIGroupDiscoveryList (aggregated discovery, /apis or
// /apis/<g>/<v> not in use, /api untouched): renamed groups under their presented names with
// their own resources, no target group that carries a presented name.
func (r *Rules) aggregatedList(data []byte, doc gjson.Result, only *groupRule) ([]byte, error) {
	var items []string
	var err error
	doc.Get("items").ForEach(func(_, g gjson.Result) bool {
		rs, drop := r.presentedGroups(g.Get("metadata.name").String())
		switch {
		case drop:
		case len(rs) == 0:
			items = append(items, g.Raw)
		default:
			for _, rule := range rs {
				if only != nil && rule != only {
					continue
				}
				var out string
				out, err = r.aggregatedGroup(g, rule)
				if err != nil {
					return false
				}
				items = append(items, out)
			}
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("aggregated discovery: %w", err)
	}
	e := &pathEditor{data: data}
	e.setRaw("items", "["+strings.Join(items, ",")+"]")
	return e.data, e.err
}

// aggregatedGroup renames one APIGroupDiscovery for rule.
func (r *Rules) aggregatedGroup(g gjson.Result, rule *groupRule) (string, error) {
	e := &pathEditor{data: []byte(g.Raw)}
	e.setString("metadata.name", rule.presented)
	g.Get("versions").ForEach(func(i, v gjson.Result) bool {
		var res []string
		v.Get("resources").ForEach(func(_, rd gjson.Result) bool {
			if out, ok := r.resourceDiscovery(rd, rule); ok {
				res = append(res, out)
			}
			return true
		})
		e.setRaw("versions."+i.String()+".resources", "["+strings.Join(res, ",")+"]")
		return true
	})
	return string(e.data), e.err
}

// resourceDiscovery renames one APIResourceDiscovery: resource, singularResource, shortNames,
// responseKind and subresources' responseKind; categories stay.
func (r *Rules) resourceDiscovery(rd gjson.Result, rule *groupRule) (string, bool) {
	name := rd.Get("resource").String()
	if !r.ownsResource(rule, name) {
		return "", false
	}
	e := &pathEditor{data: []byte(rd.Raw)}
	e.renameResourceNames(rd, rule, "resource", name, "singularResource")
	rk := func(path string, k gjson.Result) {
		if !k.IsObject() {
			return
		}
		g := k.Get("group").String()
		if g != "" && g != rule.target {
			return
		}
		if g != "" {
			e.setString(path+".group", rule.presented)
		}
		if nk, ok := rule.kind(toPresented, k.Get("kind").String()); ok {
			e.setString(path+".kind", nk)
		}
	}
	rk("responseKind", rd.Get("responseKind"))
	rd.Get("subresources").ForEach(func(i, s gjson.Result) bool {
		rk("subresources."+i.String()+".responseKind", s.Get("responseKind"))
		return true
	})
	return string(e.data), e.err == nil
}

// renameResourceNames renames the resource name (member nameField, value name), the singular
// name (member singularField) and the short names of one resource of rule's target group: the
// same fields of APIResource and of aggregated discovery's APIResourceDiscovery, named apart.
func (e *pathEditor) renameResourceNames(res gjson.Result, rule *groupRule, nameField, name, singularField string) {
	if nn, ok := rule.resource(toPresented, name); ok {
		e.setString(nameField, nn)
	}
	if v := res.Get(singularField); v.Type == gjson.String && v.Str != "" {
		if nn, ok := rule.resource(toPresented, v.Str); ok {
			e.setString(singularField, nn)
		}
	}
	if v := res.Get("shortNames"); v.IsArray() {
		if raw, ok := mapStrings(v, func(s string) (string, bool) { return rule.resource(toPresented, s) }); ok {
			e.setRaw("shortNames", raw)
		}
	}
}

// pathEditor edits a discovery or OpenAPI document member by member with sjson paths (built
// only from plain names and indexes); documents are small next to lists and watch streams.
type pathEditor struct {
	data []byte
	err  error
}

func (e *pathEditor) setRaw(path, raw string) {
	if e.err != nil {
		return
	}
	e.data, e.err = sjson.SetRawBytes(e.data, path, []byte(raw))
}

func (e *pathEditor) setString(path, s string) {
	e.setRaw(path, quote(s))
}
