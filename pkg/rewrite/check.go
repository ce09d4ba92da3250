package rewrite

import (
	"errors"
	"fmt"
)

// MaxDepth is the deepest nesting of JSON arrays and objects that the rewriter reads, from a
// caller or from a target. It is the bound of kube-apiserver's own decoders (encoding/json
// and sigs.k8s.io/json stop at 10000 levels, apimachinery's CBOR decoder sets
// MaxNestedLevels 10000 "as in the JSON implementation", its util/json 10000), so a renaming
// mount refuses nothing a target would take. Nothing recursive sees input that is not checked
// against it first: gjson's validator recursed once per level and a 48 MiB nesting overflowed
// the goroutine stack, which kills the process.
const MaxDepth = 10000

// ErrTooDeep is wrapped by the errors about JSON nested deeper than MaxDepth.
var ErrTooDeep = fmt.Errorf("JSON nests arrays and objects deeper than the %d levels a renaming mount reads", MaxDepth)

// SyntaxError says where JSON is malformed. Its message quotes at most one byte of the input.
type SyntaxError struct {
	Offset int
	msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("malformed JSON at byte %d: %s", e.Offset, e.msg)
}

// CheckJSON checks that b is one JSON value (with optional white space around it) nested at
// most MaxDepth deep. It returns nil, an error wrapping ErrTooDeep, or a *SyntaxError. It
// accepts exactly what encoding/json's Valid accepts within that depth (FuzzCheckJSON), in one
// pass, without recursion and with memory of one byte per level.
func CheckJSON(b []byte) error {
	return checkJSON(b, 0)
}

// text is JSON as bytes or as a string (a string's JSON, such as kubectl's last applied
// configuration, is checked without a copy).
type text interface{ ~string | ~[]byte }

// checkJSON is CheckJSON for a value that is already nested outer levels deep.
func checkJSON[T text](b T, outer int) error {
	var small [64]byte
	stack := small[:0] // the open containers, '{' or '['
	i := space(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return syntaxError(b, i)
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(stack)+outer >= MaxDepth {
				return fmt.Errorf("%w (at byte %d)", ErrTooDeep, i)
			}
			stack = append(stack, c)
			i = space(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' and ']' are two bytes after '{' and '['
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				var err error
				if i, err = member(b, i); err != nil {
					return err
				}
			}
			continue
		case '"':
			var err error
			if i, err = scanString(b, i); err != nil {
				return err
			}
		case 't':
			if !literal(b, i, "true") {
				return syntaxError(b, i)
			}
			i += 4
		case 'f':
			if !literal(b, i, "false") {
				return syntaxError(b, i)
			}
			i += 5
		case 'n':
			if !literal(b, i, "null") {
				return syntaxError(b, i)
			}
			i += 4
		default:
			var err error
			if i, err = scanNumber(b, i); err != nil {
				return err
			}
		}
		// A value ended before i: close containers until the next value starts.
		for {
			i = space(b, i)
			if len(stack) == 0 {
				if i != len(b) {
					return syntaxError(b, i)
				}
				return nil
			}
			if i >= len(b) {
				return syntaxError(b, i)
			}
			top := stack[len(stack)-1]
			if b[i] == top+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return syntaxError(b, i)
			}
			i = space(b, i+1)
			if top == '{' {
				var err error
				if i, err = member(b, i); err != nil {
					return err
				}
			}
			break
		}
	}
}

// member scans a member name and its colon at i; it returns where the value starts.
func member[T text](b T, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return i, syntaxError(b, i)
	}
	i, err := scanString(b, i)
	if err != nil {
		return i, err
	}
	i = space(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, syntaxError(b, i)
	}
	return space(b, i+1), nil
}

// space returns the offset of the first byte at or after i that is no JSON white space.
func space[T text](b T, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func literal[T text](b T, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// plainByte marks the bytes that a JSON string holds as they are: not '"', '\\' or a control
// character. Bytes of invalid UTF-8 are plain, as encoding/json's scanner takes them.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString scans the string whose opening quote is at i; it returns the offset after its
// closing quote.
func scanString[T text](b T, i int) (int, error) {
	i++
	for {
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		if i >= len(b) {
			return i, syntaxError(b, i)
		}
		switch b[i] {
		case '"':
			return i + 1, nil
		case '\\':
			i++
			if i >= len(b) {
				return i, syntaxError(b, i)
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				for k := 1; k <= 4; k++ {
					if i+k >= len(b) || !isHex(b[i+k]) {
						return i + k, syntaxError(b, i+k)
					}
				}
				i += 5
			default:
				return i, syntaxError(b, i)
			}
		default: // a control character
			return i, syntaxError(b, i)
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanNumber scans the number at i: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber[T text](b T, i int) (int, error) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, syntaxError(b, i)
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, syntaxError(b, i)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, syntaxError(b, i)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, nil
}

func syntaxError[T text](b T, i int) error {
	if i >= len(b) {
		return &SyntaxError{Offset: i, msg: "unexpected end of input"}
	}
	return &SyntaxError{Offset: i, msg: fmt.Sprintf("unexpected %q", b[i])}
}

// isSyntaxError reports whether err says that input is not JSON at all (rather than JSON
// beyond a bound).
func isSyntaxError(err error) bool {
	var se *SyntaxError
	return errors.As(err, &se)
}
