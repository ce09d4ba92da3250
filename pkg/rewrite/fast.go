package rewrite

import (
	"bytes"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// The fast path rewrites the objects that make up nearly all of a List or a watch: objects of a
// kind without references of its own, whose strings carry no escapes. It walks the document
// once, looks only where names can be (apiVersion and kind; metadata's labels, annotations,
// finalizers, ownerReferences and managedFields; a spec's templates and selectors through the
// general path), and collects edits by offset. Everything else takes objectEdits, which the
// fast path must match (see FuzzFastPath).

// fastKinds are kinds (with their group) that the fast path leaves to objectEdits.
func fastEligible(group, kind string) bool {
	if kind == "" || kind == "WatchEvent" || kind == "Table" || kind == "Status" || kind == "PartialObjectMetadata" || strings.HasSuffix(kind, "List") {
		return false
	}
	switch group {
	case "apiextensions.k8s.io", "rbac.authorization.k8s.io", "admissionregistration.k8s.io", "authorization.k8s.io", "events.k8s.io":
		return false
	case "":
		return kind != "Event"
	}
	return true
}

// fastObject rewrites a valid JSON object, or reports false when it is not one the fast path
// takes (then its edits are to be dropped).
func (r *Rules) fastObject(d direction, data []byte, e *editor, sc *scratch) bool {
	w := walker{b: data, sc: sc}
	i := w.space(0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	switch {
	case sc != nil && sc.matched && len(sc.match) == len(data):
		w.match = sc.match // indexed while it was read
	case sc != nil && len(data) <= maxIndexed:
		sc.match = w.index(sc.match)
	}
	// A watch event {"type":...,"object":{...}}: its object.
	var typ, obj span
	members := 0
	w.members(i, func(key, val span) bool {
		members++
		switch w.name(key) {
		case "type":
			typ = val
		case "object":
			obj = val
		}
		return members <= 2
	})
	if members == 2 && typ.valid() && obj.valid() && data[obj.start] == '{' {
		i = obj.start
	}
	return r.fastObjectAt(d, &w, i, e)
}

// fastObjectAt rewrites the object that starts at i.
func (r *Rules) fastObjectAt(d direction, w *walker, i int, e *editor) bool {
	data := w.b
	// apiVersion and kind come first in what kube-apiserver writes; find them, wherever they are.
	var av, kind span
	var meta, spec span
	ok := w.members(i, func(key span, val span) bool {
		switch w.name(key) {
		case "apiVersion":
			av = val
		case "kind":
			kind = val
		case "metadata":
			meta = val
		case "spec":
			spec = val
		case "type", "object", "items", "rows":
			return false // a watch event or a container: the general path
		}
		return true
	})
	if !ok || !av.isString(data) || !kind.isString(data) {
		return false
	}
	apiVersion, k := w.text(av), w.text(kind)
	group := ""
	if g, _, found := strings.Cut(apiVersion, "/"); found {
		group = g
	}
	if !fastEligible(group, k) {
		return false
	}
	if v := r.fastGVK(d, w, apiVersion, k); v.ok {
		e.setSpan(av, v.x)
		if v.y != "" {
			e.setSpan(kind, v.y)
		}
	}
	if meta.valid() && data[meta.start] == '{' {
		r.fastMetadata(d, w, meta, k, e)
	}
	if spec.valid() && data[spec.start] == '{' && len(r.prefixes) > 0 && w.hasTemplates(spec) && r.mentionsString(d, w.str(spec)) {
		r.templateEdits(d, e, w.result(spec))
	}
	return !w.bail
}

// fastMetadata renames label, annotation and finalizer keys, ownerReferences and managedFields.
func (r *Rules) fastMetadata(d direction, w *walker, meta span, kind string, e *editor) {
	w.members(meta.start, func(key, val span) bool {
		switch w.name(key) {
		case "labels":
			if len(r.prefixes) > 0 && w.b[val.start] == '{' {
				w.members(val.start, func(k, _ span) bool {
					if v := r.fastName(d, w, opKey, w.text(k)); v.ok {
						e.setSpan(k, v.x)
					}
					return true
				})
			}
		case "annotations":
			if w.b[val.start] == '{' && r.mentionsString(d, w.str(val)) {
				w.members(val.start, func(k, v span) bool {
					name := w.text(k)
					if len(r.prefixes) > 0 {
						if v := r.fastName(d, w, opKey, name); v.ok {
							e.setSpan(k, v.x)
						}
					}
					if name == lastApplied && v.isString(w.b) {
						s := w.result(v).Str // JSON in a string: unescaped
						if r.mentionsString(d, s) && checkJSON(s, 0) == nil && gjson.Parse(s).IsObject() {
							if nv, err := r.object(d, []byte(s), typeHint{}); err == nil && string(nv) != s {
								e.setSpan(v, quote(string(nv)))
							}
						}
					}
					return true
				})
			}
		case "finalizers":
			if len(r.prefixes) > 0 && w.b[val.start] == '[' {
				w.elements(val.start, func(v span) {
					if v.isString(w.b) {
						if n := r.fastName(d, w, opKey, w.text(v)); n.ok {
							e.setSpan(v, n.x)
						}
					}
				})
			}
		case "ownerReferences":
			if w.b[val.start] == '[' {
				w.elements(val.start, func(ref span) {
					if w.b[ref.start] != '{' {
						return
					}
					var av, k span
					w.members(ref.start, func(key, v span) bool {
						switch w.name(key) {
						case "apiVersion":
							av = v
						case "kind":
							k = v
						}
						return true
					})
					if av.isString(w.b) {
						kindStr := ""
						if k.isString(w.b) {
							kindStr = w.text(k)
						}
						if v := r.fastGVK(d, w, w.text(av), kindStr); v.ok {
							e.setSpan(av, v.x)
							if k.isString(w.b) && v.y != "" {
								e.setSpan(k, v.y)
							}
						}
					}
				})
			}
		case "managedFields":
			if w.b[val.start] == '[' && r.mentionsString(d, w.str(val)) {
				w.elements(val.start, func(mf span) {
					if w.b[mf.start] == '{' {
						r.fastManagedFields(d, w, mf, kind, e)
					}
				})
			}
		}
		return true
	})
}

// fastManagedFields renames one managedFields entry.
func (r *Rules) fastManagedFields(d direction, w *walker, mf span, kind string, e *editor) {
	w.members(mf.start, func(key, v span) bool {
		switch w.name(key) {
		case "apiVersion":
			if v.isString(w.b) {
				if g := r.fastGVK(d, w, w.text(v), kind); g.ok {
					e.setSpan(v, g.x)
				}
			}
		case "fieldsV1":
			if len(r.prefixes) == 0 || w.b[v.start] != '{' {
				return true
			}
			w.members(v.start, func(k, fm span) bool {
				if w.name(k) != "f:metadata" || w.b[fm.start] != '{' {
					return true
				}
				w.members(fm.start, func(k, set span) bool {
					field := w.name(k)
					if (field != "f:labels" && field != "f:annotations" && field != "f:finalizers") || w.b[set.start] != '{' {
						return true
					}
					w.members(set.start, func(item, _ span) bool {
						if field != "f:finalizers" {
							if name := w.text(item); strings.HasPrefix(name, "f:") {
								if v := r.fastName(d, w, opFieldKey, name[2:]); v.ok {
									e.setSpan(item, v.x)
								}
							}
							return true
						}
						// `v:"<finalizer>"`, as it is written in JSON: "v:\"<finalizer>\"".
						raw := w.str(item.inner())
						if val, ok := strings.CutPrefix(raw, `v:\"`); ok {
							if val, ok = strings.CutSuffix(val, `\"`); ok && strings.IndexByte(val, '\\') < 0 {
								if v := r.fastName(d, w, opFinalizerField, val); v.ok {
									e.setSpan(item, v.x)
								}
								return true
							}
						}
						if strings.HasPrefix(raw, "v:") {
							w.bail = true // another escape: the general path unescapes
						}
						return true
					})
					return true
				})
				return true
			})
		}
		return true
	})
}

// hasTemplates reports whether a spec has a member that templateEdits looks into: a spec
// without one (most, and a large one costs a scan for names) needs no look at all.
func (w *walker) hasTemplates(spec span) bool {
	found := false
	w.members(spec.start, func(k, _ span) bool {
		switch name := w.name(k); name {
		case "template", "jobTemplate", "selector":
			found = true
		default:
			found = strings.IndexByte(name, '\\') >= 0 // an escaped name may be one of them
		}
		return !found
	})
	return found
}

// span is a JSON value's (or key's) place in the document: [start, end).
type span struct{ start, end int }

func (s span) valid() bool { return s.end > s.start }

// inner is a string's place without its quotes.
func (s span) inner() span { return span{s.start + 1, s.end - 1} }

func (s span) isString(b []byte) bool { return s.valid() && b[s.start] == '"' }

// setSpan replaces the value at s with raw JSON.
func (e *editor) setSpan(s span, raw string) {
	if e.err == nil {
		e.edits = append(e.edits, edit{start: s.start, end: s.end, raw: raw})
	}
}

// walker walks valid JSON (checked before).
type walker struct {
	b []byte
	// match holds, at the offset of each '{' and '[', the offset of its closing bracket, when
	// the document is indexed: skipping a container is then one look-up, so that walking
	// down into metadata does not scan the same bytes once per level.
	match []int32
	sc    *scratch
	// bail is set when a string that may need renaming holds escapes: the general path
	// unescapes them.
	bail bool
}

// name returns a member name without its quotes (escapes stay: names compared with
// constants never hold any).
func (w *walker) name(s span) string { return w.str(s.inner()) }

// text returns a string value's text; one with escapes sets bail.
func (w *walker) text(s span) string {
	if !s.isString(w.b) {
		return ""
	}
	t := w.str(s.inner())
	if strings.IndexByte(t, '\\') >= 0 {
		w.bail = true
	}
	return t
}

// stringEnd returns the end of the string that starts at i (its opening quote).
func (w *walker) stringEnd(i int) int {
	b := w.b
	j := i + 1
	for {
		// Most strings are short names: a loop finds their end sooner than a call would.
		k, short := j, min(j+24, len(b))
		for k < short && b[k] != '"' {
			k++
		}
		if k == short {
			q := bytes.IndexByte(b[k:], '"')
			if q < 0 {
				return len(b)
			}
			k += q
		}
		j = k
		// A quote after an odd number of backslashes is escaped.
		n := 0
		for k := j - 1; k > i && w.b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// str returns the bytes of s as a string, without a copy; it lives as long as the document.
func (w *walker) str(s span) string {
	if !s.valid() {
		return ""
	}
	return unsafe.String(&w.b[s.start], s.end-s.start)
}

// result returns a gjson result of s with its offset, for the general path's helpers.
func (w *walker) result(s span) gjson.Result {
	r := gjson.Parse(w.str(s))
	r.Index = s.start
	return r
}

func (w *walker) space(i int) int {
	for i < len(w.b) {
		switch w.b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skip returns the end of the value that starts at i.
func (w *walker) skip(i int) int {
	switch w.b[i] {
	case '"':
		return w.stringEnd(i)
	case '{', '[':
		if w.match != nil {
			return int(w.match[i]) + 1
		}
		depth := 0
		for j := i; j < len(w.b); j++ {
			switch w.b[j] {
			case '"':
				j = w.stringEnd(j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(w.b)
	default:
		j := i
		for j < len(w.b) {
			switch w.b[j] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return j
			}
			j++
		}
		return j
	}
}

// members calls f with each member of the object that starts at i, until f returns false; it
// returns whether it went through all of them.
func (w *walker) members(i int, f func(key, val span) bool) bool {
	i = w.space(i + 1)
	for i < len(w.b) && w.b[i] != '}' {
		if w.b[i] == ',' {
			i = w.space(i + 1)
		}
		ks := i
		ke := w.skip(i)
		i = w.space(w.space(ke) + 1) // past ':'
		ve := w.skip(i)
		if !f(span{ks, ke}, span{i, ve}) {
			return false
		}
		i = w.space(ve)
	}
	return true
}

// elements calls f with each element of the array that starts at i.
func (w *walker) elements(i int, f func(val span)) {
	i = w.space(i + 1)
	for i < len(w.b) && w.b[i] != ']' {
		if w.b[i] == ',' {
			i = w.space(i + 1)
		}
		ve := w.skip(i)
		f(span{i, ve})
		i = w.space(ve)
	}
}

// index records where each container of the document ends (see match), reusing match.
func (w *walker) index(match []int32) []int32 {
	if cap(match) < len(w.b) {
		match = make([]int32, len(w.b))
	}
	match = match[:len(w.b)]
	var stack [32]int32
	open := stack[:0]
	for i := 0; i < len(w.b); i++ {
		switch w.b[i] {
		case '"':
			i = w.stringEnd(i) - 1
		case '{', '[':
			open = append(open, int32(i))
		case '}', ']':
			if n := len(open); n > 0 {
				match[open[n-1]] = int32(i)
				open = open[:n-1]
			}
		}
	}
	w.match = match
	return match
}

// maxIndexed bounds the documents that are indexed: the index takes four bytes per byte.
// Larger ones are walked without it.
const maxIndexed = 256 << 10

// scratch is what rewriting a stream reuses from one item to the next: the edits, the
// walker's index, the output, and the replacements already computed (the items of a List or
// the events of a watch repeat the same few names thousands of times).
type scratch struct {
	edits []edit
	match []int32
	// matched says that match is the index of the document being rewritten.
	matched bool
	out     []byte
	names   map[nameKey]nameVal
}

// The cache of names is bounded: a hostile target can send as many distinct keys as it likes.
const (
	maxCachedNames   = 1024
	maxCachedNameLen = 256
)

type nameOp uint8

const (
	opGVK            nameOp = iota // an apiVersion (a) and kind (b): x and y quoted, y "" when the kind stays
	opKey                          // a label, annotation or finalizer key: x quoted
	opFieldKey                     // a key in managedFields, written "f:<key>": x quoted with its "f:"
	opFinalizerField               // a finalizer in managedFields, written `v:"<finalizer>"`: x quoted
)

type nameKey struct {
	op   nameOp
	d    direction
	a, b string
}

// nameVal is a replacement: ok when the name is renamed.
type nameVal struct {
	x, y string
	ok   bool
}

// cached returns the replacement of k, computed by f at most once per stream.
func (w *walker) cached(k nameKey, f func() nameVal) nameVal {
	sc := w.sc
	if sc == nil {
		return f()
	}
	if v, ok := sc.names[k]; ok {
		return v
	}
	v := f()
	if len(k.a)+len(k.b) <= maxCachedNameLen && len(sc.names) < maxCachedNames {
		if sc.names == nil {
			sc.names = make(map[nameKey]nameVal)
		}
		// The key's strings point into the document, which the next item overwrites.
		k.a, k.b = strings.Clone(k.a), strings.Clone(k.b)
		sc.names[k] = v
	}
	return v
}

// fastGVK renames an apiVersion and kind pair, as quoted JSON strings.
func (r *Rules) fastGVK(d direction, w *walker, apiVersion, kind string) nameVal {
	return w.cached(nameKey{op: opGVK, d: d, a: apiVersion, b: kind}, func() nameVal {
		na, nk, ok := r.gvk(d, apiVersion, kind)
		if !ok {
			return nameVal{}
		}
		v := nameVal{x: quote(na), ok: true}
		if nk != kind {
			v.y = quote(nk)
		}
		return v
	})
}

// fastName renames a key (op says where it is), as a quoted JSON string.
func (r *Rules) fastName(d direction, w *walker, op nameOp, name string) nameVal {
	return w.cached(nameKey{op: op, d: d, a: name}, func() nameVal {
		switch op {
		case opFieldKey:
			if nk, ok := r.keyWithin(d, "f:", name); ok {
				return nameVal{x: quote(nk), ok: true}
			}
		case opFinalizerField:
			if nk, ok := r.key(d, name); ok {
				return nameVal{x: quote("v:" + quote(nk)), ok: true}
			}
		default:
			if nk, ok := r.key(d, name); ok {
				return nameVal{x: quote(nk), ok: true}
			}
		}
		return nameVal{}
	})
}
