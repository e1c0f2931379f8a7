package conformance

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/shared"
)

// openaiClient is the official openai-go SDK pointed at the gateway.
func (e *env) openaiClient(opts ...option.RequestOption) openai.Client {
	base := []option.RequestOption{option.WithBaseURL(e.root + "/v1/"), option.WithAPIKey(e.key), option.WithMaxRetries(0)}
	return openai.NewClient(append(base, opts...)...)
}

var chatWeatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("Current weather for a city"),
	Parameters: shared.FunctionParameters{"type": "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
})

func chatParams(model, prompt string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     model,
		MaxTokens: openai.Int(64),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a terse assistant."), openai.UserMessage(prompt)},
	}
}

func requireOpenAIValid(t *testing.T, what string, fields map[string]respjson.Field) {
	t.Helper()
	for name, f := range fields {
		if !f.Valid() {
			t.Errorf("%s: field %s is missing or null (raw %q)", what, name, f.Raw())
		}
	}
}

// chatTurn runs one chat completion, streaming (accumulated with the SDK's
// ChatCompletionAccumulator, usage requested) or not, and returns the
// completion and the reasoning text (reasoning_content, a vLLM extension the
// SDK keeps as an extra field).
func chatTurn(t *testing.T, c openai.Client, params openai.ChatCompletionNewParams, stream bool) (openai.ChatCompletion, string) {
	t.Helper()
	ctx := testCtx(t)
	if !stream {
		resp, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("Chat.Completions.New: %v", apiErrorDetail(err))
		}
		requireOpenAIValid(t, "completion", map[string]respjson.Field{"id": resp.JSON.ID, "object": resp.JSON.Object,
			"created": resp.JSON.Created, "model": resp.JSON.Model, "choices": resp.JSON.Choices, "usage": resp.JSON.Usage})
		var reasoning string
		if len(resp.Choices) > 0 {
			if f, ok := resp.Choices[0].Message.JSON.ExtraFields["reasoning_content"]; ok {
				_ = json.Unmarshal([]byte(f.Raw()), &reasoning)
			}
		}
		return *resp, reasoning
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := c.Chat.Completions.NewStreaming(ctx, params)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	var reasoning strings.Builder
	chunks, usageChunks := 0, 0
	for s.Next() {
		ch := s.Current()
		chunks++
		requireOpenAIValid(t, "chunk", map[string]respjson.Field{"id": ch.JSON.ID, "object": ch.JSON.Object, "created": ch.JSON.Created,
			"model": ch.JSON.Model, "choices": ch.JSON.Choices})
		if ch.JSON.Usage.Valid() {
			usageChunks++
		}
		for _, choice := range ch.Choices {
			if f, ok := choice.Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var r string
				_ = json.Unmarshal([]byte(f.Raw()), &r)
				reasoning.WriteString(r)
			}
		}
		if !acc.AddChunk(ch) {
			t.Fatalf("ChatCompletionAccumulator rejected chunk %s", ch.RawJSON())
		}
		if tc, ok := acc.JustFinishedToolCall(); ok && tc.Name == "" {
			t.Errorf("finished tool call without a name: %+v", tc)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", apiErrorDetail(err))
	}
	if chunks == 0 || usageChunks != 1 {
		t.Errorf("%d chunks, %d with usage; want a stream ending with exactly one usage chunk", chunks, usageChunks)
	}
	return acc.ChatCompletion, reasoning.String()
}

