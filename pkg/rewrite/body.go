package rewrite

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"sigs.k8s.io/yaml"

	"github.com/kcp-dev/mount-apiserver/pkg/yamlbound"
)

// Body patch and object media types.
const (
	mtJSONPatch      = "application/json-patch+json"
	mtMergePatch     = "application/merge-patch+json"
	mtStrategicPatch = "application/strategic-merge-patch+json"
	mtApplyYAML      = "application/apply-patch+yaml"
)

// maxBody bounds a request body that is rewritten in memory.
const maxBody = 64 << 20

// Body rewrites a request body presented -> target by its Content-Type: objects (create,
// update, DeleteOptions), JSON patch, merge patch, strategic merge patch and apply patches
// (YAML bodies come back as JSON, which is YAML too). Protobuf, CBOR and other media types of
// requests that are rewritten fail with *UnsupportedMediaTypeError.
func (q Request) Body(contentType string, body []byte) ([]byte, error) {
	if !q.Class.Rewrites() || len(body) == 0 {
		return body, nil
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("request body of %d bytes is larger than the %d bytes a renaming mount rewrites", len(body), maxBody)
	}
	mt := mediaType(contentType)
	switch {
	case mt == mtJSONPatch:
		return q.rules.jsonPatch(toTarget, body, q.defaultRule())
	case mt == mtApplyYAML:
		if err := CheckJSON(body); err != nil {
			if !isSyntaxError(err) {
				return nil, fmt.Errorf("apply patch: %w", err)
			}
			j, err := yamlToJSON(body)
			if err != nil {
				return nil, fmt.Errorf("apply patch: %w", err)
			}
			body = j
		}
		return q.rules.object(toTarget, body, q.hint())
	case mt == mtMergePatch || mt == mtStrategicPatch || isJSON(mt):
		if err := CheckJSON(body); err != nil {
			return nil, fmt.Errorf("request body: %w", err)
		}
		out, err := q.rules.object(toTarget, body, q.hint())
		if err != nil {
			return nil, err
		}
		if mt == mtStrategicPatch {
			return q.rules.strategicDirectives(toTarget, out)
		}
		return out, nil
	}
	return nil, &UnsupportedMediaTypeError{ContentType: contentType}
}

// yamlToJSON converts an apply patch from YAML to JSON, refusing YAML whose aliases expand it
// beyond maxBody (a few KiB of YAML can stand for gigabytes of JSON).
func yamlToJSON(y []byte) ([]byte, error) {
	if err := yamlbound.Check(y, maxBody); err != nil {
		return nil, err
	}
	return yaml.YAMLToJSON(y)
}

// defaultRule is the group rule of a Resource request.
func (q Request) defaultRule() *groupRule { return q.rule }

// hint is the type of objects of this request that do not say their own (in target names,
// which for objects of other groups are also the presented names).
func (q Request) hint() typeHint {
	if q.Class == Objects {
		return kindOfResource[[2]string{q.group, strings.SplitN(q.resource, "/", 2)[0]}]
	}
	return typeHint{}
}

// strategicDirectives renames the finalizers named by strategic merge patch directives
// ($setElementOrder/finalizers, $deleteFromPrimitiveList/finalizers) in metadata.
func (r *Rules) strategicDirectives(d direction, body []byte) ([]byte, error) {
	if len(r.prefixes) == 0 {
		return body, nil
	}
	m := gjson.GetBytes(body, "metadata")
	if !m.IsObject() {
		return body, nil
	}
	e := &editor{data: body}
	for _, f := range []string{"$setElementOrder/finalizers", "$deleteFromPrimitiveList/finalizers"} {
		if v := m.Get(escapePath(f)); v.IsArray() {
			if raw, ok := mapStrings(v, func(s string) (string, bool) { return r.key(d, s) }); ok {
				e.setRaw(v, raw)
			}
		}
	}
	return e.bytes()
}

