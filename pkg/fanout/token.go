package fanout

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// A composite resourceVersion names a position in every member: the resourceVersion of each
// mount, by name. It is opaque to clients and grants nothing: a fan-out reaches the mounts
// the caller may use now, whatever a resourceVersion names, and a mount it does not name
// starts from its current state. Format: "m1." and, base64url without padding, the members
// in name order, each name front-coded against the one before and its resourceVersion as a
// number where it is a decimal number (as etcd's are).
const compositePrefix = "m1."

// maxTokenBytes bounds a composite resourceVersion or continue token a client sends.
const maxTokenBytes = 1 << 20

// maxTokenMembers bounds the members a token names.
const maxTokenMembers = 100_000

var errBadToken = errors.New("not a token of this server")

// Positions maps member names to their resourceVersions.
type Positions map[string]string

// IsComposite says whether rv is a composite resourceVersion (and not "", "0" or a member's).
func IsComposite(rv string) bool { return strings.HasPrefix(rv, compositePrefix) }

// EncodePositions encodes positions as a composite resourceVersion.
func EncodePositions(p Positions) string {
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	sort.Strings(names)
	return string(appendComposite(nil, names, func(i int) string { return p[names[i]] }))
}

// appendComposite appends the composite resourceVersion of names (sorted) and their
// resourceVersions.
func appendComposite(dst []byte, names []string, rv func(i int) string) []byte {
	raw := make([]byte, 0, 16*len(names))
	prev := ""
	for i, n := range names {
		shared := 0
		for shared < len(prev) && shared < len(n) && prev[shared] == n[shared] {
			shared++
		}
		raw = binary.AppendUvarint(raw, uint64(shared))
		raw = binary.AppendUvarint(raw, uint64(len(n)-shared))
		raw = append(raw, n[shared:]...)
		prev = n
		v := rv(i)
		if num, err := strconv.ParseUint(v, 10, 64); err == nil && strconv.FormatUint(num, 10) == v {
			raw = append(raw, 0)
			raw = binary.AppendUvarint(raw, num)
		} else {
			raw = append(raw, 1)
			raw = binary.AppendUvarint(raw, uint64(len(v)))
			raw = append(raw, v...)
		}
	}
	dst = append(dst, compositePrefix...)
	return base64.RawURLEncoding.AppendEncode(dst, raw)
}

// DecodePositions decodes a composite resourceVersion.
func DecodePositions(rv string) (Positions, error) {
	if !IsComposite(rv) || len(rv) > maxTokenBytes {
		return nil, errBadToken
	}
	raw, err := base64.RawURLEncoding.DecodeString(rv[len(compositePrefix):])
	if err != nil {
		return nil, errBadToken
	}
	p := Positions{}
	prev := ""
	r := bytes.NewReader(raw)
	for r.Len() > 0 {
		if len(p) >= maxTokenMembers {
			return nil, errBadToken
		}
		shared, err1 := binary.ReadUvarint(r)
		suffix, err2 := binary.ReadUvarint(r)
		if err1 != nil || err2 != nil || shared > uint64(len(prev)) || suffix > uint64(r.Len()) {
			return nil, errBadToken
		}
		buf := make([]byte, suffix)
		_, _ = io.ReadFull(r, buf)
		name := prev[:shared] + string(buf)
		if name <= prev && prev != "" || name == "" {
			return nil, errBadToken // names come sorted and once each
		}
		prev = name
		tag, err := r.ReadByte()
		if err != nil {
			return nil, errBadToken
		}
		switch tag {
		case 0:
			n, err := binary.ReadUvarint(r)
			if err != nil {
				return nil, errBadToken
			}
			p[name] = strconv.FormatUint(n, 10)
		case 1:
			l, err := binary.ReadUvarint(r)
			if err != nil || l > uint64(r.Len()) {
				return nil, errBadToken
			}
			v := make([]byte, l)
			_, _ = io.ReadFull(r, v)
			p[name] = string(v)
		default:
			return nil, errBadToken
		}
	}
	return p, nil
}

// continueToken is where a paged list across mounts goes on: the members of its first page
// with the resourceVersions their lists are pinned to (a consistent snapshot of each), the
// members that failed, and the member to go on with and its own continue token. It binds the
// request (Query: the path and selectors) it belongs to.
//
// It carries no secret and grants nothing: every page authorizes each member again, a token
// that names a mount the caller may not use is refused, and the members' own continue tokens
// go only to the member that issued them. The checksum detects a token that was changed or cut,
// so that the error says so instead of failing somewhere further down.
type continueToken struct {
	Query string `json:"q"`
	// Members are sorted; RVs are their pinned resourceVersions ("" not known).
	Members []string `json:"m"`
	RVs     []string `json:"r"`
	Failed  []int    `json:"f,omitempty"`
	// Position is the member to go on with; Continue its continue token, "" to start it at
	// its pinned resourceVersion.
	Position int    `json:"p"`
	Continue string `json:"c,omitempty"`
	// Kind, APIVersion and Table are the list's, for a page none of whose members answer.
	Kind       string `json:"k,omitempty"`
	APIVersion string `json:"a,omitempty"`
	Table      bool   `json:"t,omitempty"`
}

const continuePrefix = "m1."

func encodeContinue(t *continueToken) (string, error) {
	payload, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	zw, _ := flate.NewWriter(&buf, flate.BestSpeed)
	_, _ = zw.Write(payload)
	_ = zw.Close()
	sum := sha256.Sum256(buf.Bytes())
	buf.Write(sum[:8])
	return continuePrefix + base64.RawURLEncoding.EncodeToString(buf.Bytes()), nil
}

func decodeContinue(s string) (*continueToken, error) {
	if !strings.HasPrefix(s, continuePrefix) || len(s) > maxTokenBytes {
		return nil, errBadToken
	}
	raw, err := base64.RawURLEncoding.DecodeString(s[len(continuePrefix):])
	if err != nil || len(raw) < 8 {
		return nil, errBadToken
	}
	body, sum := raw[:len(raw)-8], raw[len(raw)-8:]
	want := sha256.Sum256(body)
	if !bytes.Equal(sum, want[:8]) {
		return nil, errBadToken
	}
	payload, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(body)), 8*maxTokenBytes+1))
	if err != nil || len(payload) > 8*maxTokenBytes {
		return nil, errBadToken
	}
	t := &continueToken{}
	if err := json.Unmarshal(payload, t); err != nil {
		return nil, errBadToken
	}
	if len(t.Members) != len(t.RVs) || len(t.Members) > maxTokenMembers || t.Position < 0 || t.Position > len(t.Members) ||
		!sort.StringsAreSorted(t.Members) {
		return nil, errBadToken
	}
	for i := 1; i < len(t.Members); i++ {
		if t.Members[i] == t.Members[i-1] {
			return nil, errBadToken
		}
	}
	for _, f := range t.Failed {
		if f < 0 || f >= len(t.Members) {
			return nil, errBadToken
		}
	}
	return t, nil
}

// queryHash binds a continue token to the request it continues.
func queryHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:12])
}
