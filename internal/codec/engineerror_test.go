package codec

import "testing"

// TestParseEngineError_ContextOverflowOfEachEngine reads the numbers of a
// context overflow as each engine sends them.
func TestParseEngineError_ContextOverflowOfEachEngine(t *testing.T) {
	for _, tc := range []struct {
		name, body          string
		typ                 string
		prompt, ctx, output int
	}{
		{"llama.cpp", `{"error":{"code":400,"message":"request (2409 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2409,"n_ctx":2048}}`,
			"exceed_context_size_error", 2409, 2048, 0},
		{"vLLM, messages and completion", `{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested 33000 tokens (1000 in the messages, 32000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`,
			"BadRequestError", 1000, 32768, 32000},
		{"vLLM, input only", `{"error":{"message":"This model's maximum context length is 2048 tokens. However, your request has 2409 input tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}}`,
			"BadRequestError", 2409, 2048, 0},
		{"vLLM, max_tokens too large", `{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum context length is 32768 tokens and your request has 1000 input tokens (32000 > 32768 - 1000).","type":"BadRequestError","code":400}}`,
			"BadRequestError", 1000, 32768, 32000},
		{"vLLM, decoder prompt", `{"error":{"message":"The decoder prompt (length 4100) is longer than the maximum model length of 4096. Make sure that max_model_len is no smaller than the number of text tokens.","type":"BadRequestError"}}`,
			"BadRequestError", 4100, 4096, 0},
		{"SGLang", `{"object":"error","message":"The input (5000 tokens) is longer than the model's context length (4096 tokens).","type":"BadRequestError","code":400}`,
			"BadRequestError", 5000, 4096, 0},
		{"Anthropic", `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210118 tokens > 200000 maximum"}}`,
			"invalid_request_error", 210118, 200000, 0},
		{"another 400", `{"error":{"message":"temperature must be non-negative","type":"BadRequestError"}}`, "BadRequestError", 0, 0, 0},
		{"not JSON", `Bad Request`, "", 0, 0, 0},
	} {
		got := ParseEngineError([]byte(tc.body))
		if got.Type != tc.typ || got.PromptTokens != tc.prompt || got.ContextTokens != tc.ctx || got.OutputTokens != tc.output {
			t.Errorf("%s: got %+v, want type %q prompt %d ctx %d output %d", tc.name, got, tc.typ, tc.prompt, tc.ctx, tc.output)
		}
		if got.ContextOverflow() != (tc.prompt > 0) {
			t.Errorf("%s: ContextOverflow %v", tc.name, got.ContextOverflow())
		}
	}
}
