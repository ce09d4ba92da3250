package rewrite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// typeHint names the apiVersion and kind of objects that do not carry them (items of lists
// of built-in types).
type typeHint struct {
	apiVersion, kind string
}

// editor applies edits to one JSON document. Paths are sjson paths built only from
// names that need no escaping and array indexes.
type editor struct {
	data []byte
	err  error
}

func (e *editor) setRaw(path, raw string) {
	if e.err != nil {
		return
	}
	e.data, e.err = sjson.SetRawBytes(e.data, path, []byte(raw))
}

func (e *editor) setString(path, s string) {
	e.setRaw(path, quote(s))
}

// quote returns s as a JSON string.
func quote(s string) string {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			plain = false
			break
		}
	}
	if plain {
		return `"` + s + `"`
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// object rewrites one JSON object in direction d: a single object, a List, a Table, a
// Status or a watch event. Objects that mention nothing of the rules come back as they are.
func (r *Rules) object(d direction, data []byte, hint typeHint) ([]byte, error) {
	if r == nil || !r.mentions(d, data) {
		return data, nil
	}
	doc := gjson.ParseBytes(data)
	if !doc.IsObject() {
		if len(bytes.TrimSpace(data)) == 0 || doc.Type != gjson.JSON {
			return data, nil
		}
		return nil, fmt.Errorf("not a JSON object")
	}
	if !gjson.ValidBytes(data) {
		return nil, fmt.Errorf("malformed JSON")
	}
	e := &editor{data: data}
	r.objectEdits(d, e, doc, "", hint)
	if e.err != nil {
		return nil, e.err
	}
	return e.data, nil
}

// objectEdits collects the edits of the object doc found at path (sjson path prefix, "" for
// the document itself).
func (r *Rules) objectEdits(d direction, e *editor, doc gjson.Result, path string, hint typeHint) {
	p := func(s string) string {
		if path == "" {
			return s
		}
		return path + "." + s
	}
	apiVersion, kind := doc.Get("apiVersion").String(), doc.Get("kind").String()
	if apiVersion == "" && kind == "" {
		if t := doc.Get("type"); t.Exists() && doc.Get("object").IsObject() && len(doc.Map()) <= 2 {
			// A watch event without its WatchEvent kind, as the watch stream sends it.
			r.objectEdits(d, e, doc.Get("object"), p("object"), hint)
			return
		}
		apiVersion, kind = hint.apiVersion, hint.kind
	}
	group, _, _ := strings.Cut(apiVersion, "/")
	if !strings.Contains(apiVersion, "/") {
		group = ""
	}
	// Containers first.
	switch {
	case kind == "WatchEvent":
		if o := doc.Get("object"); o.IsObject() {
			r.objectEdits(d, e, o, p("object"), hint)
		}
	case kind == "Table" && group == "meta.k8s.io":
		doc.Get("rows").ForEach(func(i, row gjson.Result) bool {
			if o := row.Get("object"); o.IsObject() {
				r.objectEdits(d, e, o, p("rows."+i.String()+".object"), typeHint{})
			}
			return true
		})
	case strings.HasSuffix(kind, "List") && doc.Get("items").IsArray():
		itemHint := typeHint{apiVersion: apiVersion, kind: strings.TrimSuffix(kind, "List")}
		doc.Get("items").ForEach(func(i, item gjson.Result) bool {
			if item.IsObject() {
				r.objectEdits(d, e, item, p("items."+i.String()), itemHint)
			}
			return true
		})
	case kind == "Status" && (apiVersion == "v1" || apiVersion == ""):
		r.statusEdits(d, e, doc, path)
	}
	// The object's own names, when it carries them.
	if v := doc.Get("apiVersion"); v.Type == gjson.String {
		if na, nk, ok := r.gvk(d, v.Str, doc.Get("kind").String()); ok {
			e.setString(p("apiVersion"), na)
			if k := doc.Get("kind"); k.Type == gjson.String && nk != k.Str {
				e.setString(p("kind"), nk)
			}
		}
	}
	if m := doc.Get("metadata"); m.IsObject() {
		r.metadataEdits(d, e, m, p("metadata"), doc.Get("apiVersion").String(), kind)
	}
	r.referenceEdits(d, e, doc, path, group, kind)
}

// lastApplied is the annotation in which kubectl keeps the object it last applied.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// metadataEdits renames label, annotation and finalizer keys, ownerReferences and managedFields.
func (r *Rules) metadataEdits(d direction, e *editor, m gjson.Result, path, apiVersion, kind string) {
	if v := m.Get("annotations"); v.IsObject() {
		if raw, ok := r.annotations(d, v); ok {
			e.setRaw(path+".annotations", raw)
		}
	}
	if len(r.prefixes) > 0 {
		if v := m.Get("labels"); v.IsObject() {
			if raw, ok := renameKeys(v, func(k string) (string, bool) { return r.key(d, k) }); ok {
				e.setRaw(path+".labels", raw)
			}
		}
		if v := m.Get("finalizers"); v.IsArray() {
			if raw, ok := mapStrings(v, func(s string) (string, bool) { return r.key(d, s) }); ok {
				e.setRaw(path+".finalizers", raw)
			}
		}
	}
	m.Get("ownerReferences").ForEach(func(i, ref gjson.Result) bool {
		r.gvkEdits(d, e, ref, path+".ownerReferences."+i.String(), "apiVersion", "kind")
		return true
	})
	m.Get("managedFields").ForEach(func(i, mf gjson.Result) bool {
		if v := mf.Get("apiVersion"); v.Type == gjson.String {
			if na, _, ok := r.gvk(d, v.Str, kind); ok {
				e.setString(path+".managedFields."+i.String()+".apiVersion", na)
			}
		}
		if len(r.prefixes) > 0 {
			if fm := mf.Get("fieldsV1.f:metadata"); fm.IsObject() {
				if raw, ok := r.fieldsMetadata(d, fm); ok {
					e.setRaw(path+".managedFields."+i.String()+".fieldsV1.f:metadata", raw)
				}
			}
		}
		return true
	})
}

// fieldsMetadata renames keys in a managedFields f:metadata set: "f:<label key>" under
// f:labels and f:annotations, and `v:"<finalizer>"` under f:finalizers.
func (r *Rules) fieldsMetadata(d direction, fm gjson.Result) (string, bool) {
	var out []string
	changed := false
	fm.ForEach(func(k, v gjson.Result) bool {
		raw := v.Raw
		switch k.Str {
		case "f:labels", "f:annotations":
			if nr, ok := renameKeys(v, func(key string) (string, bool) {
				name, ok := strings.CutPrefix(key, "f:")
				if !ok {
					return key, false
				}
				nk, ok := r.key(d, name)
				return "f:" + nk, ok
			}); ok {
				raw, changed = nr, true
			}
		case "f:finalizers":
			if nr, ok := renameKeys(v, func(key string) (string, bool) {
				val, ok := strings.CutPrefix(key, "v:")
				if !ok {
					return key, false
				}
				var s string
				if json.Unmarshal([]byte(val), &s) != nil {
					return key, false
				}
				nk, ok := r.key(d, s)
				return "v:" + quote(nk), ok
			}); ok {
				raw, changed = nr, true
			}
		}
		out = append(out, k.Raw+":"+raw)
		return true
	})
	if !changed {
		return "", false
	}
	return "{" + strings.Join(out, ",") + "}", true
}

// gvkEdits renames an apiVersion and kind pair found in obj under the given member names.
func (r *Rules) gvkEdits(d direction, e *editor, obj gjson.Result, path, avField, kindField string) {
	av := obj.Get(avField)
	if av.Type != gjson.String {
		return
	}
	k := obj.Get(kindField)
	na, nk, ok := r.gvk(d, av.Str, k.String())
	if !ok {
		return
	}
	e.setString(path+"."+avField, na)
	if k.Type == gjson.String && nk != k.Str {
		e.setString(path+"."+kindField, nk)
	}
}

// statusEdits renames details.group and details.kind (a resource or a kind) of a Status and
// the qualified resource names in its message.
func (r *Rules) statusEdits(d direction, e *editor, doc gjson.Result, path string) {
	p := func(s string) string {
		if path == "" {
			return s
		}
		return path + "." + s
	}
	det := doc.Get("details")
	g := det.Get("group")
	if g.Type == gjson.String && g.Str != "" {
		k := det.Get("kind").String()
		kind, resource := "", k
		if k != "" && k[0] >= 'A' && k[0] <= 'Z' {
			kind, resource = k, ""
		}
		if rule := r.ruleForGroup(d, g.Str, kind, resource); rule != nil {
			_, to := rule.side(d)
			e.setString(p("details.group"), to)
			if k != "" {
				var nk string
				if kind != "" {
					nk, _ = rule.kind(d, k)
				} else {
					nk, _ = rule.resource(d, k)
				}
				if nk != k {
					e.setString(p("details.kind"), nk)
				}
			}
		}
	}
	if msg := doc.Get("message"); msg.Type == gjson.String {
		if nm, ok := r.message(d, msg.Str); ok {
			e.setString(p("message"), nm)
		}
	}
	det.Get("causes").ForEach(func(i, c gjson.Result) bool {
		if msg := c.Get("message"); msg.Type == gjson.String {
			if nm, ok := r.message(d, msg.Str); ok {
				e.setString(p("details.causes."+i.String()+".message"), nm)
			}
		}
		return true
	})
}

// message renames group-qualified resources ("<resource>.<group>"), apiVersions ("<group>/")
// and prefixed kinds in an error message. Words are separated by anything that cannot be part
// of a name.
func (r *Rules) message(d direction, msg string) (string, bool) {
	if !r.mentions(d, []byte(msg)) {
		return msg, false
	}
	var b strings.Builder
	changed := false
	start := -1
	flush := func(end int) {
		w := msg[start:end]
		if nw, ok := r.word(d, w); ok {
			w, changed = nw, true
		}
		b.WriteString(w)
	}
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		nameByte := c == '.' || c == '-' || c == '_' || c == '/' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		switch {
		case nameByte && start < 0:
			start = i
		case !nameByte && start >= 0:
			flush(i)
			start = -1
			b.WriteByte(c)
		case !nameByte:
			b.WriteByte(c)
		}
	}
	if start >= 0 {
		flush(len(msg))
	}
	return b.String(), changed
}

