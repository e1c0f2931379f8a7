package connect

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"
)

// tomlKV is one key and its wanted value: a string or an int64 (go-toml
// decodes integers as int64, so the comparisons below hold).
type tomlKV struct {
	key   string
	value any
}

// editTOML sets keys at the top level and in one table of a TOML
// document by editing its lines, so comments, ordering and every unrelated
// key survive; go-toml would drop comments on a decode/encode round trip.
// The result is parsed back and checked, so a file shaped in a way this
// editor does not understand (dotted keys, inline tables) is refused rather
// than corrupted.
func editTOML(src []byte, top []tomlKV, table string, kvs []tomlKV) ([]byte, error) {
	var doc map[string]any
	if err := toml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("cannot parse: %w", err)
	}
	text := strings.ReplaceAll(string(src), "\r\n", "\n")
	lines := strings.Split(text, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	headers := tableHeaders(lines)
	// Top-level keys live before the first table header.
	topEnd := len(lines)
	if len(headers) > 0 {
		topEnd = headers[0].line
	}
	var insertTop []string
	for _, kv := range top {
		if v, ok := doc[kv.key]; ok && v == kv.value {
			continue
		}
		if i := findKey(lines, 0, topEnd, kv.key); i >= 0 {
			lines[i] = kv.key + " = " + tomlValue(kv.value)
			continue
		}
		insertTop = append(insertTop, kv.key+" = "+tomlValue(kv.value))
	}
	// The table: edit in place when present, else append it.
	parts := strings.SplitN(table, ".", 2)
	existing, _ := lookupTable(doc, parts)
	start, end := -1, len(lines)
	for i, h := range headers {
		if h.name == table {
			start = h.line
			if i+1 < len(headers) {
				end = headers[i+1].line
			}
		}
	}
	var appendTable []string
	if start < 0 {
		appendTable = append(appendTable, "", "["+table+"]")
		for _, kv := range kvs {
			appendTable = append(appendTable, kv.key+" = "+tomlValue(kv.value))
		}
	} else {
		var insert []string
		for _, kv := range kvs {
			if v, ok := existing[kv.key]; ok && v == kv.value {
				continue
			}
			if i := findKey(lines, start+1, end, kv.key); i >= 0 {
				lines[i] = kv.key + " = " + tomlValue(kv.value)
				continue
			}
			insert = append(insert, kv.key+" = "+tomlValue(kv.value))
		}
		if len(insert) > 0 {
			at := lastContent(lines, start, end) + 1
			lines = append(lines[:at], append(insert, lines[at:]...)...)
		}
	}
	if len(insertTop) > 0 {
		at := lastContent(lines, -1, topEnd) + 1
		block := insertTop
		if topEnd < len(lines) && at == topEnd {
			block = append(block, "")
		}
		lines = append(lines[:at], append(block, lines[at:]...)...)
	}
	lines = append(lines, appendTable...)
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	out := []byte(strings.Join(lines, "\n") + "\n")
	if err := verifyTOML(out, top, parts, kvs); err != nil {
		return nil, err
	}
	return out, nil
}

func lookupTable(doc map[string]any, path []string) (map[string]any, bool) {
	cur := doc
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

func verifyTOML(out []byte, top []tomlKV, table []string, kvs []tomlKV) error {
	var doc map[string]any
	if err := toml.Unmarshal(out, &doc); err != nil {
		return fmt.Errorf("the file's layout defeats a safe edit (%v); add the settings by hand", err)
	}
	tab, _ := lookupTable(doc, table)
	for _, kv := range top {
		if !reflect.DeepEqual(doc[kv.key], kv.value) {
			return fmt.Errorf("the file's layout defeats a safe edit of %s; add the settings by hand", kv.key)
		}
	}
	for _, kv := range kvs {
		if tab == nil || !reflect.DeepEqual(tab[kv.key], kv.value) {
			return fmt.Errorf("the file's layout defeats a safe edit of [%s] %s; add the settings by hand", strings.Join(table, "."), kv.key)
		}
	}
	return nil
}

type header struct {
	line int
	name string
}

// tableHeaders finds "[table]" and "[[array]]" lines outside multi-line
// strings and normalises their names ("model_providers . \"x\"" → "model_providers.x").
func tableHeaders(lines []string) []header {
	var out []header
	inBasic, inLiteral := false, false
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if !inBasic && !inLiteral && strings.HasPrefix(t, "[") {
			name := t
			if j := strings.Index(name, "#"); j >= 0 && !strings.ContainsAny(name[:j], `"'`) {
				name = strings.TrimSpace(name[:j])
			}
			name = strings.Trim(name, "[]")
			var parts []string
			for _, p := range strings.Split(name, ".") {
				parts = append(parts, strings.Trim(strings.TrimSpace(p), `"'`))
			}
			out = append(out, header{i, strings.Join(parts, ".")})
		}
		if strings.Count(l, `"""`)%2 == 1 && !inLiteral {
			inBasic = !inBasic
		}
		if strings.Count(l, `'''`)%2 == 1 && !inBasic {
			inLiteral = !inLiteral
		}
	}
	return out
}

// findKey returns the line in [from, to) that assigns key, or -1.
func findKey(lines []string, from, to int, key string) int {
	for i := max(from, 0); i < to && i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		rest, ok := strings.CutPrefix(t, key)
		if !ok {
			rest, ok = strings.CutPrefix(t, `"`+key+`"`)
		}
		if ok && strings.HasPrefix(strings.TrimSpace(rest), "=") {
			return i
		}
	}
	return -1
}

// lastContent returns the last non-blank, non-comment line index in
// (from, to), or from when there is none.
func lastContent(lines []string, from, to int) int {
	for i := min(to, len(lines)) - 1; i > from; i-- {
		t := strings.TrimSpace(lines[i])
		if t != "" && !strings.HasPrefix(t, "#") {
			return i
		}
	}
	return from
}

// tomlValue writes a string or an integer value.
func tomlValue(v any) string {
	if n, ok := v.(int64); ok {
		return fmt.Sprint(n)
	}
	s, _ := v.(string)
	return tomlString(s)
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
