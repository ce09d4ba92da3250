package rewrite

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// openAPI rewrites /openapi/v3 (the index), /openapi/v3/apis/<g>/<v> and /openapi/v2. The
// large ones (v2 is tens of MiB in clusters with many CRDs) stream: their names are replaced
// a part at a time as the answer is read, on data itself, without a copy of the document.
func (r *Rules) openAPI(q Request, data []byte, l *lease) (io.Reader, error) {
	switch q.openapi {
	case "v3":
		out, err := r.openAPIIndex(data)
		return bytes.NewReader(out), err
	case "v3group":
		repl, cut := r.replacer(data, []*groupRule{q.rule})
		return &replacingReader{data: data, pieces: []piece{{end: len(data)}}, repl: repl, cut: cut, lease: l}, nil
	case "v2":
		pieces, err := r.dropHiddenV2(data)
		if err != nil {
			return nil, err
		}
		repl, cut := r.replacer(data, r.groups)
		return &replacingReader{data: data, pieces: pieces, repl: repl, cut: cut, lease: l}, nil
	}
	return bytes.NewReader(data), nil
}

// streamsDocument reports whether the request's document is rewritten as it is read
// (openAPI) rather than whole.
func (q Request) streamsDocument() bool {
	return q.Class == OpenAPI && (q.openapi == "v2" || q.openapi == "v3group")
}

