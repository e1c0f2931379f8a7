package sim

import (
	"context"
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