// word renames one word of a message: "<resource>.<group>", "<group>/<version>" or a group.
func (r *Rules) word(d direction, w string) (string, bool) {
	if g, v, ok := strings.Cut(w, "/"); ok {
		if rule := r.ruleForGroup(d, g, "", ""); rule != nil {
			_, to := rule.side(d)
			return to + "/" + v, true
		}
		return w, false
	}
	if rule := r.ruleForGroup(d, w, "", ""); rule != nil {
		_, to := rule.side(d)
		return to, true
	}
	for i := 0; i < len(w); i++ {
		if w[i] != '.' {
			continue
		}
		if head := w[:i]; head != "" && head[0] >= 'A' && head[0] <= 'Z' {
			// Invalid errors qualify the kind: "<Kind>.<group>".
			if rule := r.ruleForGroup(d, w[i+1:], head, ""); rule != nil {
				_, to := rule.side(d)
				k, _ := rule.kind(d, head)
				return k + "." + to, true
			}
			continue
		}
		if g, res, ok := r.groupResource(d, w[i+1:], w[:i]); ok {
			return res + "." + g, true
		}
	}
	return w, false
}

// annotations renames annotation keys, and the object in kubectl's last applied
// configuration, so that client-side apply compares like with like on either side.
func (r *Rules) annotations(d direction, obj gjson.Result) (string, bool) {
	changed := false
	var b strings.Builder
	b.WriteByte('{')
	first := true
	obj.ForEach(func(k, v gjson.Result) bool {
		if !first {
			b.WriteByte(',')
		}
		first = false
		if nk, ok := r.key(d, k.Str); ok && nk != k.Str {
			changed = true
			b.WriteString(quote(nk))
		} else {
			b.WriteString(k.Raw)
		}
		b.WriteByte(':')
		if k.Str == lastApplied && v.Type == gjson.String && r.mentions(d, []byte(v.Str)) && gjson.Valid(v.Str) && gjson.Parse(v.Str).IsObject() {
			if nv, err := r.object(d, []byte(v.Str), typeHint{}); err == nil && string(nv) != v.Str {
				changed = true
				b.WriteString(quote(string(nv)))
				return true
			}
		}
		b.WriteString(v.Raw)
		return true
	})
	b.WriteByte('}')
	return b.String(), changed
}

