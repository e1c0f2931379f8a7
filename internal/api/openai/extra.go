package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"llmgate/internal/jsonscan"
)

// Extra holds the members of a JSON object that its Go type does not name,
// so that a decoded and re-encoded body keeps them: engine-specific
// parameters (chat_template_kwargs, top_k), fields of API versions newer than
// these types (an Anthropic beta's context_management), and anything else a
// client sent. The gateway forwards what it does not interpret untouched.
type Extra map[string]json.RawMessage

// Fields is the set of JSON member names a struct type decodes.
type Fields map[string]bool

// Has reports whether encoding/json would decode a member called name into
// one of the fields: it matches names case-insensitively, so "Model" sets
// the model field and must not also be kept as an unknown member.
func (f Fields) Has(name string) bool {
	if f[name] {
		return true
	}
	for n := range f {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// FieldNames returns the JSON member names of struct type t (from its json
// tags, "-" excluded), for UnknownFields.
func FieldNames(t reflect.Type) Fields {
	names := Fields{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	return names
}

// UnknownFields returns the members of the JSON object doc whose names are
// not in known, or nil when there are none. doc must be valid JSON (it is,
// inside an UnmarshalJSON method). A duplicate member keeps its last value,
// as encoding/json does for known ones.
func UnknownFields(doc []byte, known Fields) Extra {
	var out Extra
	_ = jsonscan.Fields(doc, func(key []byte, val jsonscan.Span) bool {
		if name := MemberName(key); !known.Has(name) {
			if out == nil {
				out = Extra{}
			}
			out[name] = bytes.Clone(doc[val.Start:val.End])
		}
		return true
	})
	return out
}

// MemberName returns a member name as encoding/json decodes it: each byte
// that is not valid UTF-8 becomes U+FFFD, so a name is the same string
// however often it is decoded and encoded.
func MemberName(raw []byte) string {
	if utf8.Valid(raw) {
		return string(raw)
	}
	return string([]rune(string(raw)))
}

// AppendFields adds the members of extra that are not in known to the JSON
// object obj (as encoding/json wrote it), in name order so the output is
// stable. Members the type names win: a typed field the gateway set is what
// the backend gets.
func AppendFields(obj []byte, extra Extra, known Fields) []byte {
	if len(extra) == 0 {
		return obj
	}
	keys := make([]string, 0, len(extra))
	for k, v := range extra {
		if !known.Has(k) && len(v) > 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return obj
	}
	slices.Sort(keys)
	obj = bytes.TrimRight(obj, " \n")
	out := make([]byte, 0, len(obj)+64*len(keys))
	out = append(out, obj[:len(obj)-1]...) // without the closing brace
	empty := bytes.Equal(bytes.TrimSpace(obj[1:len(obj)-1]), nil)
	for _, k := range keys {
		if !empty {
			out = append(out, ',')
		}
		empty = false
		name, _ := json.Marshal(k)
		out = append(out, name...)
		out = append(out, ':')
		out = append(out, extra[k]...)
	}
	return append(out, '}')
}
