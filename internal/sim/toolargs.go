package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// Tool-call arguments are drawn from the tool's "parameters" JSON Schema:
// required properties (and optional ones when minProperties asks for more),
// types (the first non-null one of a list), enum and const, nested objects
// and arrays (minItems, maxItems, uniqueItems, prefixItems), number bounds
// and multipleOf, string lengths, simple formats (date-time, date, time,
// email, uri, uuid, hostname, ipv4, ipv6) and local $ref. A draw that the
// schema rejects (an unusual pattern, overlapping oneOf branches) is drawn
// again a few times; patterns are satisfied only when a simple candidate
// matches them.

// maxArgAttempts bounds the redraws of arguments a schema rejects.
const maxArgAttempts = 8

// maxSchemaDepth stops recursive schemas ($ref cycles).
const maxSchemaDepth = 12

// Client schemas bound the work of one draw: at most maxGenItems items per
// array, maxGenString characters per string and maxGenNodes values in all
// (beyond it, values are the simplest strings; the schema check then
// decides whether to draw again).
const (
	maxGenItems  = 64
	maxGenString = 4096
	maxGenNodes  = 4096
)

// genArguments returns arguments for a tool with the given parameters
// schema, as the JSON text vLLM's tool parsers emit (Python json.dumps
// spacing).
func genArguments(params json.RawMessage, r *rand.Rand) string {
	var schema any = map[string]any{"type": "object"}
	if len(params) > 0 && string(params) != "null" {
		var s any
		if json.Unmarshal(params, &s) == nil {
			schema = s
		}
	}
	resolved := resolveSchema(params)
	var v any
	for range maxArgAttempts {
		g := argGen{r: r, root: schema}
		v = g.value(schema, 0)
		if resolved == nil || validates(resolved, v) {
			break
		}
	}
	b, err := marshal(v)
	if err != nil {
		return "{}"
	}
	return pyJSON(b)
}

// resolveSchema compiles a schema for validation, or nil when the
// validator cannot read it (then the draw is used as it is).
func resolveSchema(params json.RawMessage) *jsonschema.Resolved {
	if len(params) == 0 || string(params) == "null" {
		return nil
	}
	var s jsonschema.Schema
	if json.Unmarshal(params, &s) != nil {
		return nil
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil
	}
	return rs
}

// validates checks v as a client would see it: after a JSON round trip.
func validates(rs *jsonschema.Resolved, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var inst any
	if json.Unmarshal(b, &inst) != nil {
		return false
	}
	return rs.Validate(inst) == nil
}

// argGen draws one value for a schema.
type argGen struct {
	r     *rand.Rand
	root  any
	nodes int // values drawn so far
}

func (g *argGen) value(s any, depth int) any {
	g.nodes++
	m, ok := s.(map[string]any)
	if !ok || depth > maxSchemaDepth || g.nodes > maxGenNodes {
		// true, {} or an unreadable schema: anything goes.
		return g.words(1, 2)
	}
	if ref, ok := m["$ref"].(string); ok {
		if target := g.ref(ref); target != nil {
			return g.value(target, depth+1)
		}
	}
	if c, ok := m["const"]; ok {
		return c
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return e[g.r.IntN(len(e))]
	}
	if all, ok := m["allOf"].([]any); ok && len(all) > 0 {
		return g.value(g.merge(m, all, depth), depth+1)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := m[k].([]any); ok && len(alts) > 0 {
			var real []any
			for _, a := range alts {
				if am, ok := a.(map[string]any); !ok || am["type"] != "null" {
					real = append(real, a)
				}
			}
			if len(real) == 0 {
				return nil
			}
			return g.value(g.overlay(m, real[g.r.IntN(len(real))], k), depth+1)
		}
	}
	switch schemaType(m) {
	case "null":
		return nil
	case "boolean":
		return g.r.IntN(2) == 0
	case "integer":
		return g.integer(m)
	case "number":
		return g.number(m)
	case "array":
		return g.array(m, depth)
	case "object":
		return g.object(m, depth)
	}
	return g.str(m)
}

// schemaType is the first non-null type, or the one the keywords imply.
func schemaType(m map[string]any) string {
	switch t := m["type"].(type) {
	case string:
		return t
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok && s != "null" {
				return s
			}
		}
		if len(t) > 0 {
			return "null"
		}
	}
	for _, k := range []string{"properties", "required", "additionalProperties", "minProperties"} {
		if _, ok := m[k]; ok {
			return "object"
		}
	}
	for _, k := range []string{"items", "prefixItems", "minItems", "maxItems"} {
		if _, ok := m[k]; ok {
			return "array"
		}
	}
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} {
		if _, ok := m[k]; ok {
			return "number"
		}
	}
	return "string"
}