func TestOpenAIGoSDK_ChatTextFromEveryBackend(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range allBackends {
		for _, m := range modes() {
			t.Run(b.prefix+"/"+m.name, func(t *testing.T) {
				resp, _ := chatTurn(t, c, chatParams(b.model("text"), "Say hello"), m.stream)
				if len(resp.Choices) != 1 {
					t.Fatalf("%d choices", len(resp.Choices))
				}
				ch := resp.Choices[0]
				if !b.scripts {
					if ch.Message.Content == "" || resp.Usage.CompletionTokens <= 0 || resp.Usage.CompletionTokens > 64 || resp.Usage.PromptTokens <= 0 {
						t.Fatalf("content %q usage %+v", ch.Message.Content, resp.Usage)
					}
					if (ch.FinishReason == "length") != (resp.Usage.CompletionTokens == 64) {
						t.Errorf("finish_reason %q with %d of 64 tokens", ch.FinishReason, resp.Usage.CompletionTokens)
					}
					return
				}
				if ch.Message.Content != textAnswer || ch.FinishReason != "stop" || ch.Message.Role != "assistant" {
					t.Errorf("content %q finish %q role %q", ch.Message.Content, ch.FinishReason, ch.Message.Role)
				}
				u := resp.Usage
				if u.PromptTokens != fakePromptTokens || u.CompletionTokens != fakeCompletionTokens || u.TotalTokens != fakePromptTokens+fakeCompletionTokens {
					t.Errorf("usage %+v, want %d+%d", u, fakePromptTokens, fakeCompletionTokens)
				}
			})
		}
	}
}

// A streaming client that did not ask for usage must not get the usage
// chunk the gateway asked the backend for (SDKs that index choices[0]
// crash on it).
func TestOpenAIGoSDK_ChatStreamWithoutIncludeUsageHasNoUsageChunk(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range allBackends {
		t.Run(b.prefix, func(t *testing.T) {
			s := c.Chat.Completions.NewStreaming(testCtx(t), chatParams(b.model("text"), "Say hello"))
			defer s.Close()
			n := 0
			for s.Next() {
				n++
				if len(s.Current().Choices) == 0 {
					t.Errorf("chunk without choices reached a client that did not ask for usage: %s", s.Current().RawJSON())
				}
			}
			if s.Err() != nil || n == 0 {
				t.Fatalf("%d chunks, err %v", n, s.Err())
			}
		})
	}
}

func TestOpenAIGoSDK_ChatToolCallRoundTrip(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range scriptedBackends {
		for _, scenario := range toolScenarios {
			for _, m := range modes() {
				t.Run(b.prefix+"/"+scenario+"/"+m.name, func(t *testing.T) {
					params := chatParams(b.model(scenario), "What is the weather in Paris and Tokyo?")
					params.Tools = []openai.ChatCompletionToolUnionParam{chatWeatherTool}
					first, _ := chatTurn(t, c, params, m.stream)
					ch := first.Choices[0]
					if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) == 0 {
						t.Fatalf("finish %q with %d tool calls, want tool_calls: %s", ch.FinishReason, len(ch.Message.ToolCalls), first.RawJSON())
					}
					params.Messages = append(params.Messages, ch.Message.ToParam())
					var cities []string
					for _, call := range ch.Message.ToolCalls {
						var args struct{ City string }
						if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil || call.Function.Name != "get_weather" || call.ID == "" {
							t.Fatalf("tool call %+v (%v)", call, err)
						}
						cities = append(cities, args.City)
						params.Messages = append(params.Messages, openai.ToolMessage(weatherResult[args.City], call.ID))
					}
					if want := toolCities[scenario]; strings.Join(cities, ",") != want {
						t.Fatalf("tool calls for %v, want %s", cities, want)
					}
					second, _ := chatTurn(t, c, params, m.stream)
					if got := second.Choices[0]; got.Message.Content != toolAnswers[scenario] || got.FinishReason != "stop" {
						t.Errorf("second turn %q finish %q, want %q stop", got.Message.Content, got.FinishReason, toolAnswers[scenario])
					}
				})
			}
		}
	}
}

func TestOpenAIGoSDK_ChatReasoningContent(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range scriptedBackends {
		for _, m := range modes() {
			t.Run(b.prefix+"/"+m.name, func(t *testing.T) {
				resp, reasoning := chatTurn(t, c, chatParams(b.model("reason"), "Hello"), m.stream)
				if reasoning != thinkingText || resp.Choices[0].Message.Content != textAnswer {
					t.Errorf("reasoning_content %q content %q, want %q then %q", reasoning, resp.Choices[0].Message.Content, thinkingText, textAnswer)
				}
			})
		}
	}
}

