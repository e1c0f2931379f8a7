package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlLine splits "line N: message" off a yaml.v3 error.
var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// maxLocateLines bounds the prefix search of syntaxError (quadratic in the
// file's length); longer files keep the parser's own line.
const maxLocateLines = 5000

// syntaxError turns a YAML parse error into a LineError on the line at
// fault. yaml.v3 reports a parser error at the line where the enclosing
// block began, counted from zero (an indentation error on line 4 of a
// mapping opened on line 2 comes out as "line 1"), so the line is found
// again: the first line whose prefix of the file fails to parse with the
// same message is where the parser gave up.
func syntaxError(data []byte, err error, source string) *LineError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	ends := lineEnds(data)
	if len(ends) <= maxLocateLines {
		for n, end := range ends {
			text := strings.TrimSpace(string(data[lineStartOf(ends, n):end]))
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			var probe yaml.Node
			perr := yaml.Unmarshal(data[:end], &probe)
			if perr == nil {
				continue
			}
			pmsg := strings.TrimPrefix(perr.Error(), "yaml: ")
			if m := yamlLine.FindStringSubmatch(pmsg); m != nil {
				pmsg = m[2]
			}
			if pmsg == msg {
				line = n + 1
				break
			}
		}
	}
	if line > 0 && line <= len(ends) {
		msg += syntaxHint(msg, string(data[lineStartOf(ends, line-1):ends[line-1]]))
	}
	return &LineError{Source: source, Line: line, Msg: "invalid YAML: " + msg}
}

// lineEnds returns the offset just past each line (its newline included).
func lineEnds(data []byte) []int {
	var ends []int
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		ends = append(ends, len(data))
	}
	return ends
}

func lineStartOf(ends []int, n int) int {
	if n == 0 {
		return 0
	}
	return ends[n-1]
}

// syntaxHint says what usually causes a parser message on that line.
func syntaxHint(msg, text string) string {
	indent := text[:len(text)-len(strings.TrimLeft(text, " \t"))]
	switch {
	case strings.Contains(indent, "\t"):
		return " (this line is indented with a tab; YAML indents with spaces)"
	case strings.HasPrefix(msg, "did not find expected key"), strings.HasPrefix(msg, "did not find expected '-' indicator"):
		return " (this line's indentation does not line up with the keys above it)"
	case strings.HasPrefix(msg, "mapping values are not allowed"):
		return " (check this line's indentation, or quote a value that contains \": \")"
	case strings.HasPrefix(msg, "found unexpected end of stream"), strings.HasPrefix(msg, "did not find expected ',' or"):
		return " (a quote or bracket opened here is not closed)"
	}
	return ""
}

var (
	durationType    = reflect.TypeFor[Duration]()
	healthCheckType = reflect.TypeFor[HealthCheck]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

// checkTypes walks the document alongside the Config type and reports the
// first value of the wrong type (a string where a number or a mapping
// belongs, a malformed duration) with its key path and line, which
// yaml.v3's own errors lack. Unknown keys are checkKnownKeys' business and
// are skipped here.
func checkTypes(doc *yaml.Node, source string) error {
	if err := checkValue(doc, reflect.TypeFor[Config](), ""); err != nil {
		err.Source = source
		return err
	}
	return nil
}

func checkValue(n *yaml.Node, t reflect.Type, path string) *LineError {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil // zero value: the default
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	bad := func(format string, args ...any) *LineError {
		return &LineError{Line: n.Line, Key: path, Msg: fmt.Sprintf(format, args...)}
	}
	if err, ok := checkDecoded(n, t, bad); ok {
		return err
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice:
		return checkContainer(n, t, path, bad)
	}
	return checkScalar(n, t, bad)
}

// checkDecoded checks the types that decode themselves (durations, a
// health_check given as a bool, yaml.Unmarshalers other than structs); ok
// is false for other types.
func checkDecoded(n *yaml.Node, t reflect.Type, bad func(string, ...any) *LineError) (_ *LineError, ok bool) {
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			return bad("must be a duration such as 90s, 5m30s, 2h or 7d, not %s", describe(n)), true
		}
		if _, err := ParseDuration(n.Value); err != nil {
			return bad("%v", err), true
		}
		return nil, true
	case t == healthCheckType && n.Kind == yaml.ScalarNode:
		if err := n.Decode(new(bool)); err != nil {
			return bad("must be true, false or a mapping {path, interval, timeout}, not %s", describe(n)), true
		}
		return nil, true
	case t.Kind() != reflect.Struct && reflect.PointerTo(t).Implements(unmarshalerType):
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return bad("%s", decodeMessage(err)), true
		}
		return nil, true
	}
	return nil, false
}

// checkContainer checks a mapping of settings, a map or a list, and each
// value in it.
func checkContainer(n *yaml.Node, t reflect.Type, path string, bad func(string, ...any) *LineError) *LineError {
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return bad("must be a mapping of settings, not %s", describe(n))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if f, ok := fieldByTag(t, k.Value); ok {
				if err := checkValue(v, f.Type, joinKey(path, k.Value)); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return bad("must be a mapping, not %s", describe(n))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if err := checkValue(v, t.Elem(), joinKey(path, k.Value)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return bad("must be a list, not %s", describe(n))
		}
		for i, item := range n.Content {
			if err := checkValue(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkScalar checks a string, bool or number.
func checkScalar(n *yaml.Node, t reflect.Type, bad func(string, ...any) *LineError) *LineError {
	switch t.Kind() {
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return bad("must be a string, not %s", describe(n))
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Decode(new(bool)) != nil {
			return bad("must be true or false, not %s", describe(n))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode || n.Decode(reflect.New(t).Interface()) != nil {
			return bad("must be a whole number, not %s", describe(n))
		}
	case reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode || n.Decode(reflect.New(t).Interface()) != nil {
			return bad("must be a number, not %s", describe(n))
		}
	}
	return nil
}

// fieldByTag finds the struct field a YAML key decodes into.
func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// describe names what a node holds, for "must be X, not Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// decodeMessage strips yaml.v3's "line N:" prefixes from a decode error.
func decodeMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		if m := yamlLine.FindStringSubmatch(te.Errors[0]); m != nil {
			return m[2]
		}
		return te.Errors[0]
	}
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		return m[2]
	}
	return msg
}

// decodeError turns an error of the final decode (checkTypes found none,
// so typically a mapping key written twice) into a LineError.
func decodeError(err error, source string) *LineError {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	le := &LineError{Source: source, Msg: msg}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		le.Line, _ = strconv.Atoi(m[1])
		le.Msg = m[2]
	}
	return le
}