// ref resolves a local reference ("#", "#/$defs/x", "#/definitions/x").
func (g *argGen) ref(ref string) any {
	if !strings.HasPrefix(ref, "#") {
		return nil
	}
	cur := g.root
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#"), "/") {
		if part == "" {
			continue
		}
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			cur = c[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

// merge folds allOf branches into one schema: properties and required
// are united, other keywords taken from the first branch that has them.
func (g *argGen) merge(base map[string]any, all []any, depth int) map[string]any {
	out := map[string]any{}
	props := map[string]any{}
	var required []any
	parts := append([]any{base}, all...)
	for _, p := range parts {
		pm, ok := p.(map[string]any)
		if !ok {
			continue
		}
		if ref, ok := pm["$ref"].(string); ok && depth < maxSchemaDepth {
			if t, ok := g.ref(ref).(map[string]any); ok {
				pm = t
			}
		}
		for k, v := range pm {
			switch k {
			case "allOf", "$ref":
			case "properties":
				if pp, ok := v.(map[string]any); ok {
					for name, ps := range pp {
						props[name] = ps
					}
				}
			case "required":
				if rr, ok := v.([]any); ok {
					required = append(required, rr...)
				}
			default:
				if _, set := out[k]; !set {
					out[k] = v
				}
			}
		}
	}
	if len(props) > 0 {
		out["properties"] = props
	}
	if len(required) > 0 {
		out["required"] = required
	}
	return out
}

// overlay applies the chosen anyOf/oneOf branch over the keywords next to
// it (a branch often adds only "required" to shared properties).
func (g *argGen) overlay(base map[string]any, branch any, key string) any {
	bm, ok := branch.(map[string]any)
	if !ok {
		return branch
	}
	if ref, ok := bm["$ref"].(string); ok {
		if t, ok := g.ref(ref).(map[string]any); ok {
			bm = t
		}
	}
	out := map[string]any{}
	for k, v := range base {
		if k != key {
			out[k] = v
		}
	}
	for k, v := range bm {
		if k == "properties" {
			props := map[string]any{}
			if bp, ok := base["properties"].(map[string]any); ok {
				for n, p := range bp {
					props[n] = p
				}
			}
			if pp, ok := v.(map[string]any); ok {
				for n, p := range pp {
					props[n] = p
				}
			}
			out[k] = props
			continue
		}
		out[k] = v
	}
	return out
}

func (g *argGen) object(m map[string]any, depth int) any {
	props, _ := m["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Strings(names)
	obj := map[string]any{}
	add := func(name string) {
		if _, done := obj[name]; done {
			return
		}
		ps, ok := props[name]
		if !ok {
			ps = m["additionalProperties"]
			if b, isBool := ps.(bool); ps == nil || isBool && b {
				ps = map[string]any{"type": "string"}
			}
		}
		obj[name] = g.value(ps, depth+1)
	}
	if req, ok := m["required"].([]any); ok {
		for _, r := range req {
			if name, ok := r.(string); ok {
				add(name)
			}
		}
	}
	if minP, ok := number(m["minProperties"]); ok {
		for _, n := range names {
			if float64(len(obj)) >= minP {
				break
			}
			add(n)
		}
	}
	return obj
}

func (g *argGen) array(m map[string]any, depth int) any {
	n := 1
	if minI, ok := number(m["minItems"]); ok {
		n = max(n, int(min(minI, maxGenItems)))
	}
	if maxI, ok := number(m["maxItems"]); ok && int(maxI) < n {
		n = int(maxI)
	}
	prefix, _ := m["prefixItems"].([]any)
	closed := m["items"] == false // no items beyond the prefix
	unique, _ := m["uniqueItems"].(bool)
	out := make([]any, 0, n)
	seen := map[string]bool{}
	for i := 0; len(out) < n && i < n*8; i++ {
		if closed && len(out) >= len(prefix) {
			break
		}
		var v any
		if len(out) < len(prefix) {
			v = g.value(prefix[len(out)], depth+1)
		} else if items, ok := m["items"]; ok {
			v = g.value(items, depth+1)
		} else {
			v = g.words(1, 2)
		}
		if unique {
			key, _ := json.Marshal(v)
			if seen[string(key)] {
				continue
			}
			seen[string(key)] = true
		}
		out = append(out, v)
	}
	return out
}

// bounds reads minimum/maximum and their exclusive forms (numbers in
// draft 6 and later, booleans in draft 4).
func bounds(m map[string]any) (lo, hi float64, loEx, hiEx, hasLo, hasHi bool) {
	if v, ok := number(m["minimum"]); ok {
		lo, hasLo = v, true
		loEx, _ = m["exclusiveMinimum"].(bool)
	}
	if v, ok := number(m["exclusiveMinimum"]); ok && (!hasLo || v >= lo) {
		lo, hasLo, loEx = v, true, true
	}
	if v, ok := number(m["maximum"]); ok {
		hi, hasHi = v, true
		hiEx, _ = m["exclusiveMaximum"].(bool)
	}
	if v, ok := number(m["exclusiveMaximum"]); ok && (!hasHi || v <= hi) {
		hi, hasHi, hiEx = v, true, true
	}
	switch {
	case !hasLo && !hasHi:
		lo, hi = 1, 100
	case !hasLo && hi > 0:
		lo = 0
	case !hasLo:
		lo = hi - 100
	case !hasHi:
		hi = lo + 100
	}
	return lo, hi, loEx, hiEx, hasLo, hasHi
}

func (g *argGen) integer(m map[string]any) any {
	lo, hi, loEx, hiEx, _, _ := bounds(m)
	l, h := int64(math.Ceil(lo)), int64(math.Floor(hi))
	if loEx && float64(l) == lo {
		l++
	}
	if hiEx && float64(h) == hi {
		h--
	}
	step := int64(1)
	if mo, ok := number(m["multipleOf"]); ok && mo >= 1 && mo == math.Trunc(mo) {
		step = int64(mo)
	}
	// Multiples of step within [l, h].
	first := ceilDiv(l, step)
	last := floorDiv(h, step)
	if last < first {
		return first * step
	}
	return (first + g.r.Int64N(last-first+1)) * step
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a > 0) == (b > 0) {
		q++
	}
	return q
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (g *argGen) number(m map[string]any) any {
	lo, hi, loEx, hiEx, _, _ := bounds(m)
	if mo, ok := number(m["multipleOf"]); ok && mo > 0 {
		first := math.Ceil(lo / mo)
		last := math.Floor(hi / mo)
		if loEx && first*mo == lo {
			first++
		}
		if hiEx && last*mo == hi {
			last--
		}
		if last < first {
			return first * mo
		}
		return (first + float64(g.r.IntN(int(math.Min(last-first, 1e6))+1))) * mo
	}
	span := hi - lo
	v := lo + span*(0.05+0.9*g.r.Float64())
	v = math.Round(v*100) / 100
	if v <= lo && loEx || v < lo {
		v = lo + span/2
	}
	if v >= hi && hiEx || v > hi {
		v = lo + span/2
	}
	return v
}

// formats are values for the string formats tool schemas use; %d is
// replaced by a drawn number.
var formats = map[string]string{
	"date-time":     "2026-01-%02dT09:30:00Z",
	"date":          "2026-01-%02d",
	"time":          "09:30:%02dZ",
	"email":         "user%d@example.com",
	"idn-email":     "user%d@example.com",
	"uri":           "https://example.com/item/%d",
	"url":           "https://example.com/item/%d",
	"iri":           "https://example.com/item/%d",
	"uri-reference": "/item/%d",
	"iri-reference": "/item/%d",
	"hostname":      "host%d.example.com",
	"idn-hostname":  "host%d.example.com",
	"ipv4":          "192.0.2.%d",
	"ipv6":          "2001:db8::%x",
	"duration":      "PT%dM",
	"json-pointer":  "/items/%d",
	"regex":         "^item[0-9]{%d}$",
}

func (g *argGen) str(m map[string]any) any {
	minL, hasMin := number(m["minLength"])
	maxL, hasMax := number(m["maxLength"])
	minL, maxL = min(minL, maxGenString), max(maxL, 0)
	var s string
	if f, ok := m["format"].(string); ok {
		if f == "uuid" {
			s = g.uuid()
		} else if tmpl, ok := formats[f]; ok {
			s = fmt.Sprintf(tmpl, 1+g.r.IntN(28))
		}
	}
	if s == "" {
		s = g.words(1, 3)
	}
	if p, ok := m["pattern"].(string); ok {
		if re, err := regexp.Compile(p); err == nil && !re.MatchString(s) {
			for _, c := range []string{g.words(1, 1), "a", "abc", "A1", "1", "123", "x-1", "item_1", "2026-01-01"} {
				if re.MatchString(c) {
					s = c
					break
				}
			}
		}
	}
	for hasMin && float64(utf8.RuneCountInString(s)) < minL {
		s += " " + g.words(1, 1)
	}
	if hasMax && float64(utf8.RuneCountInString(s)) > maxL {
		s = string([]rune(s)[:int(maxL)])
	}
	return s
}

// words draws between lo and hi vocabulary words.
func (g *argGen) words(lo, hi int) string {
	n := lo + g.r.IntN(hi-lo+1)
	w := make([]string, n)
	for i := range w {
		w[i] = vocab[g.r.IntN(len(vocab))]
	}
	return strings.Join(w, " ")
}

func (g *argGen) uuid() string {
	var b [16]byte
	for i := range b {
		b[i] = byte(g.r.IntN(256))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// number reads a JSON number decoded into any.
func number(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok
}

// pyJSON respaces compact JSON the way Python's json.dumps writes it
// (", " and ": " between items), which is what vLLM's tool parsers put in
// "arguments".
func pyJSON(compact []byte) string {
	var b bytes.Buffer
	b.Grow(len(compact) + len(compact)/8)
	inString, escaped := false, false
	for _, c := range compact {
		b.WriteByte(c)
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ',' || c == ':'):
			b.WriteByte(' ')
		}
	}
	return b.String()
}