func TestOpenAIGoSDK_ChatMidStreamFailuresEndTheStreamWithAnError(t *testing.T) {
	e := newEnv(t)
	c := e.openaiClient()
	for _, b := range scriptedBackends {
		for _, scenario := range []string{"cut", "errmid"} {
			t.Run(b.prefix+"/"+scenario, func(t *testing.T) {
				s := c.Chat.Completions.NewStreaming(testCtx(t), chatParams(b.model(scenario), "Hello"))
				defer s.Close()
				var acc openai.ChatCompletionAccumulator
				for s.Next() {
					acc.AddChunk(s.Current())
				}
				if s.Err() == nil {
					t.Fatalf("stream ended without an error; choices %+v", acc.Choices)
				}
				if !strings.Contains(s.Err().Error(), "message") {
					t.Errorf("error %v does not carry the gateway's error object", s.Err())
				}
				if len(acc.Choices) == 0 || !strings.HasPrefix(acc.Choices[0].Message.Content, "Hello from") {
					t.Errorf("the text before the failure was lost: %+v", acc.Choices)
				}
			})
		}
	}
}

func TestOpenAIGoSDK_ErrorsAreTypedWithStatus(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name   string
		client openai.Client
		model  string
		status int
	}{
		{"BadAPIKey", e.openaiClient(option.WithAPIKey("sk-lg-not-a-real-key")), "an-text", http.StatusUnauthorized},
		{"UnknownModel", e.openaiClient(), "no-such-model", http.StatusNotFound},
		{"ModelNotAllowedForKey", e.openaiClient(option.WithAPIKey(e.narrowKey)), "an-text", http.StatusForbidden},
		{"ChatBackendRateLimited", e.openaiClient(), "oa-ratelimit", http.StatusTooManyRequests},
		{"AnthropicBackendRateLimited", e.openaiClient(), "an-ratelimit", http.StatusTooManyRequests},
	}
	for _, tc := range cases {
		t.Run("Chat/"+tc.name, func(t *testing.T) {
			_, err := tc.client.Chat.Completions.New(testCtx(t), chatParams(tc.model, "Hello"))
			checkOpenAIError(t, err, tc.status)
		})
		t.Run("ChatStream/"+tc.name, func(t *testing.T) {
			s := tc.client.Chat.Completions.NewStreaming(testCtx(t), chatParams(tc.model, "Hello"))
			for s.Next() {
				t.Errorf("unexpected chunk %s", s.Current().RawJSON())
			}
			checkOpenAIError(t, s.Err(), tc.status)
		})
		t.Run("Responses/"+tc.name, func(t *testing.T) {
			_, err := tc.client.Responses.New(testCtx(t), responsesParams(tc.model, "Hello"))
			checkOpenAIError(t, err, tc.status)
		})
		t.Run("ResponsesStream/"+tc.name, func(t *testing.T) {
			s := tc.client.Responses.NewStreaming(testCtx(t), responsesParams(tc.model, "Hello"))
			for s.Next() {
				t.Errorf("unexpected event %s", s.Current().RawJSON())
			}
			checkOpenAIError(t, s.Err(), tc.status)
		})
	}
}

func checkOpenAIError(t *testing.T, err error, status int) {
	t.Helper()
	var oe *openai.Error
	if !errors.As(err, &oe) {
		t.Fatalf("error %v (%T), want *openai.Error", err, err)
	}
	if oe.StatusCode != status || oe.Message == "" || oe.Type == "" {
		t.Errorf("status %d type %q message %q, want %d with a type and a message", oe.StatusCode, oe.Type, oe.Message, status)
	}
	if status == http.StatusTooManyRequests && oe.Response.Header.Get("Retry-After") != "7" {
		t.Errorf("Retry-After %q, want the backend's 7", oe.Response.Header.Get("Retry-After"))
	}
}
