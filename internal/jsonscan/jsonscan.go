// Package jsonscan finds and replaces top-level fields of a JSON object
// without decoding the whole document. The gateway uses it on the hot path
// to read "model" and "stream" and to rewrite a few fields of bodies it
// otherwise passes through byte for byte. AppendEscaped writes a JSON
// string's inside as encoding/json does, for the encoders that append
// JSON directly.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Span is the byte range [Start, End) of a value inside a document.
type Span struct{ Start, End int }

// Valid reports whether the span was found.
func (s Span) Valid() bool { return s.End > s.Start }

// ErrNotObject is returned when the document is not a JSON object.
var ErrNotObject = errors.New("request body must be a JSON object")

// Fields scans the top level of an object and calls fn for each key with the
// span of its value. fn returns false to stop. The document must already be
// valid JSON (check with json.Valid); Fields does not re-validate nested values.
func Fields(doc []byte, fn func(key []byte, val Span) bool) error {
	return Members(doc, func(key []byte, _ bool, val Span) bool { return fn(key, val) })
}

// Members is Fields that also reports whether a key was written with
// escapes ("mod\u0065l" is the key "model", escaped): decoders read such a
// key as its unescaped form, so a caller that must see every spelling of a
// name needs to know.
func Members(doc []byte, fn func(key []byte, escaped bool, val Span) bool) error {
	i := skipWS(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return ErrNotObject
	}
	i++
	for {
		i = skipWS(doc, i)
		if i >= len(doc) {
			return errors.New("unexpected end of object")
		}
		if doc[i] == '}' {
			return nil
		}
		if doc[i] == ',' {
			i++
			continue
		}
		if doc[i] != '"' {
			return errors.New("expected a key")
		}
		kEnd, err := skipString(doc, i)
		if err != nil {
			return err
		}
		key := doc[i+1 : kEnd-1]
		escaped := bytes.IndexByte(key, '\\') >= 0
		if escaped {
			var s string
			if json.Unmarshal(doc[i:kEnd], &s) == nil {
				key = []byte(s)
			}
		}
		i = skipWS(doc, kEnd)
		if i >= len(doc) || doc[i] != ':' {
			return errors.New("expected ':'")
		}
		i = skipWS(doc, i+1)
		vEnd, err := skipValue(doc, i)
		if err != nil {
			return err
		}
		if !fn(key, escaped, Span{i, vEnd}) {
			return nil
		}
		i = vEnd
	}
}

// ErrNotArray is returned by Elements when the document is not a JSON array.
var ErrNotArray = errors.New("value must be a JSON array")

// Elements scans a JSON array and calls fn with the span of each element, in
// order. fn returns false to stop. Like Fields it expects valid JSON and
// does not re-validate nested values.
func Elements(doc []byte, fn func(i int, val Span) bool) error {
	i := skipWS(doc, 0)
	if i >= len(doc) || doc[i] != '[' {
		return ErrNotArray
	}
	i++
	for n := 0; ; {
		i = skipWS(doc, i)
		if i >= len(doc) {
			return errors.New("unexpected end of array")
		}
		switch doc[i] {
		case ']':
			return nil
		case ',':
			i++
			continue
		}
		end, err := skipValue(doc, i)
		if err != nil {
			return err
		}
		if !fn(n, Span{i, end}) {
			return nil
		}
		n++
		i = end
	}
}

// Len returns the number of elements of the JSON array doc (what
// Elements would call fn for), or Elements' error.
func Len(doc []byte) (int, error) {
	n := 0
	err := Elements(doc, func(int, Span) bool { n++; return true })
	return n, err
}

// Find returns the spans of the named top-level keys, in the order given.
func Find(doc []byte, names ...string) ([]Span, error) {
	out := make([]Span, len(names))
	left := len(names)
	err := Fields(doc, func(key []byte, val Span) bool {
		for n, name := range names {
			if !out[n].Valid() && string(key) == name {
				out[n] = val
				left--
			}
		}
		return left > 0
	})
	return out, err
}