// unsafeString returns b as a string without a copy: b must not change while it is used.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// openAPIIndex rewrites the OpenAPI v3 index: "apis/<target>/<v>" entries under presented
// names (one per rule), entries of target groups that carry presented names dropped.
func (r *Rules) openAPIIndex(data []byte) ([]byte, error) {
	paths := gjson.Get(unsafeString(data), "paths")
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

// piece is a part of a rewritten document: data[start:end], or lit when it is set.
type piece struct {
	start, end int
	lit        string
}

// dropHiddenV2 drops from an OpenAPI v2 document the paths and definitions of target groups
// that carry presented names, so that renamed definitions do not collide with them. It
// returns the pieces of the document that remain.
func (r *Rules) dropHiddenV2(data []byte) ([]piece, error) {
	whole := []piece{{end: len(data)}}
	var hidden []string
	for _, g := range r.groups {
		if rs, drop := r.presentedGroups(g.presented); drop && len(rs) == 0 {
			hidden = append(hidden, g.presented)
		}
	}
	if len(hidden) == 0 {
		return whole, nil
	}
	isHidden := func(g string) bool {
		for _, h := range hidden {
			if g == h {
				return true
			}
		}
		return false
	}
	// An object of the document, rebuilt from the members it keeps.
	type object struct {
		start, end int
		members    []piece
	}
	var objects []object
	var err error
	keep := func(obj gjson.Result, drop func(k, v gjson.Result) bool) {
		o := object{start: obj.Index, end: obj.Index + len(obj.Raw)}
		if !at(data, obj) {
			err = fmt.Errorf("OpenAPI document: a member is not where the document has it")
			return
		}
		obj.ForEach(func(k, v gjson.Result) bool {
			if !at(data, k) || !at(data, v) {
				err = fmt.Errorf("OpenAPI document: a member is not where the document has it")
				return false
			}
			if !drop(k, v) {
				o.members = append(o.members, piece{start: k.Index, end: v.Index + len(v.Raw)})
			}
			return true
		})
		objects = append(objects, o)
	}
	doc := unsafeString(data)
	if paths := gjson.Get(doc, "paths"); paths.IsObject() {
		keep(paths, func(k, _ gjson.Result) bool {
			parts := strings.SplitN(strings.TrimPrefix(k.Str, "/"), "/", 3)
			return len(parts) >= 2 && parts[0] == "apis" && isHidden(parts[1])
		})
	}
	if defs := gjson.Get(doc, "definitions"); defs.IsObject() {
		keep(defs, func(_, v gjson.Result) bool {
			// Definitions of hidden groups only; shared ones (DeleteOptions, WatchEvent) stay.
			gvks := v.Get("x-kubernetes-group-version-kind").Array()
			drop := len(gvks) > 0
			for _, gvk := range gvks {
				if !isHidden(gvk.Get("group").String()) {
					drop = false
				}
			}
			return drop
		})
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(objects, func(i, j int) bool { return objects[i].start < objects[j].start })
	var out []piece
	last := 0
	for _, o := range objects {
		if o.start < last {
			return nil, fmt.Errorf("OpenAPI document: paths and definitions overlap")
		}
		out = append(out, piece{start: last, end: o.start}, piece{lit: "{"})
		for i, m := range o.members {
			if i > 0 {
				out = append(out, piece{lit: ","})
			}
			out = append(out, m)
		}
		out = append(out, piece{lit: "}"})
		last = o.end
	}
	return append(out, piece{start: last, end: len(data)}), nil
}

// at reports whether a gjson result is where data has it (gjson's Index is 0 when unknown).
func at(data []byte, v gjson.Result) bool {
	return v.Index > 0 && v.Index+len(v.Raw) <= len(data) && unsafeString(data[v.Index:v.Index+len(v.Raw)]) == v.Raw
}

// replacePart is how much of a document is replaced at a time.
const replacePart = 32 << 10

// cutBytes are where a part may end: bytes of JSON's structure that no name holds.
const cutBytes = ",:{}[] \n\t\r"

// replacingReader returns the pieces of a document through a replacer a part at a time, so
// that the rewritten document is never whole in memory. A part ends after a byte that no old
// string of the replacer holds (cut): no replacement spans it, so the parts come out as the
// whole would. A document with no such byte for long is replaced in longer parts, and
// their memory is taken from the budget.
type replacingReader struct {
	data   []byte
	pieces []piece
	repl   *strings.Replacer
	cut    *[256]bool
	lease  *lease
	buf    appendWriter
	out    []byte // replaced, not read yet
	err    error
}

func (r *replacingReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if len(r.pieces) == 0 {
			return 0, io.EOF
		}
		pc := &r.pieces[0]
		if pc.start >= pc.end {
			r.out = append(r.buf.b[:0], pc.lit...)
			r.buf.b = r.out
			r.pieces = r.pieces[1:]
			continue
		}
		end := min(pc.start+replacePart, pc.end)
		for end < pc.end && !r.cut[r.data[end-1]] {
			end++
		}
		if n := end - pc.start; n > 4*replacePart && r.lease != nil {
			if err := r.lease.grow(int64(n)); err != nil {
				r.err = err
				return 0, err
			}
		}
		r.buf.b = r.buf.b[:0]
		_, _ = r.repl.WriteString(&r.buf, unsafeString(r.data[pc.start:end]))
		r.out = r.buf.b
		if cap(r.buf.b) > 4*replacePart {
			r.buf.b = nil // a long part's buffer is not kept
		}
		pc.start = end
		if pc.start >= pc.end {
			r.pieces = r.pieces[1:]
		}
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// appendWriter appends what is written to b.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *appendWriter) WriteString(s string) (int, error) {
	w.b = append(w.b, s...)
	return len(s), nil
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
func (r *Rules) replacer(data []byte, rules []*groupRule) (*strings.Replacer, *[256]bool) {
	doc := unsafeString(data)
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
			gjson.Get(doc, sect).ForEach(func(_, def gjson.Result) bool {
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
		gjson.Get(doc, "paths").ForEach(func(k, _ gjson.Result) bool {
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
	cut := new([256]bool)
	for i := 0; i < len(cutBytes); i++ {
		cut[cutBytes[i]] = true
	}
	for _, p := range pairs {
		args = append(args, p.old, p.new)
		for i := 0; i < len(p.old); i++ {
			cut[p.old[i]] = false
		}
	}
	return strings.NewReplacer(args...), cut
}
