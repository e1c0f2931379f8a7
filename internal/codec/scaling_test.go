package codec

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"llmgate/internal/dialect"
)

// scalingShapes are requests of n repeated small elements, for each
// translated pair: what an attacker with a key would send to make the
// gateway's translation cost more than the body. The slow ones were: a
// user turn re-sorted at every tool message (chat to Anthropic), reasoning
// items added to one string (Responses to chat), and slices of 272-byte
// blocks grown by appending.
var scalingShapes = []struct {
	name    string
	d       Dialect
	backend dialect.Dialect
	body    func(n int) string
}{
	{"messages/text blocks", Messages, dialect.OpenAI, func(n int) string {
		return `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[` + repeat(n, `{"type":"text","text":"a"}`) + `]}]}`
	}},
	{"messages/short messages", Messages, dialect.OpenAI, func(n int) string {
		return `{"model":"m","max_tokens":9,"messages":[` + repeat(n, `{"role":"user","content":"a"}`) + `]}`
	}},
	{"messages/tool results", Messages, dialect.OpenAI, func(n int) string {
		return `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[` +
			repeatf(n, `{"type":"tool_use","id":"t%d","name":"f","input":{}}`) + `]},{"role":"user","content":[` +
			repeatf(n, `{"type":"tool_result","tool_use_id":"t%d","content":"r"}`) + `]}]}`
	}},
	{"chat/tool messages", Chat, dialect.Anthropic, func(n int) string {
		return `{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[` +
			repeatf(n, `{"id":"t%d","type":"function","function":{"name":"f","arguments":"{}"}}`) + `]},` +
			repeatf(n, `{"role":"tool","tool_call_id":"t%d","content":"r"}`) + `]}`
	}},
	{"chat/user and tool alternating", Chat, dialect.Anthropic, func(n int) string {
		return `{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[` +
			repeatf(n, `{"id":"t%d","type":"function","function":{"name":"f","arguments":"{}"}}`) + `]},` +
			repeatf(n, `{"role":"tool","tool_call_id":"t%[1]d","content":"r"},{"role":"user","content":"u%[1]d"}`) + `]}`
	}},
	{"chat/text parts", Chat, dialect.Anthropic, func(n int) string {
		return `{"model":"m","messages":[{"role":"user","content":[` + repeat(n, `{"type":"text","text":"a"}`) + `]}]}`
	}},
	{"chat/short messages", Chat, dialect.Anthropic, func(n int) string {
		return `{"model":"m","messages":[` + repeat(n, `{"role":"user","content":"a"},{"role":"assistant","content":"b"}`) + `]}`
	}},
	{"responses/reasoning items", Responses, dialect.OpenAI, func(n int) string {
		return `{"model":"m","input":[` + repeat(n, `{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"thinking"}]}`) +
			`,{"role":"user","content":"a"}]}`
	}},
	{"responses/function calls", Responses, dialect.OpenAI, func(n int) string {
		return `{"model":"m","input":[{"role":"user","content":"go"},` +
			repeatf(n, `{"type":"function_call","call_id":"c%[1]d","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c%[1]d","output":"r"}`) + `]}`
	}},
	{"responses/messages", Responses, dialect.Anthropic, func(n int) string {
		return `{"model":"m","input":[` + repeat(n, `{"role":"user","content":[{"type":"input_text","text":"a"}]}`) + `]}`
	}},
	{"messages/tools", Messages, dialect.OpenAI, func(n int) string {
		return `{"model":"m","max_tokens":9,"tools":[` + repeatf(n, `{"name":"f%d","input_schema":{"type":"object"}}`) +
			`],"messages":[{"role":"user","content":"a"}]}`
	}},
	{"messages/system messages", Messages, dialect.OpenAI, func(n int) string {
		return `{"model":"m","max_tokens":9,"messages":[` + repeat(n, `{"role":"user","content":"a"},{"role":"system","content":"s"}`) + `]}`
	}},
	{"messages/passthrough blocks", Messages, dialect.Anthropic, func(n int) string {
		return `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[` + repeat(n, `{"type":"text","text":"a"}`) + `]}]}`
	}},
	{"chat/tools", Chat, dialect.Anthropic, func(n int) string {
		return `{"model":"m","tools":[` + repeatf(n, `{"type":"function","function":{"name":"f%d","parameters":{"type":"object"}}}`) +
			`],"messages":[{"role":"user","content":"a"}]}`
	}},
	{"chat/system messages", Chat, dialect.Anthropic, func(n int) string {
		return `{"model":"m","messages":[` + repeat(n, `{"role":"user","content":"a"},{"role":"system","content":"s"}`) + `]}`
	}},
	{"responses/system items", Responses, dialect.OpenAI, func(n int) string {
		return `{"model":"m","input":[` + repeat(n, `{"role":"user","content":"a"},{"role":"developer","content":"s"}`) + `]}`
	}},
}

func repeat(n int, elem string) string {
	return strings.TrimSuffix(strings.Repeat(elem+",", n), ",")
}

func repeatf(n int, format string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, format, i)
	}
	return b.String()
}

// translateAlloc decodes body and builds the backend's request, returning
// the bytes allocated on the way.
func translateAlloc(t *testing.T, d Dialect, backend dialect.Dialect, body string) uint64 {
	t.Helper()
	// Two collections empty the sync.Pools (and their victim caches): a
	// buffer pooled by an earlier run would otherwise make one size look
	// cheaper than the other (seen: 967 KB instead of 1,635 KB at 1,000
	// elements, a ratio of 16.1 instead of 9.5).
	runtime.GC()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	r, err := Decode(d, []byte(body))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if _, err := r.Outbound(Target{Dialect: backend, UpstreamModel: "u"}); err != nil {
		t.Fatalf("outbound: %v", err)
	}
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// TestTranslate_CostLinearInElements checks that translating a request of
// many small elements allocates in proportion to its size: eight times the
// elements, about eight times the bytes (at most 16: a quadratic step
// gives 64, n^1.5 gives 23), and a bounded multiple of the body. Bytes
// allocated, not time, so the check does not depend on the machine's
// speed.
func TestTranslate_CostLinearInElements(t *testing.T) {
	const small, large = 1000, 8000
	for _, s := range scalingShapes {
		t.Run(s.name, func(t *testing.T) {
			translateAlloc(t, s.d, s.backend, s.body(10)) // warm up: lazily built tables
			a := translateAlloc(t, s.d, s.backend, s.body(small))
			body := s.body(large)
			b := translateAlloc(t, s.d, s.backend, body)
			ratio, perByte := float64(b)/float64(a), float64(b)/float64(len(body))
			t.Logf("%d elements: %d KB allocated; %d elements: %d KB (%.1fx), %.1f bytes per body byte", small, a>>10, large, b>>10, ratio, perByte)
			if ratio > 16 {
				t.Errorf("8x the elements allocated %.1fx the bytes: the translation is not linear in the request", ratio)
			}
			if perByte > 64 {
				t.Errorf("%.1f bytes allocated per byte of body (at most 64)", perByte)
			}
		})
	}
}