// renameKeys rebuilds a JSON object with keys renamed by f, keeping order and values.
func renameKeys(obj gjson.Result, f func(string) (string, bool)) (string, bool) {
	changed := false
	var b strings.Builder
	b.WriteByte('{')
	first := true
	obj.ForEach(func(k, v gjson.Result) bool {
		if !first {
			b.WriteByte(',')
		}
		first = false
		if nk, ok := f(k.Str); ok && nk != k.Str {
			changed = true
			b.WriteString(quote(nk))
		} else {
			b.WriteString(k.Raw)
		}
		b.WriteByte(':')
		b.WriteString(v.Raw)
		return true
	})
	b.WriteByte('}')
	return b.String(), changed
}

// mapStrings rebuilds a JSON array with its string elements renamed by f.
func mapStrings(arr gjson.Result, f func(string) (string, bool)) (string, bool) {
	changed := false
	var b strings.Builder
	b.WriteByte('[')
	first := true
	arr.ForEach(func(_, v gjson.Result) bool {
		if !first {
			b.WriteByte(',')
		}
		first = false
		if v.Type == gjson.String {
			if ns, ok := f(v.Str); ok && ns != v.Str {
				changed = true
				b.WriteString(quote(ns))
				return true
			}
		}
		b.WriteString(v.Raw)
		return true
	})
	b.WriteByte(']')
	return b.String(), changed
}

// itoa is strconv.Itoa, named for paths.
func itoa(i int) string { return strconv.Itoa(i) }
