package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	osdk "github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
)

// The official SDK's stream accumulator reads the stream made from a JSON
// answer like any other: text, tool call, finish reason and usage.
func TestStreamRequest_JSONAnswerReadsWithTheOpenAISDK(t *testing.T) {
	up := newUpstream(t, "batchonly", func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	})
	f := startFaultGW(t, fmt.Sprintf("backends:\n  b: {url: %s}\nmodels:\n  m: {backend: b}\n", up.URL))
	client := osdk.NewClient(ooption.WithBaseURL("http://"+f.g.Addr+"/v1/"), ooption.WithAPIKey(testMaster), ooption.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := client.Chat.Completions.NewStreaming(ctx, osdk.ChatCompletionNewParams{
		Model:         "m",
		Messages:      []osdk.ChatCompletionMessageParamUnion{osdk.UserMessage("hi")},
		StreamOptions: osdk.ChatCompletionStreamOptionsParam{IncludeUsage: osdk.Bool(true)},
	})
	var acc osdk.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 {
		t.Fatalf("accumulated %+v", acc.ChatCompletion)
	}
	m := acc.Choices[0]
	if m.Message.Content != "hello there" || m.FinishReason != "tool_calls" || len(m.Message.ToolCalls) != 1 ||
		m.Message.ToolCalls[0].Function.Name != "lookup" || m.Message.ToolCalls[0].Function.Arguments != `{"q":1}` || acc.Usage.TotalTokens != 12 {
		t.Fatalf("accumulated %+v usage %+v", m, acc.Usage)
	}
}

// The same through the translators: Claude Code (/v1/messages) and the
// Responses API streaming from a chat backend that answered JSON get their
// own protocol's stream, read here by the official SDKs.
func TestStreamRequest_JSONAnswerBecomesAMessagesAndResponsesStream(t *testing.T) {
	up := newUpstream(t, "batchonly", func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello from json"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	})
	d := startDialectGW(t, fmt.Sprintf("backends:\n  b: {url: %s}\nmodels:\n  m: {backend: b}\n", up.URL))
	text, err := readAnthropicStream(t, d.anthropicClient(), dialectCtx(t), "m")
	if err != nil || text != "hello from json" {
		t.Fatalf("messages stream: %q %v", text, err)
	}
	types, rtext, last, err := readResponsesStream(t, d.openaiClient(), dialectCtx(t), "m")
	if err != nil || rtext != "hello from json" || last.Type != "response.completed" {
		t.Fatalf("responses stream: %q %v, events %v", rtext, err, types)
	}
	for _, r := range d.ledger(2) {
		if r.Status != 200 || r.Estimated || r.PromptTokens != 9 || r.CompletionTokens != 3 {
			t.Fatalf("record %+v: want the backend's usage", r)
		}
	}
}
