package rewrite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// typeHint names the apiVersion and kind of objects that do not carry them (items of lists
// of built-in types).
type typeHint struct {
	apiVersion, kind string
}

// editor collects replacements of values of one JSON document, found with gjson (whose
// results know their offsets), and applies them in one pass: a document is copied once, however
// many names it holds.
type editor struct {
	data  []byte
	edits []edit
	err   error
}

type edit struct {
	start, end int
	raw        string
}

// setRaw replaces the value at (a result of gjson on e.data) with raw JSON.
func (e *editor) setRaw(at gjson.Result, raw string) {
	if e.err != nil || !at.Exists() {
		return
	}
	start, end := at.Index, at.Index+len(at.Raw)
	if start <= 0 || end > len(e.data) || string(e.data[start:end]) != at.Raw {
		e.err = fmt.Errorf("rewrite: a value to replace is not where the document has it")
		return
	}
	e.edits = append(e.edits, edit{start: start, end: end, raw: raw})
}

// setString replaces the value at with the JSON string s.
func (e *editor) setString(at gjson.Result, s string) {
	e.setRaw(at, quote(s))
}

// bytes returns the edited document.
func (e *editor) bytes() ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	if len(e.edits) == 0 {
		return e.data, nil
	}
	return e.appendTo(nil)
}

// appendTo appends the edited document to out.
func (e *editor) appendTo(out []byte) ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	// The fast path collects edits in order; the general path may not.
	if !slices.IsSortedFunc(e.edits, compareEdits) {
		slices.SortStableFunc(e.edits, compareEdits)
	}
	n := len(e.data)
	for i, ed := range e.edits {
		if i > 0 && ed.start < e.edits[i-1].end {
			return nil, fmt.Errorf("rewrite: overlapping edits")
		}
		n += len(ed.raw) - (ed.end - ed.start)
	}
	out = slices.Grow(out, n)
	last := 0
	for _, ed := range e.edits {
		out = append(out, e.data[last:ed.start]...)
		out = append(out, ed.raw...)
		last = ed.end
	}
	return append(out, e.data[last:]...), nil
}

func compareEdits(a, b edit) int { return a.start - b.start }

// writeQuoted writes s as a JSON string.
func writeQuoted(b *strings.Builder, s string) {
	if plainString(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	b.WriteString(quote(s))
}

// plainString reports whether s needs no escapes in JSON.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			return false
		}
	}
	return true
}

// quote returns s as a JSON string.
func quote(s string) string {
	if plainString(s) {
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
	return r.objectWith(d, data, hint, nil)
}

// objectWith is object with what a stream reuses between items; with sc, the result may be
// sc.out, valid until the next call.
func (r *Rules) objectWith(d direction, data []byte, hint typeHint, sc *scratch) ([]byte, error) {
	if r == nil || !r.mentions(d, data) {
		return data, nil
	}
	// The document is only read while the edits are collected: no copy of it as a string.
	doc := gjson.Parse(unsafe.String(unsafe.SliceData(data), len(data)))
	if !doc.IsObject() {
		if len(bytes.TrimSpace(data)) == 0 || doc.Type != gjson.JSON {
			return data, nil
		}
		return nil, fmt.Errorf("not a JSON object")
	}
	if err := CheckJSON(data); err != nil {
		return nil, err
	}
	e := &editor{data: data}
	if sc != nil {
		e.edits = sc.edits[:0]
		defer func() { sc.edits = e.edits[:0] }()
	}
	if r.general || !r.fastObject(d, data, e, sc) {
		e.edits, e.err = e.edits[:0], nil
		r.objectEdits(d, e, doc, hint)
	}
	if sc == nil || e.err != nil || len(e.edits) == 0 {
		return e.bytes()
	}
	out, err := e.appendTo(sc.out[:0])
	if err == nil {
		sc.out = out
	}
	return out, err
}

// objectEdits collects the edits of the object doc.
func (r *Rules) objectEdits(d direction, e *editor, doc gjson.Result, hint typeHint) {
	// One pass over the members: an object is scanned once, not once per name.
	var av, k, meta, typ, obj, rows, items, spec gjson.Result
	members := 0
	doc.ForEach(func(key, v gjson.Result) bool {
		members++
		switch key.Str {
		case "apiVersion":
			av = v
		case "kind":
			k = v
		case "metadata":
			meta = v
		case "type":
			typ = v
		case "object":
			obj = v
		case "rows":
			rows = v
		case "items":
			items = v
		case "spec":
			spec = v
		}
		return true
	})
	apiVersion, kind := av.String(), k.String()
	if apiVersion == "" && kind == "" {
		if typ.Exists() && obj.IsObject() && members == 2 {
			// A watch event without its WatchEvent kind, as the watch stream sends it.
			r.objectEdits(d, e, obj, hint)
			return
		}
		apiVersion, kind = hint.apiVersion, hint.kind
	}
	group := ""
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		group = g
	}
	// Containers first.
	switch {
	case kind == "WatchEvent":
		if obj.IsObject() {
			r.objectEdits(d, e, obj, hint)
		}
	case kind == "Table" && group == "meta.k8s.io":
		rows.ForEach(func(_, row gjson.Result) bool {
			r.rowEdits(d, e, row, hint)
			return true
		})
	case strings.HasSuffix(kind, "List") && items.IsArray():
		itemHint := typeHint{apiVersion: apiVersion, kind: strings.TrimSuffix(kind, "List")}
		items.ForEach(func(_, item gjson.Result) bool {
			if item.IsObject() {
				r.objectEdits(d, e, item, itemHint)
			}
			return true
		})
	case kind == "Status" && (apiVersion == "v1" || apiVersion == ""):
		r.statusEdits(d, e, doc)
	}
	// The object's own names, when it carries them.
	if av.Type == gjson.String {
		if na, nk, ok := r.gvk(d, av.Str, k.String()); ok {
			e.setString(av, na)
			if k.Type == gjson.String && nk != k.Str {
				e.setString(k, nk)
			}
		}
	}
	if meta.IsObject() {
		r.metadataEdits(d, e, meta, kind)
		if kind == "PartialObjectMetadata" && hint.kind == "CustomResourceDefinition" {
			// Without its spec, a CRD's object still has its name: <plural>.<group>.
			if n := meta.Get("name"); n.Type == gjson.String {
				if nn, ok := r.crdName(d, n.Str); ok {
					e.setString(n, nn)
				}
			}
		}
	}
	if spec.IsObject() && len(r.prefixes) > 0 && r.mentionsString(d, spec.Raw) {
		r.templateEdits(d, e, spec)
	}
	r.referenceEdits(d, e, doc, group, kind)
}

