package codec

import (
	"encoding/json"
	"strings"
	"testing"
)

// spaced re-encodes JSON the way Python's json.dumps writes it by default:
// ": " after keys and ", " between members.
func spaced(t testing.TB, compact string) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(compact), &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(v, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return []byte(strings.ReplaceAll(string(b), "\n", " "))
}

// TestGeneratedChars_SpacingDoesNotMatter: a backend that reports no usage
// is billed from the generated text it sent, read as JSON, so a backend
// that spaces its JSON ("content": "x", as Python writes it) is counted
// like one that does not (it was counted as 0 characters: $0).
func TestGeneratedChars_SpacingDoesNotMatter(t *testing.T) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)
	q, _ := json.Marshal(text)
	for _, tc := range []struct{ name, compact string }{
		{"chat body", `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":` + string(q) + `},"finish_reason":"stop"}]}`},
		{"chat chunk", `{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":` + string(q) + `}}]}`},
		{"reasoning chunk", `{"choices":[{"index":0,"delta":{"reasoning_content":` + string(q) + `}}]}`},
		{"tool call chunk", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":` + string(q) + `}}]}}]}`},
		{"text completion", `{"id":"x","object":"text_completion","choices":[{"index":0,"text":` + string(q) + `,"finish_reason":"length"}]}`},
		{"anthropic text delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":` + string(q) + `}}`},
		{"anthropic thinking delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":` + string(q) + `}}`},
		{"anthropic tool delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":` + string(q) + `}}`},
		{"anthropic body", `{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":` + string(q) + `}],"stop_reason":"end_turn"}`},
	} {
		compact := generatedChars([]byte(tc.compact))
		sp := generatedChars(spaced(t, tc.compact))
		if compact < len(text)*9/10 || compact > len(text)*11/10 {
			t.Errorf("%s: compact JSON counted %d characters, want about %d", tc.name, compact, len(text))
		}
		if d := sp - compact; d*10 > compact || -d*10 > compact {
			t.Errorf("%s: spaced JSON counted %d characters, compact %d: more than 10 %% apart", tc.name, sp, compact)
		}
	}
	// Key names inside generated text are text, not keys.
	tricky := `{"choices":[{"delta":{"content":"say \"content\":\"no\" please"}}]}`
	if got := generatedChars([]byte(tricky)); got != len(`say "content":"no" please`) {
		t.Errorf("text quoting a key: %d characters, want %d", got, len(`say "content":"no" please`))
	}
}

func BenchmarkGeneratedChars_StreamChunk(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"qwen","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = generatedChars(chunk)
	}
}
