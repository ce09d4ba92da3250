package fanout

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MountLabel is the label that names, on every object a fan-out returns, the mount it comes
// from, so that `kubectl -L mounts.kcp.io/mount` shows it and `-l mounts.kcp.io/mount=<name>`
// selects by it.
const MountLabel = "mounts.kcp.io/mount"

// NameSeparator joins a mount's name and an object's name into the object's name in a
// fan-out's answer: mount names are DNS subdomains, which never contain it, so the name is
// unique across mounts (informers key objects by namespace and name) and says where the
// object is. Object names may contain it; the mount is what comes before the first one.
const NameSeparator = ":"

// SplitName splits a name of a fan-out's answer into the mount and the object's own name.
func SplitName(name string) (mount, object string, ok bool) {
	return strings.Cut(name, NameSeparator)
}

// editor edits the objects of one member's answer; its scratch space is reused.
type editor struct {
	mount string
	// idx, when set, are the members of the value being edited (scanner.indexed): the
	// editor finds its members there instead of scanning for them.
	idx []jsonMember
	// With keep, name, namespace and rv are the last edited object's own (decoded), for
	// watches; hasKind says whether it has a kind (items of typed lists have none).
	keep                bool
	name, namespace, rv string
	hasKind             bool
	top                 []field
	meta                []field
	sub                 []field
	elems               [][2]int
}

// object appends obj, a JSON object of the member's, with its metadata edited: the name
// prefixed with the mount, the mount label set (replacing one the target may have set). With
// rvHole the metadata's resourceVersion is left out: hole is where in dst the caller puts a
// JSON string for it. An object without metadata, or with a key that occurs twice in it or in
// its metadata (the client would read the last, this the first), is refused: a target must not
// be able to make its objects claim another mount.
func (e *editor) object(dst, obj []byte, rvHole bool) ([]byte, int, error) {
	if !json.Valid(obj) {
		return dst, -1, fmt.Errorf("%w: an object is not valid JSON", errMalformed)
	}
	return e.validObject(dst, obj, rvHole)
}

// item edits an item the scanner validated and indexed (scanner.indexed).
func (e *editor) item(dst, obj []byte, idx []jsonMember, rvHole bool) ([]byte, int, error) {
	e.idx = idx
	defer func() { e.idx = nil }()
	return e.validObject(dst, obj, rvHole)
}

// reservedMeta are the metadata keys the editor reads or writes.
var reservedMeta = []string{"name", "labels", "resourceVersion", "namespace"}

