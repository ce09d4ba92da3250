package yamlbound

import (
	"bytes"
	"errors"
	"fmt"

	yaml "go.yaml.in/yaml/v2"
)

// ErrExpands is wrapped by the errors about YAML whose aliases expand it beyond a bound.
var ErrExpands = errors.New("YAML aliases expand the document")

// Check returns an error wrapping ErrExpands if y, with its aliases expanded, is larger than
// about limit bytes as JSON. Documents without aliases pass without being parsed (as JSON they are
// about as large as they are), and so do those that do not parse (their decoder says why).
func Check(y []byte, limit int) error {
	if bytes.IndexByte(y, '*') < 0 { // an alias is written *name
		return nil
	}
	var v any
	if yaml.Unmarshal(y, &v) != nil {
		return nil
	}
	if n := expandedSize(v, limit); n > limit {
		return fmt.Errorf("%w to more than %d bytes", ErrExpands, limit)
	}
	return nil
}

// expandedSize returns the size of v (decoded YAML) as JSON, or a number above limit once it
// passes limit: strings, keys and structure are counted (a string an alias repeats each time),
// escapes and the digits of numbers not. The walk holds no recursion: its stack is a slice.
func expandedSize(v any, limit int) int {
	n := 0
	stack := []any{v}
	for len(stack) > 0 && n <= limit {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch v := v.(type) {
		case string:
			n += len(v) + 2
		case []any:
			n += 1 + len(v)
			stack = append(stack, v...)
		case map[any]any:
			n += 1 + 2*len(v)
			for k, e := range v {
				stack = append(stack, k, e)
			}
		default:
			n++
		}
	}
	return n
}
