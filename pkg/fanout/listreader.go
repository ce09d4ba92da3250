package fanout

import (
	"encoding/json"
	"fmt"
	"io"
)

// listReader reads a member's list (or Table) as it arrives: the members before its items
// first, then one item (or row) at a time, then the members after them.
type listReader struct {
	sc *scanner
	// kind and apiVersion of the list; table for a Table, whose items are rows and whose
	// columns are columnDefinitions (raw) with their names.
	kind, apiVersion string
	table            bool
	columns          []byte
	columnNames      []string
	// rv and cont are the list's resourceVersion and continue token, known once read
	// (kube-apiserver writes metadata first).
	rv, cont string

	inItems, done bool
	first         bool
}

// newListReader reads the list's members up to its items.
func newListReader(r io.Reader) (*listReader, error) {
	l := &listReader{sc: newScanner(r)}
	if err := l.sc.expect('{'); err != nil {
		return nil, err
	}
	empty, err := l.sc.empty('}')
	if err != nil {
		return nil, err
	}
	if empty {
		l.done = true
		return l, nil
	}
	if err := l.members(); err != nil {
		return nil, err
	}
	if l.kind == "" && !l.done {
		return nil, fmt.Errorf("%w: the list's items come before its kind", errMalformed)
	}
	return l, nil
}

// members reads members until the items begin or the object ends.
func (l *listReader) members() error {
	for {
		key, err := l.sc.key()
		if err != nil {
			return err
		}
		switch key {
		case "items", "rows":
			if err := l.sc.expect('['); err != nil {
				if c, perr := l.sc.peek(); perr == nil && c == 'n' {
					// "items": null
					if _, err := l.sc.value(); err != nil {
						return err
					}
					break
				}
				return err
			}
			if key == "rows" {
				l.table = true
			}
			empty, err := l.sc.empty(']')
			if err != nil {
				return err
			}
			if !empty {
				l.inItems, l.first = true, true
				return nil
			}
		default:
			v, err := l.sc.value()
			if err != nil {
				return err
			}
			if err := l.member(key, v); err != nil {
				return err
			}
		}
		more, err := l.sc.next('}')
		if err != nil {
			return err
		}
		if !more {
			l.done = true
			return nil
		}
	}
}

func (l *listReader) member(key string, v []byte) error {
	switch key {
	case "kind":
		l.kind, _ = stringValue(v)
	case "apiVersion":
		l.apiVersion, _ = stringValue(v)
	case "metadata":
		if len(v) == 0 || v[0] != '{' || !json.Valid(v) {
			return fmt.Errorf("%w: the list's metadata is no object", errMalformed)
		}
		fs, err := objectFields(v, nil)
		if err != nil {
			return err
		}
		for _, f := range fs {
			switch f.key {
			case "resourceVersion":
				l.rv, _ = stringValue(v[f.start:f.end])
			case "continue":
				l.cont, _ = stringValue(v[f.start:f.end])
			}
		}
	case "columnDefinitions":
		if !json.Valid(v) || len(v) == 0 || v[0] != '[' {
			return fmt.Errorf("%w: columnDefinitions is no array", errMalformed)
		}
		var cols []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(v, &cols); err != nil {
			return fmt.Errorf("%w: columnDefinitions: %v", errMalformed, err)
		}
		l.columns = append([]byte(nil), v...)
		l.columnNames = l.columnNames[:0]
		for _, c := range cols {
			l.columnNames = append(l.columnNames, c.Name)
		}
	}
	return nil
}

// next returns the next item, validated, and its members (valid until the next call), or nil
// after the last one, when the list's members after its items have been read too.
func (l *listReader) next() ([]byte, []jsonMember, error) {
	if !l.inItems {
		return nil, nil, nil
	}
	if !l.first {
		more, err := l.sc.next(']')
		if err != nil {
			return nil, nil, err
		}
		if !more {
			l.inItems = false
			more, err := l.sc.next('}')
			if err != nil {
				return nil, nil, err
			}
			if more {
				if err := l.members(); err != nil {
					return nil, nil, err
				}
				if l.inItems {
					return nil, nil, fmt.Errorf("%w: the list has two arrays of items", errMalformed)
				}
			}
			l.done = true
			return nil, nil, nil
		}
	}
	l.first = false
	if l.table && l.columns == nil {
		return nil, nil, fmt.Errorf("%w: the Table's rows come before its columnDefinitions", errMalformed)
	}
	return l.sc.indexed()
}