// templateEdits renames label and annotation keys where objects of any kind keep them for
// other objects, so that what a controller creates matches what the client selects: pod
// templates (spec.template.metadata, spec.jobTemplate.spec.template.metadata), selectors
// (spec.selector as a label selector or, in Services, a map of labels; a job template's).
func (r *Rules) templateEdits(d direction, e *editor, spec gjson.Result) {
	for _, p := range []string{"template.metadata", "jobTemplate.spec.template.metadata"} {
		if m := spec.Get(p); m.IsObject() {
			for _, f := range []string{"labels", "annotations"} {
				if v := m.Get(f); v.IsObject() {
					if raw, ok := renameKeys(v, func(k string) (string, bool) { return r.key(d, k) }); ok {
						e.setRaw(v, raw)
					}
				}
			}
		}
	}
	for _, p := range []string{"selector", "jobTemplate.spec.selector"} {
		sel := spec.Get(p)
		if !sel.IsObject() {
			continue
		}
		ml, me := sel.Get("matchLabels"), sel.Get("matchExpressions")
		if !ml.Exists() && !me.Exists() {
			ml = sel // a Service's selector is the map itself
		}
		if ml.IsObject() {
			if raw, ok := renameKeys(ml, func(k string) (string, bool) { return r.key(d, k) }); ok {
				e.setRaw(ml, raw)
			}
		}
		me.ForEach(func(_, x gjson.Result) bool {
			if k := x.Get("key"); k.Type == gjson.String {
				if nk, ok := r.key(d, k.Str); ok {
					e.setString(k, nk)
				}
			}
			return true
		})
	}
}

// lastApplied is the annotation in which kubectl keeps the object it last applied.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// rowEdits renames a Table row's object and, for CRDs, the name in its cells.
func (r *Rules) rowEdits(d direction, e *editor, row gjson.Result, hint typeHint) {
	if o := row.Get("object"); o.IsObject() {
		r.objectEdits(d, e, o, hint)
	}
	if hint.kind == "CustomResourceDefinition" {
		row.Get("cells").ForEach(func(_, c gjson.Result) bool {
			if c.Type == gjson.String {
				if nn, ok := r.crdName(d, c.Str); ok {
					e.setString(c, nn)
				}
			}
			return true
		})
	}
}