// String decodes the JSON string at span s. ok is false when the value is
// not a string.
func String(doc []byte, s Span) (string, bool) {
	if !s.Valid() || doc[s.Start] != '"' {
		return "", false
	}
	raw := doc[s.Start+1 : s.End-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw), true
	}
	str, err := strconv.Unquote(string(doc[s.Start:s.End]))
	if err != nil {
		var v string
		if json.Unmarshal(doc[s.Start:s.End], &v) != nil {
			return "", false
		}
		return v, true
	}
	return str, true
}

// Bool reports the boolean at span s (false when absent or not true).
func Bool(doc []byte, s Span) bool {
	return s.Valid() && bytes.Equal(doc[s.Start:s.End], []byte("true"))
}

// IsNull reports whether the span is absent or holds null.
func IsNull(doc []byte, s Span) bool {
	return !s.Valid() || bytes.Equal(doc[s.Start:s.End], []byte("null"))
}

// Replace returns doc with the span replaced by val. The result is a new
// slice; doc is not modified.
func Replace(doc []byte, s Span, val []byte) []byte {
	out := make([]byte, 0, len(doc)-(s.End-s.Start)+len(val))
	out = append(out, doc[:s.Start]...)
	out = append(out, val...)
	return append(out, doc[s.End:]...)
}

// Insert returns doc with `"key":val,` added as the first member of the top
// level object. doc must be a non-empty object.
func Insert(doc []byte, key string, val []byte) []byte {
	i := bytes.IndexByte(doc, '{')
	k, _ := json.Marshal(key)
	out := make([]byte, 0, len(doc)+len(k)+len(val)+2)
	out = append(out, doc[:i+1]...)
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, val...)
	rest := doc[i+1:]
	if j := skipWS(rest, 0); j < len(rest) && rest[j] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}

// Without returns doc with every top-level member named in names removed
// (each occurrence, however the key is escaped), or doc itself when none
// is there or doc is not an object. The members kept are copied as they
// are, in order.
func Without(doc []byte, names []string) []byte {
	type member struct{ start, end int }
	var kept []member
	dropped := false
	i := skipWS(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return doc
	}
	i++
	for {
		i = skipWS(doc, i)
		if i >= len(doc) {
			return doc
		}
		switch doc[i] {
		case '}':
			if !dropped {
				return doc
			}
			out := make([]byte, 0, len(doc))
			out = append(out, '{')
			for k, m := range kept {
				if k > 0 {
					out = append(out, ',')
				}
				out = append(out, doc[m.start:m.end]...)
			}
			return append(out, '}')
		case ',':
			i++
			continue
		case '"':
		default:
			return doc
		}
		start := i
		kEnd, err := skipString(doc, i)
		if err != nil {
			return doc
		}
		key := string(doc[i+1 : kEnd-1])
		if strings.IndexByte(key, '\\') >= 0 {
			var k string
			if json.Unmarshal(doc[i:kEnd], &k) == nil {
				key = k
			}
		}
		i = skipWS(doc, kEnd)
		if i >= len(doc) || doc[i] != ':' {
			return doc
		}
		vEnd, err := skipValue(doc, skipWS(doc, i+1))
		if err != nil {
			return doc
		}
		if slices.Contains(names, key) {
			dropped = true
		} else {
			kept = append(kept, member{start, vEnd})
		}
		i = vEnd
	}
}

func skipWS(b []byte, i int) int {
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

// skipString returns the index just after the string starting at i.
func skipString(b []byte, i int) (int, error) {
	// Jump from quote to quote (bytes.IndexByte is vectorised: long
	// prompts are scanned at memory speed); a quote preceded by an odd
	// run of backslashes is escaped.
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		j = q + 1
	}
	return 0, errors.New("unterminated string")
}

// skipValue returns the index just after the value starting at i.
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("missing value")
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errors.New("unterminated value")
	default:
		j := i
		for j < len(b) {
			c := b[j]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				break
			}
			j++
		}
		if j == i {
			return 0, errors.New("missing value")
		}
		return j, nil
	}
}

// SyntaxOffset returns the byte offset of the first syntax error in doc and
// a description, for error messages that point at the mistake.
func SyntaxOffset(doc []byte) (int64, string) {
	var v any
	err := json.Unmarshal(doc, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return se.Offset, se.Error()
	}
	if err != nil {
		return int64(len(doc)), err.Error()
	}
	return -1, ""
}
