package sim

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestSDK_OpenAIGoStreamsChatWithUsage checks the simulator against the
// official Go SDK: a streamed chat completion with include_usage must
// accumulate into text and report usage.
func TestSDK_OpenAIGoStreamsChatWithUsage(t *testing.T) {
	cfg := fastConfig()
	cfg.APIKey = "sk-sim"
	cfg.Models[0].Name = "qwen2.5-7b-instruct"
	_, url := startServer(t, cfg)
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("sk-sim"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:               "qwen2.5-7b-instruct",
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Write a haiku about queues.")},
		MaxCompletionTokens: openai.Int(12),
		Seed:                openai.Int(5),
		StreamOptions:       openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for st.Next() {
		acc.AddChunk(st.Current())
		chunks++
	}
	if err := st.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if acc.Usage.CompletionTokens < 1 || acc.Usage.CompletionTokens > 12 ||
		acc.Usage.TotalTokens != acc.Usage.PromptTokens+acc.Usage.CompletionTokens || acc.Usage.PromptTokens == 0 {
		t.Fatalf("usage %+v", acc.Usage)
	}
	if len(acc.Choices) != 1 || strings.TrimSpace(acc.Choices[0].Message.Content) == "" {
		t.Fatalf("accumulated choices %+v", acc.Choices)
	}
	if fr := acc.Choices[0].FinishReason; fr != "stop" && fr != "length" {
		t.Errorf("finish reason %q", fr)
	}
	// Role chunk + one chunk per token + the usage chunk.
	if want := int(acc.Usage.CompletionTokens) + 2; chunks != want {
		t.Errorf("%d chunks, want %d", chunks, want)
	}
	t.Logf("%q prompt=%d completion=%d", acc.Choices[0].Message.Content, acc.Usage.PromptTokens, acc.Usage.CompletionTokens)

	// A wrong key is refused. vLLM's 401 body is {"error": "Unauthorized"}
	// (a string, not an object), which openai-go cannot decode into its
	// error type; the simulator reproduces that faithfully, so all the test
	// can require is a failed call that is not a success.
	bad := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("wrong"), option.WithMaxRetries(0))
	_, err := bad.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "qwen2.5-7b-instruct",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if err == nil || (errors.As(err, &apiErr) && apiErr.StatusCode != 401) {
		t.Errorf("wrong key: %v", err)
	}
	t.Logf("openai-go on vLLM's 401 body: %v", err)
}

// TestSDK_OpenAIGoAccumulatesStreamedToolCallsAndReasoning checks the tool
// call deltas and reasoning against the official Go SDK's accumulator.
func TestSDK_OpenAIGoAccumulatesStreamedToolCallsAndReasoning(t *testing.T) {
	cfg := reasoningConfig()
	_, url := startServer(t, cfg)
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    "qwen3-32b",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name: "get_weather",
			Parameters: openai.FunctionParameters{"type": "object", "required": []string{"city"},
				"properties": map[string]any{"city": map[string]any{"type": "string"}}},
		})},
		ToolChoice:    openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		Seed:          openai.Int(9),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	reasoning := ""
	for st.Next() {
		c := st.Current()
		acc.AddChunk(c)
		if len(c.Choices) == 1 {
			if f, ok := c.Choices[0].Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var s string
				if json.Unmarshal([]byte(f.Raw()), &s) == nil {
					reasoning += s
				}
			}
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("accumulated %+v", acc.Choices)
	}
	tc := acc.Choices[0].Message.ToolCalls[0]
	var args struct{ City string }
	if tc.Function.Name != "get_weather" || json.Unmarshal([]byte(tc.Function.Arguments), &args) != nil || args.City == "" || tc.ID == "" {
		t.Errorf("tool call %+v", tc)
	}
	if reasoning == "" || acc.Usage.CompletionTokensDetails.ReasoningTokens == 0 {
		t.Errorf("reasoning %q, usage %+v", reasoning, acc.Usage)
	}
}
