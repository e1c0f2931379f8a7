package config

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// envRef matches ${NAME} and ${NAME:-default}; the default may be empty.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// UnsetVarError is a ${NAME} reference to a variable that is not set and
// has no default.
type UnsetVarError struct{ Name string }

func (e *UnsetVarError) Error() string {
	return fmt.Sprintf("${%s} is not set: set %s, or write ${%s:-default} (${%s:-} for an empty value)", e.Name, e.Name, e.Name, e.Name)
}

// ExpandEnv replaces ${NAME} and ${NAME:-default} using lookup. A variable
// that is unset or empty takes the default; ${NAME} of an unset variable is
// an UnsetVarError, because a silently empty API key or URL fails far from
// its cause. $${ is a literal "${".
func ExpandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	last := 0
	for _, loc := range envRef.FindAllStringSubmatchIndex(s, -1) {
		start, end := loc[0], loc[1]
		if start > last && s[start-1] == '$' { // $${NAME}: the escape
			b.WriteString(s[last : start-1])
			b.WriteString(s[start:end])
			last = end
			continue
		}
		b.WriteString(s[last:start])
		last = end
		v, err := expandRef(s, loc, lookup)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

// expandRef returns the value of the reference at loc (a submatch index of
// envRef in s).
func expandRef(s string, loc []int, lookup func(string) (string, bool)) (string, error) {
	name := s[loc[2]:loc[3]]
	v, ok := lookup(name)
	hasDefault := loc[4] >= 0
	switch {
	case ok && v != "":
		return v, nil
	case hasDefault:
		return s[loc[6]:loc[7]], nil
	case ok: // set but empty: the user said so
		return "", nil
	}
	return "", &UnsetVarError{Name: name}
}

// expandText expands ${ENV} references before YAML parsing, as Docker
// Compose does, so that references work inside flow mappings like
// "{api_key: ${KEY}}" where braces are YAML syntax. A reference that forms a
// whole scalar is inserted as a double-quoted string, so values with YAML
// special characters stay one string; values never contain newlines that
// would shift line numbers, since quoting escapes them. References in
// comments are left alone, and ${PORT} is left for the engine manager.
func expandText(data []byte, source string, lookup func(string) (string, bool)) ([]byte, error) {
	src := string(data)
	var b strings.Builder
	last := 0
	line, lineStart, commentAt := 1, 0, -1
	for _, loc := range envRef.FindAllStringSubmatchIndex(src, -1) {
		start, end := loc[0], loc[1]
		for i := lineStart; i < start; i++ { // advance to the reference's line
			if src[i] == '\n' {
				line++
				lineStart = i + 1
				commentAt = -1
			}
		}
		if commentAt < 0 {
			commentAt = commentStart(src, lineStart)
		}
		if start >= commentAt || src[start:end] == PortPlaceholder {
			continue
		}
		prev := last
		last = end
		if start > prev && src[start-1] == '$' { // $${NAME} is a literal ${NAME}
			b.WriteString(src[prev : start-1])
			if wholeScalar(src, start-1, end) {
				q, _ := json.Marshal(src[start:end])
				b.Write(q)
			} else {
				b.WriteString(src[start:end])
			}
			continue
		}
		b.WriteString(src[prev:start])
		val, err := expandRef(src, loc, lookup)
		if err != nil {
			return nil, &LineError{Source: source, Line: line, Msg: err.Error()}
		}
		if wholeScalar(src, start, end) {
			q, _ := json.Marshal(val)
			b.Write(q)
		} else {
			b.WriteString(strings.ReplaceAll(val, "\n", " "))
		}
	}
	b.WriteString(src[last:])
	return []byte(b.String()), nil
}

// commentStart returns the offset of the comment on the line starting at
// from (a '#' at the line's start or after a blank, outside quotes), or
// the offset of the line's end when it has none.
func commentStart(src string, from int) int {
	var quote byte
	for i := from; i < len(src) && src[i] != '\n'; i++ {
		c := src[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && quote == '"' {
				i++
			}
		case (c == '"' || c == '\'') && (i == from || strings.IndexByte(" \t[{,:-", src[i-1]) >= 0):
			quote = c
		case c == '#' && (i == from || src[i-1] == ' ' || src[i-1] == '\t'):
			return i
		}
	}
	return len(src)
}

// wholeScalar reports whether src[start:end] stands alone as a YAML value:
// after "key: " or "- " and before a separator or the end of the line.
func wholeScalar(src string, start, end int) bool {
	before := strings.TrimRight(src[:start], " \t")
	if !(strings.HasSuffix(before, ":") || strings.HasSuffix(before, "-") || strings.HasSuffix(before, "[") || strings.HasSuffix(before, ",")) {
		return false
	}
	if start > 0 && src[start-1] != ' ' && src[start-1] != '[' && src[start-1] != ',' {
		return false
	}
	rest := strings.TrimLeft(src[end:], " \t")
	return rest == "" || strings.ContainsAny(rest[:1], ",}]#\r\n")
}
