package translate

import (
	"encoding/json"
	"strings"
	"testing"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/dialect"
)

func TestAnthropicReasoning_ReadsThinkingAndEffort(t *testing.T) {
	for _, tc := range []struct {
		body    string
		enabled string // "", "true", "false"
		effort  string
		budget  int
	}{
		{`{"thinking":{"type":"enabled","budget_tokens":2048}}`, "true", "low", 2048},
		{`{"thinking":{"type":"enabled","budget_tokens":8192}}`, "true", "medium", 8192},
		{`{"thinking":{"type":"enabled","budget_tokens":24576},"output_config":{"effort":"low"}}`, "true", "low", 24576},
		{`{"thinking":{"type":"adaptive"},"output_config":{"effort":"max"}}`, "true", "high", 0},
		{`{"thinking":{"type":"disabled"}}`, "false", "", 0},
		{`{"output_config":{"effort":"medium"}}`, "", "medium", 0},
		{`{"output_config":{"effort":"high"},"messages":[{"role":"system","content":"x","output_config":{"effort":"low"}}]}`, "", "low", 0},
		// A per-turn effort whose system message has been cleared no longer applies.
		{`{"output_config":{"effort":"high"},"messages":[{"role":"system","content":"x","clear_at":"next_user_message","output_config":{"effort":"low"}},{"role":"user","content":"q"}]}`, "", "high", 0},
	} {
		r := AnthropicReasoning(decodeMessagesRequest(t, `{"model":"m",`+strings.TrimPrefix(tc.body, "{")))
		enabled := ""
		if r.Enabled != nil {
			enabled = map[bool]string{true: "true", false: "false"}[*r.Enabled]
		}
		if enabled != tc.enabled || r.Effort != tc.effort || r.BudgetTokens != tc.budget {
			t.Errorf("%s: got enabled %q effort %q budget %d", tc.body, enabled, r.Effort, r.BudgetTokens)
		}
	}
}

func TestApplyReasoning_MergesIntoKwargsTheClientSent(t *testing.T) {
	var chat openai.ChatCompletionRequest
	if err := json.Unmarshal([]byte(`{"model":"m","messages":[],"chat_template_kwargs":{"custom":1}}`), &chat); err != nil {
		t.Fatal(err)
	}
	opts := dialect.ReasoningOptions{Switch: "chat_template_kwargs.enable_thinking"}
	for range 2 { // idempotent
		if err := ApplyReasoning(&chat, ReasoningRequest{Enabled: ptr(false)}, opts); err != nil {
			t.Fatal(err)
		}
	}
	if got := string(chat.Extra["chat_template_kwargs"]); got != `{"custom":1,"enable_thinking":false}` {
		t.Errorf("chat_template_kwargs = %s", got)
	}
	// Thinking off: no effort and no budget are sent.
	chat = openai.ChatCompletionRequest{}
	_ = ApplyReasoning(&chat, ReasoningRequest{Enabled: ptr(false), Effort: "high", BudgetTokens: 9},
		dialect.ReasoningOptions{Effort: "reasoning_effort", Budget: "thinking_budget"})
	if chat.ReasoningEffort != "" || chat.Extra != nil {
		t.Errorf("thinking off sent effort %q extra %v", chat.ReasoningEffort, chat.Extra)
	}
}

func TestEstimateAnthropicInputTokens_SystemMessagesCountAsTheyAreSent(t *testing.T) {
	inMessages := decodeMessagesRequest(t, `{"model":"m","system":"You are terse.","messages":[{"role":"user","content":"What is 2+2?"},
	 {"role":"system","content":[{"type":"text","text":"<system-reminder>answer briefly</system-reminder>","cache_control":{"type":"ephemeral"}}]},
	 {"role":"system","content":"gone","clear_at":"next_user_message"},{"role":"user","content":"and 3+3?"}]}`)
	merged := decodeMessagesRequest(t, `{"model":"m","system":[{"type":"text","text":"You are terse."},{"type":"text","text":"<system-reminder>answer briefly</system-reminder>"}],
	 "messages":[{"role":"user","content":"What is 2+2?"},{"role":"user","content":"and 3+3?"}]}`)
	a, b := EstimateAnthropicInputTokens(inMessages), EstimateAnthropicInputTokens(merged)
	if a != b {
		t.Errorf("system messages inside messages estimate %d tokens, the same prompt as top-level system %d", a, b)
	}
	// Both translate to the same chat messages, which a tokenizer counts.
	ca, err := AnthropicToChat(withMaxTokens(inMessages))
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := AnthropicToChat(withMaxTokens(merged))
	if string(mustJSON(ca.Messages[0])) != string(mustJSON(cb.Messages[0])) || len(ca.Messages) != len(cb.Messages) {
		t.Errorf("chat messages differ:\n%s\n%s", mustJSON(ca.Messages), mustJSON(cb.Messages))
	}
}

func withMaxTokens(r *anthropic.MessagesRequest) *anthropic.MessagesRequest {
	r.MaxTokens = 1
	return r
}

func TestAnthropicIgnoredFields_ListsWhatAChatBackendDoesNotHonour(t *testing.T) {
	req := decodeMessagesRequest(t, `{"model":"m","max_tokens":9,"thinking":{"type":"adaptive"},"output_config":{"effort":"high","task_budget":{"total":9}},
	 "context_management":{"edits":[]},"mcp_servers":[],"service_tier":"auto","cache_control":{"type":"ephemeral"},
	 "messages":[{"role":"user","content":[{"type":"text","text":"q","cache_control":{"type":"ephemeral"}}]}]}`)
	got := strings.Join(AnthropicIgnoredFields(req, dialect.ChatOptions{}), ",")
	if want := "cache_control,context_management,mcp_servers,output_config.effort,output_config.task_budget,service_tier,thinking"; got != want {
		t.Errorf("without reasoning options: %s, want %s", got, want)
	}
	opts := dialect.ChatOptions{Reasoning: dialect.ReasoningOptions{Switch: "chat_template_kwargs.enable_thinking", Effort: "reasoning_effort"}}
	got = strings.Join(AnthropicIgnoredFields(req, opts), ",")
	if want := "cache_control,context_management,mcp_servers,output_config.task_budget,service_tier"; got != want {
		t.Errorf("with reasoning options: %s, want %s", got, want)
	}
}