// foldEqual is strings.EqualFold, fast for ASCII: what a client that decodes keys
// case-insensitively (Go's encoding/json) takes for the same key.
func foldEqual(a, b string) bool {
	ascii := true
	for i := 0; i < len(a); i++ {
		if a[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if !ascii {
		return strings.EqualFold(a, b)
	}
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x|0x20 != y|0x20 || (x|0x20) < 'a' || (x|0x20) > 'z' {
			if x != y {
				return false
			}
		}
	}
	return true
}

// validObject is object for valid JSON.
func (e *editor) validObject(dst, obj []byte, rvHole bool) (_ []byte, hole int, err error) {
	hole = -1
	if e.idx != nil {
		e.top = indexedFields(obj, e.idx, 1, -1, 0, e.top)
	} else if e.top, err = objectFields(obj, e.top); err != nil {
		return dst, hole, err
	}
	metaAt := -1
	e.hasKind = false
	for i, f := range e.top {
		if f.key == "kind" {
			e.hasKind = true
		}
		if foldEqual(f.key, "metadata") {
			// Clients that decode keys case-insensitively (Go's encoding/json) would read
			// "Metadata" as well: only one spelling, and that the exact one.
			if metaAt >= 0 || f.key != "metadata" {
				return dst, hole, fmt.Errorf("%w: an object has two metadata members", errMalformed)
			}
			metaAt = i
		}
	}
	if metaAt < 0 || obj[e.top[metaAt].start] != '{' {
		return dst, hole, fmt.Errorf("%w: an object has no metadata", errMalformed)
	}
	m := e.top[metaAt]
	metaRaw := obj[m.start:m.end]
	if e.idx != nil {
		e.meta = indexedFields(obj, e.idx, 2, m.idx, m.start, e.meta)
	} else if e.meta, err = objectFields(metaRaw, e.meta); err != nil {
		return dst, hole, err
	}
	seen := 0
	e.name, e.namespace, e.rv = "", "", ""
	for _, f := range e.meta {
		bit := 0
		for _, k := range reservedMeta {
			if f.key != k && foldEqual(f.key, k) {
				return dst, hole, fmt.Errorf("%w: metadata has a key %q besides %q", errMalformed, f.key, k)
			}
		}
		switch f.key {
		case "name":
			bit = 1
			if e.keep {
				e.name, _ = stringValue(metaRaw[f.start:f.end])
			}
			if metaRaw[f.start] != '"' {
				return dst, hole, fmt.Errorf("%w: metadata.name is no string", errMalformed)
			}
		case "labels":
			bit = 2
			if c := metaRaw[f.start]; c != '{' && c != 'n' {
				return dst, hole, fmt.Errorf("%w: metadata.labels is no object", errMalformed)
			}
		case "resourceVersion":
			bit = 4
			if metaRaw[f.start] != '"' {
				return dst, hole, fmt.Errorf("%w: metadata.resourceVersion is no string", errMalformed)
			}
			if e.keep {
				e.rv, _ = stringValue(metaRaw[f.start:f.end])
			}
		case "namespace":
			bit = 8
			if metaRaw[f.start] != '"' {
				return dst, hole, fmt.Errorf("%w: metadata.namespace is no string", errMalformed)
			}
			if e.keep {
				e.namespace, _ = stringValue(metaRaw[f.start:f.end])
			}
		}
		if bit != 0 {
			if seen&bit != 0 {
				return dst, hole, fmt.Errorf("%w: metadata.%s occurs twice", errMalformed, f.key)
			}
			seen |= bit
		}
	}

	dst = append(dst, obj[:m.start]...)
	dst = append(dst, '{')
	first := true
	sep := func() {
		if !first {
			dst = append(dst, ',')
		}
		first = false
	}
	for _, f := range e.meta {
		switch f.key {
		case "name":
			sep()
			dst = append(dst, metaRaw[f.keyStart:f.start]...)
			dst = append(dst, '"')
			dst = append(dst, e.mount...)
			dst = append(dst, NameSeparator...)
			dst = append(dst, metaRaw[f.start+1:f.end]...)
		case "labels":
			sep()
			dst = append(dst, `"labels":`...)
			raw := metaRaw[f.start:f.end]
			if raw[0] == '{' {
				if e.idx != nil {
					e.sub = indexedFields(obj, e.idx, 3, f.idx, m.start+f.start, e.sub)
				} else if e.sub, err = objectFields(raw, e.sub); err != nil {
					return dst, hole, err
				}
			} else {
				e.sub = e.sub[:0]
			}
			if dst, err = e.labels(dst, raw, e.sub); err != nil {
				return dst, hole, err
			}
		case "resourceVersion":
			if rvHole {
				sep()
				dst = append(dst, `"resourceVersion":`...)
				hole = len(dst)
				continue
			}
			sep()
			dst = append(dst, metaRaw[f.keyStart:f.end]...)
		default:
			sep()
			dst = append(dst, metaRaw[f.keyStart:f.end]...)
		}
	}
	if seen&2 == 0 {
		sep()
		dst = append(dst, `"labels":`...)
		dst, _ = e.labels(dst, nil, nil)
	}
	if rvHole && seen&4 == 0 {
		sep()
		dst = append(dst, `"resourceVersion":`...)
		hole = len(dst)
	}
	dst = append(dst, '}')
	dst = append(dst, obj[m.end:]...)
	return dst, hole, nil
}

// labels appends a labels object: raw's labels (fields; none for null or nil) without the
// mount label, and the mount label.
func (e *editor) labels(dst, raw []byte, fields []field) ([]byte, error) {
	dst = append(dst, '{')
	if len(raw) > 0 && raw[0] == '{' {
		for _, f := range fields {
			if raw[f.start] != '"' {
				return dst, fmt.Errorf("%w: the label %q is no string", errMalformed, f.key)
			}
			if f.key == MountLabel {
				continue
			}
			dst = append(dst, raw[f.keyStart:f.end]...)
			dst = append(dst, ',')
		}
	}
	dst = append(dst, `"`+MountLabel+`":`...)
	dst = appendQuoted(dst, e.mount)
	return append(dst, '}'), nil
}

// row appends a Table row of the member's with the mount as its first cell, its cells in the
// order remap gives (nil: as they are; -1: no such column, null) and its object edited.
func (e *editor) row(dst, row []byte, remap []int) ([]byte, error) {
	if !json.Valid(row) {
		return dst, fmt.Errorf("%w: a Table row is not valid JSON", errMalformed)
	}
	return e.validRow(dst, row, remap)
}

// validRow is row for valid JSON.
func (e *editor) validRow(dst, row []byte, remap []int) ([]byte, error) {
	var err error
	if e.top, err = objectFields(row, e.top); err != nil {
		return dst, err
	}
	cellsAt, objectAt := -1, -1
	for i, f := range e.top {
		switch f.key {
		case "cells":
			if cellsAt >= 0 || row[f.start] != '[' {
				return dst, fmt.Errorf("%w: a Table row has no single array of cells", errMalformed)
			}
			cellsAt = i
		case "object":
			if objectAt >= 0 {
				return dst, fmt.Errorf("%w: a Table row has two objects", errMalformed)
			}
			objectAt = i
		}
	}
	if cellsAt < 0 {
		return dst, fmt.Errorf("%w: a Table row has no cells", errMalformed)
	}
	// The row's fields are copied out of e.top first: the object's edit reuses it.
	var parts [4]field
	top := append(parts[:0], e.top...)
	dst = append(dst, '{')
	for i, f := range top {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch i {
		case cellsAt:
			dst = append(dst, `"cells":[`...)
			dst = appendQuoted(dst, e.mount)
			cells := row[f.start:f.end]
			if e.elems, err = elements(cells, e.elems); err != nil {
				return dst, err
			}
			if remap == nil {
				for _, c := range e.elems {
					dst = append(dst, ',')
					dst = append(dst, cells[c[0]:c[1]]...)
				}
			} else {
				for _, from := range remap {
					dst = append(dst, ',')
					if from < 0 || from >= len(e.elems) {
						dst = append(dst, "null"...)
						continue
					}
					dst = append(dst, cells[e.elems[from][0]:e.elems[from][1]]...)
				}
			}
			dst = append(dst, ']')
		case objectAt:
			dst = append(dst, `"object":`...)
			if row[f.start] != '{' {
				dst = append(dst, row[f.start:f.end]...)
				continue
			}
			if dst, _, err = e.validObject(dst, row[f.start:f.end], false); err != nil {
				return dst, err
			}
		default:
			dst = append(dst, row[f.keyStart:f.end]...)
		}
	}
	return append(dst, '}'), nil
}