// escapePath escapes a member name for a gjson/sjson path.
func escapePath(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.', '*', '?', '|', '#', '@', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// jsonPatch rewrites an RFC 6902 JSON patch: paths into metadata labels, annotations and
// finalizers (keys renamed), values that are objects (rewritten as objects of rule's group,
// or as metadata), and values of /apiVersion and /kind. rule is the request's group rule
// (nil for objects of other groups).
func (r *Rules) jsonPatch(d direction, body []byte, rule *groupRule) ([]byte, error) {
	if err := CheckJSON(body); err != nil {
		return nil, fmt.Errorf("JSON patch: %w", err)
	}
	doc := gjson.ParseBytes(body)
	if !doc.IsArray() {
		return nil, fmt.Errorf("JSON patch must be a JSON array of operations")
	}
	// No shortcut by mentions: pointers escape the '/' of key prefixes as "~1".
	e := &editor{data: body}
	doc.ForEach(func(i, op gjson.Result) bool {
		if !op.IsObject() {
			e.err = fmt.Errorf("JSON patch operation %s is not an object", i.String())
			return false
		}
		for _, f := range []string{"path", "from"} {
			if p := op.Get(f); p.Type == gjson.String {
				if np, ok := r.pointer(d, p.Str); ok {
					e.setString(p, np)
				}
			}
		}
		v := op.Get("value")
		if !v.Exists() {
			return true
		}
		path := op.Get("path").String()
		segs := splitPointer(path)
		switch {
		case len(segs) == 1 && segs[0] == "apiVersion" && v.Type == gjson.String:
			if g, ver, ok := strings.Cut(v.Str, "/"); ok && rule != nil {
				// The request's rename decides, also for a target group that several share.
				if from, to := rule.side(d); g == from {
					e.setString(v, to+"/"+ver)
					break
				}
			}
			if na, _, ok := r.gvk(d, v.Str, ""); ok {
				e.setString(v, na)
			}
		case len(segs) == 1 && segs[0] == "kind" && v.Type == gjson.String && rule != nil:
			if nk, ok := rule.kind(d, v.Str); ok {
				e.setString(v, nk)
			}
		case len(segs) == 3 && segs[0] == "metadata" && segs[1] == "finalizers" && v.Type == gjson.String:
			if nk, ok := r.key(d, v.Str); ok {
				e.setString(v, nk)
			}
		case len(segs) == 2 && segs[0] == "metadata" && (segs[1] == "labels" || segs[1] == "annotations") && v.IsObject():
			if raw, ok := renameKeys(v, func(k string) (string, bool) { return r.key(d, k) }); ok {
				e.setRaw(v, raw)
			}
		case len(segs) == 2 && segs[0] == "metadata" && segs[1] == "finalizers" && v.IsArray():
			if raw, ok := mapStrings(v, func(s string) (string, bool) { return r.key(d, s) }); ok {
				e.setRaw(v, raw)
			}
		case len(segs) >= 2 && segs[0] == "metadata" && segs[1] == "ownerReferences":
			if len(segs) == 2 && v.IsArray() {
				v.ForEach(func(_, ref gjson.Result) bool {
					r.gvkEdits(d, e, ref, "apiVersion", "kind")
					return true
				})
			} else if len(segs) == 3 && v.IsObject() {
				r.gvkEdits(d, e, v, "apiVersion", "kind")
			}
		case len(segs) == 1 && segs[0] == "metadata" && v.IsObject():
			r.metadataEdits(d, e, v, "")
		case v.IsObject():
			// A whole object or a part of one; parts carry no names of their own.
			r.objectEdits(d, e, v, typeHint{})
		}
		return true
	})
	return e.bytes()
}

// pointer renames a JSON pointer into metadata labels, annotations or finalizers.
func (r *Rules) pointer(d direction, p string) (string, bool) {
	segs := splitPointer(p)
	if len(segs) == 3 && segs[0] == "metadata" && (segs[1] == "labels" || segs[1] == "annotations") {
		if nk, ok := r.key(d, segs[2]); ok {
			return "/metadata/" + segs[1] + "/" + escapePointer(nk), true
		}
	}
	return p, false
}

// splitPointer splits and unescapes an RFC 6901 pointer ("" is the whole document).
func splitPointer(p string) []string {
	if p == "" || p[0] != '/' {
		return nil
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		segs[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return segs
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
