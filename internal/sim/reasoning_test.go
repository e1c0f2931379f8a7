package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// reasoningConfig serves the qwen3-32b preset with test timings.
func reasoningConfig() Config {
	mc, _ := PresetFor("qwen3-32b")
	mc.PrefillBase, mc.PrefillPerToken = 0, 0
	mc.DecodeBase, mc.DecodePerSeq = 20*time.Microsecond, 0
	mc.MeanReasoningTokens, mc.MeanOutputTokens = 24, 16
	return Config{Models: []ModelConfig{mc}, Seed: 3}
}

// streamedAnswer splits a chat stream into its reasoning and content
// deltas, in arrival order, and checks no chunk carries both.
type streamedAnswer struct {
	order            []string // "r" or "c" per delta
	reasoning, text  string
	reasoningChunks  int
	contentChunks    int
	completionTokens int
	reasoningTokens  int
}

func readAnswerStream(t *testing.T, res streamResult) streamedAnswer {
	t.Helper()
	var a streamedAnswer
	for i, ev := range res.events {
		var c struct {
			Choices []struct {
				Delta struct {
					Role             string  `json:"role"`
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens        int `json:"completion_tokens"`
				CompletionTokensDetails *struct {
					ReasoningTokens int `json:"reasoning_tokens"`
				} `json:"completion_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(ev.data, &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil && len(c.Choices) == 0 {
			a.completionTokens = c.Usage.CompletionTokens
			if c.Usage.CompletionTokensDetails != nil {
				a.reasoningTokens = c.Usage.CompletionTokensDetails.ReasoningTokens
			}
			continue
		}
		d := c.Choices[0].Delta
		if i == 0 || d.Role != "" {
			continue
		}
		if d.Content != nil && d.ReasoningContent != nil {
			t.Errorf("chunk %d carries content and reasoning: %s", i, ev.data)
		}
		if d.ReasoningContent != nil {
			a.order = append(a.order, "r")
			a.reasoning += *d.ReasoningContent
			a.reasoningChunks++
		}
		if d.Content != nil {
			a.order = append(a.order, "c")
			a.text += *d.Content
			a.contentChunks++
		}
	}
	return a
}

func TestReasoning_Qwen3StreamsReasoningBeforeTheAnswer(t *testing.T) {
	_, url := startServer(t, reasoningConfig())
	for seed := range 6 {
		body := fmt.Sprintf(`{"model":"qwen3-32b","messages":[{"role":"user","content":"Why is the sky blue?"}],"seed":%d,"max_tokens":200,"stream":true,"stream_options":{"include_usage":true}}`, seed)
		a := readAnswerStream(t, stream(t, url+"/v1/chat/completions", body))
		joined := strings.Join(a.order, "")
		if a.reasoningChunks == 0 || a.contentChunks == 0 || strings.Contains(joined, "cr") {
			t.Fatalf("seed %d: deltas in order %s, want reasoning first then content", seed, joined)
		}
		// Usage counts the reasoning (plus the two think tags) and the answer.
		if a.reasoningTokens != a.reasoningChunks || a.completionTokens != a.reasoningChunks+2+a.contentChunks {
			t.Errorf("seed %d: usage %d (reasoning %d), chunks %d reasoning + %d content", seed,
				a.completionTokens, a.reasoningTokens, a.reasoningChunks, a.contentChunks)
		}
		// Not streamed: the same seeded answer, split into its fields.
		b := chat(t, url, strings.Replace(body, `"stream":true,"stream_options":{"include_usage":true}`, `"stream":false`, 1))
		m := b.Choices[0].Message
		if m.ReasoningContent == nil || *m.ReasoningContent != a.reasoning || m.Content == nil || *m.Content != a.text {
			t.Errorf("seed %d: non-streamed reasoning %v content %v, streamed %q / %q", seed, m.ReasoningContent, m.Content, a.reasoning, a.text)
		}
		if d := b.Usage.CompletionTokensDetails; d == nil || d.ReasoningTokens != a.reasoningTokens || b.Usage.CompletionTokens != a.completionTokens {
			t.Errorf("seed %d: non-streamed usage %+v", seed, b.Usage)
		}
	}
}

func TestReasoning_EnableThinkingFalseAndIncludeReasoningFalse(t *testing.T) {
	_, url := startServer(t, reasoningConfig())
	off := chat(t, url, `{"messages":[{"role":"user","content":"hi"}],"seed":1,"max_tokens":50,"chat_template_kwargs":{"enable_thinking":false}}`)
	if m := off.Choices[0].Message; m.ReasoningContent != nil || m.Content == nil || *m.Content == "" {
		t.Errorf("enable_thinking false: reasoning %v content %v", m.ReasoningContent, m.Content)
	}
	if d := off.Usage.CompletionTokensDetails; d == nil || d.ReasoningTokens != 0 {
		t.Errorf("enable_thinking false: details %+v, want reasoning_tokens 0", d)
	}
	hidden := chat(t, url, `{"messages":[{"role":"user","content":"hi"}],"seed":1,"max_tokens":50,"include_reasoning":false}`)
	shown := chat(t, url, `{"messages":[{"role":"user","content":"hi"}],"seed":1,"max_tokens":50}`)
	if hidden.Choices[0].Message.ReasoningContent != nil || shown.Choices[0].Message.ReasoningContent == nil {
		t.Fatalf("include_reasoning false should hide reasoning_content only")
	}
	// The hidden reasoning was still generated and is still counted.
	if hidden.Usage.CompletionTokens != shown.Usage.CompletionTokens || hidden.Usage.CompletionTokensDetails.ReasoningTokens == 0 ||
		*hidden.Choices[0].Message.Content != *shown.Choices[0].Message.Content {
		t.Errorf("hidden %+v, shown %+v", hidden.Usage, shown.Usage)
	}
	res := stream(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"seed":1,"max_tokens":50,"include_reasoning":false,"stream":true}`)
	if a := readAnswerStream(t, res); a.reasoningChunks != 0 || a.contentChunks == 0 {
		t.Errorf("streamed include_reasoning false: %d reasoning chunks, %d content", a.reasoningChunks, a.contentChunks)
	}
}

func TestReasoning_SmallMaxTokensStillLeavesAnAnswer(t *testing.T) {
	cfg := reasoningConfig()
	cfg.Models[0].MeanReasoningTokens = 500
	_, url := startServer(t, cfg)
	for seed := range 10 {
		a := chat(t, url, fmt.Sprintf(`{"messages":[{"role":"user","content":"Name three primes."}],"seed":%d,"max_tokens":12}`, seed))
		m := a.Choices[0].Message
		if m.Content == nil || *m.Content == "" || a.Usage.CompletionTokens > 12 || a.Usage.CompletionTokensDetails.ReasoningTokens > 4 {
			t.Errorf("seed %d: content %v, usage %+v", seed, m.Content, a.Usage)
		}
	}
}

func TestReasoning_PlainModelsKeepVLLM011UsageShape(t *testing.T) {
	_, url := startServer(t, fastConfig())
	_, _, b := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"chat_template_kwargs":{"enable_thinking":true}}`)
	if strings.Contains(string(b), "completion_tokens_details") || !strings.Contains(string(b), `"reasoning_content":null`) {
		t.Errorf("a model without a reasoning parser answered %s", b)
	}
}

func TestReasoning_PresetsAndNameOnlyConfigs(t *testing.T) {
	if !Presets()["qwen3-32b"].Reasoning || Presets()["qwen2.5-7b-instruct"].Reasoning {
		t.Error("only qwen3-32b reasons among the presets")
	}
	// A bare name takes its preset, and reasoning set next to it is kept.
	s, err := New(Config{Models: []ModelConfig{{Name: "qwen3-32b"}, {Name: "Qwen/QwQ-32B", Reasoning: true, MeanReasoningTokens: 9}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ms := s.Models()
	if !ms[0].Reasoning || ms[0].MeanReasoningTokens != 192 || !ms[1].Reasoning || ms[1].MeanReasoningTokens != 9 {
		t.Errorf("models %+v", ms)
	}
}
