package rewrite

import (
	"sort"
	"strings"

	"github.com/tidwall/gjson"
)

// openAPI rewrites /openapi/v3 (the index), /openapi/v3/apis/<g>/<v> and /openapi/v2.
func (r *Rules) openAPI(q Request, data []byte) ([]byte, error) {
	switch q.openapi {
	case "v3":
		return r.openAPIIndex(data)
	case "v3group":
		return []byte(r.replacer(data, []*groupRule{q.rule}).Replace(string(data))), nil
	case "v2":
		data, err := r.dropHiddenV2(data)
		if err != nil {
			return nil, err
		}
		return []byte(r.replacer(data, r.groups).Replace(string(data))), nil
	}
	return data, nil
}

// openAPIIndex rewrites the OpenAPI v3 index: "apis/<target>/<v>" entries under presented
// names (one per rule), entries of target groups that carry presented names dropped.
func (r *Rules) openAPIIndex(data []byte) ([]byte, error) {
	paths := gjson.GetBytes(data, "paths")
	if !paths.IsObject() {
		return data, nil
	}
	var members []string
	paths.ForEach(func(k, v gjson.Result) bool {
		parts := strings.Split(k.Str, "/")
		if len(parts) != 3 || parts[0] != "apis" {
			members = append(members, k.Raw+":"+v.Raw)
			return true
		}
		rs, drop := r.presentedGroups(parts[1])
		switch {
		case drop:
		case len(rs) == 0:
			members = append(members, k.Raw+":"+v.Raw)
		default:
			for _, rule := range rs {
				e := &pathEditor{data: []byte(v.Raw)}
				if u := v.Get("serverRelativeURL"); u.Type == gjson.String {
					e.setString("serverRelativeURL", strings.Replace(u.Str, "/apis/"+rule.target+"/", "/apis/"+rule.presented+"/", 1))
				}
				members = append(members, quote("apis/"+rule.presented+"/"+parts[2])+":"+string(e.data))
			}
		}
		return true
	})
	e := &pathEditor{data: data}
	e.setRaw("paths", "{"+strings.Join(members, ",")+"}")
	return e.data, e.err
}

// dropHiddenV2 drops from an OpenAPI v2 document the paths and definitions of target groups
// that carry presented names, so that renamed definitions do not collide with them.
func (r *Rules) dropHiddenV2(data []byte) ([]byte, error) {
	var hidden []string
	for _, g := range r.groups {
		if rs, drop := r.presentedGroups(g.presented); drop && len(rs) == 0 {
			hidden = append(hidden, g.presented)
		}
	}
	if len(hidden) == 0 {
		return data, nil
	}
	isHidden := func(g string) bool {
		for _, h := range hidden {
			if g == h {
				return true
			}
		}
		return false
	}
	e := &pathEditor{data: data}
	if paths := gjson.GetBytes(data, "paths"); paths.IsObject() {
		var members []string
		paths.ForEach(func(k, v gjson.Result) bool {
			parts := strings.SplitN(strings.TrimPrefix(k.Str, "/"), "/", 3)
			if len(parts) >= 2 && parts[0] == "apis" && isHidden(parts[1]) {
				return true
			}
			members = append(members, k.Raw+":"+v.Raw)
			return true
		})
		e.setRaw("paths", "{"+strings.Join(members, ",")+"}")
	}
	if defs := gjson.GetBytes(data, "definitions"); defs.IsObject() {
		var members []string
		defs.ForEach(func(k, v gjson.Result) bool {
			// Definitions of hidden groups only; shared ones (DeleteOptions, WatchEvent) stay.
			gvks := v.Get("x-kubernetes-group-version-kind").Array()
			drop := len(gvks) > 0
			for _, gvk := range gvks {
				if !isHidden(gvk.Get("group").String()) {
					drop = false
				}
			}
			if !drop {
				members = append(members, k.Raw+":"+v.Raw)
			}
			return true
		})
		e.setRaw("definitions", "{"+strings.Join(members, ",")+"}")
	}
	return e.data, e.err
}

// reverseGroup returns a group as OpenAPI definition names start: "kubevirt.io" -> "io.kubevirt".
func reverseGroup(g string) string {
	parts := strings.Split(g, ".")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ".")
}

// replacer renames an OpenAPI document's names of the given rules' target groups: group names
// in paths, apiVersions and GVK extensions, definition names and their refs, kinds (found in
// the document's GVK extensions) and resources (found in its paths). It works on the text,
// so descriptions and operation IDs follow too.
func (r *Rules) replacer(data []byte, rules []*groupRule) *strings.Replacer {
	type pair struct{ old, new string }
	var pairs []pair
	seenKind := map[string]bool{}
	for _, rule := range rules {
		t, p := rule.target, rule.presented
		pairs = append(pairs,
			pair{"/apis/" + t + "/", "/apis/" + p + "/"},
			pair{`"` + t + `"`, `"` + p + `"`},
			pair{`"` + t + `/`, `"` + p + `/`},
			pair{reverseGroup(t) + ".", reverseGroup(p) + "."},
		)
		if rule.kindPrefix == "" {
			continue
		}
		// Kinds of the group, from GVK extensions (v2 definitions, v3 components.schemas).
		for _, sect := range []string{"definitions", "components.schemas"} {
			gjson.GetBytes(data, sect).ForEach(func(_, def gjson.Result) bool {
				def.Get("x-kubernetes-group-version-kind").ForEach(func(_, gvk gjson.Result) bool {
					k := gvk.Get("kind").String()
					if gvk.Get("group").String() == t && !seenKind[k] {
						if nk, ok := rule.kind(toPresented, k); ok {
							seenKind[k] = true
							pairs = append(pairs, pair{k, nk})
						}
					}
					return true
				})
				return true
			})
		}
		// Resources of the group, from its paths.
		gjson.GetBytes(data, "paths").ForEach(func(k, _ gjson.Result) bool {
			rest, ok := strings.CutPrefix(k.Str, "/apis/"+t+"/")
			if !ok {
				return true
			}
			for _, seg := range strings.Split(rest, "/") {
				if seg == "" || seg[0] == '{' || seenKind["/"+seg] {
					continue
				}
				if nr, ok := rule.resource(toPresented, seg); ok {
					seenKind["/"+seg] = true
					pairs = append(pairs, pair{seg, nr})
				}
			}
			return true
		})
	}
	// Longer names first, so that a kind does not replace a part of a longer kind.
	sort.SliceStable(pairs, func(i, j int) bool { return len(pairs[i].old) > len(pairs[j].old) })
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	return strings.NewReplacer(args...)
}