// metadataEdits renames label, annotation and finalizer keys, ownerReferences and managedFields.
func (r *Rules) metadataEdits(d direction, e *editor, m gjson.Result, kind string) {
	// One pass over the members; each is looked at only when it can hold a name.
	m.ForEach(func(key, v gjson.Result) bool {
		switch key.Str {
		case "annotations":
			if v.IsObject() && r.mentionsString(d, v.Raw) {
				if raw, ok := r.annotations(d, v); ok {
					e.setRaw(v, raw)
				}
			}
		case "labels":
			if len(r.prefixes) > 0 && v.IsObject() && r.mentionsString(d, v.Raw) {
				if raw, ok := renameKeys(v, func(k string) (string, bool) { return r.key(d, k) }); ok {
					e.setRaw(v, raw)
				}
			}
		case "finalizers":
			if len(r.prefixes) > 0 && v.IsArray() {
				if raw, ok := mapStrings(v, func(s string) (string, bool) { return r.key(d, s) }); ok {
					e.setRaw(v, raw)
				}
			}
		case "ownerReferences":
			v.ForEach(func(_, ref gjson.Result) bool {
				r.gvkEdits(d, e, ref, "apiVersion", "kind")
				return true
			})
		case "managedFields":
			v.ForEach(func(_, mf gjson.Result) bool {
				r.managedFieldsEdits(d, e, mf, kind)
				return true
			})
		}
		return true
	})
}

// managedFieldsEdits renames one managedFields entry: apiVersion, and the label, annotation
// and finalizer keys in its f:metadata.
func (r *Rules) managedFieldsEdits(d direction, e *editor, mf gjson.Result, kind string) {
	if !r.mentionsString(d, mf.Raw) {
		return
	}
	mf.ForEach(func(key, v gjson.Result) bool {
		switch key.Str {
		case "apiVersion":
			if v.Type == gjson.String {
				if na, _, ok := r.gvk(d, v.Str, kind); ok {
					e.setString(v, na)
				}
			}
		case "fieldsV1":
			if len(r.prefixes) > 0 {
				if fm := v.Get("f:metadata"); fm.IsObject() {
					if raw, ok := r.fieldsMetadata(d, fm); ok {
						e.setRaw(fm, raw)
					}
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
	out = make([]string, 0, 8)
	fm.ForEach(func(k, v gjson.Result) bool {
		raw := v.Raw
		switch k.Str {
		case "f:labels", "f:annotations":
			if nr, ok := renameKeys(v, func(key string) (string, bool) {
				name, ok := strings.CutPrefix(key, "f:")
				if !ok {
					return key, false
				}
				return r.keyWithin(d, "f:", name)
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
func (r *Rules) gvkEdits(d direction, e *editor, obj gjson.Result, avField, kindField string) {
	av := obj.Get(avField)
	if av.Type != gjson.String {
		return
	}
	k := obj.Get(kindField)
	na, nk, ok := r.gvk(d, av.Str, k.String())
	if !ok {
		return
	}
	e.setString(av, na)
	if k.Type == gjson.String && nk != k.Str {
		e.setString(k, nk)
	}
}

// statusEdits renames details.group and details.kind (a resource or a kind) of a Status and
// the qualified resource names in its message.
func (r *Rules) statusEdits(d direction, e *editor, doc gjson.Result) {
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
			e.setString(g, to)
			if k != "" {
				var nk string
				if kind != "" {
					nk, _ = rule.kind(d, k)
				} else {
					nk, _ = rule.resource(d, k)
				}
				if nk != k {
					e.setString(det.Get("kind"), nk)
				}
			}
		}
	}
	if g.Str == "apiextensions.k8s.io" && det.Get("kind").Str == "customresourcedefinitions" {
		if n := det.Get("name"); n.Type == gjson.String {
			if nn, ok := r.crdName(d, n.Str); ok {
				e.setString(n, nn)
			}
		}
	}
	if msg := doc.Get("message"); msg.Type == gjson.String {
		if nm, ok := r.message(d, msg.Str); ok {
			e.setString(msg, nm)
		}
	}
	det.Get("causes").ForEach(func(_, c gjson.Result) bool {
		if msg := c.Get("message"); msg.Type == gjson.String {
			if nm, ok := r.message(d, msg.Str); ok {
				e.setString(msg, nm)
			}
		}
		return true
	})
}

// message renames group-qualified resources ("<resource>.<group>"), apiVersions ("<group>/")
// and prefixed kinds in an error message. Words are separated by anything that cannot be part
// of a name.
func (r *Rules) message(d direction, msg string) (string, bool) {
	if !r.mentionsString(d, msg) {
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
		if k.Str == lastApplied && v.Type == gjson.String && r.mentionsString(d, v.Str) && checkJSON(v.Str, 0) == nil && gjson.Parse(v.Str).IsObject() {
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
	b.Grow(len(obj.Raw) + 64)
	b.WriteByte('{')
	first := true
	obj.ForEach(func(k, v gjson.Result) bool {
		if !first {
			b.WriteByte(',')
		}
		first = false
		if nk, ok := f(k.Str); ok && nk != k.Str {
			changed = true
			writeQuoted(&b, nk)
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
