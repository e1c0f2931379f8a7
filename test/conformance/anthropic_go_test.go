package conformance

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/respjson"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
)

// anthropicClient is the official Go SDK pointed at the gateway as Claude
// Code points at it: base URL without /v1, the key as x-api-key (or as a
// bearer token, as ANTHROPIC_AUTH_TOKEN does). Retries are off so an error
// surfaces at once.
func (e *env) anthropicClient(opts ...option.RequestOption) anthropic.Client {
	base := []option.RequestOption{option.WithBaseURL(e.root + "/"), option.WithAPIKey(e.key), option.WithMaxRetries(0)}
	return anthropic.NewClient(append(base, opts...)...)
}

var weatherTool = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
	Name:        "get_weather",
	Description: anthropic.String("Current weather for a city"),
	InputSchema: anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}},
		Required:   []string{"city"},
	},
}}

func anthropicParams(model, prompt string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     anthropic.Model(model),
		MaxTokens: 64,
		System:    []anthropic.TextBlockParam{{Text: "You are a terse assistant."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	}
}

func requireValid(t *testing.T, what string, fields map[string]respjson.Field) {
	t.Helper()
	for name, f := range fields {
		if !f.Valid() {
			t.Errorf("%s: field %s is missing or null (raw %q)", what, name, f.Raw())
		}
	}
}

// anthropicStream reads a stream with the SDK, checks the event grammar the
// Anthropic SDKs rely on (exactly one message_start with usage, blocks
// opened and closed in order, message_delta with stop_reason and
// output_tokens, message_stop last) and returns the SDK's accumulated
// message and the stream's error.
func anthropicStream(t *testing.T, stream *ssestream.Stream[anthropic.MessageStreamEventUnion]) (anthropic.Message, error) {
	t.Helper()
	defer stream.Close()
	var msg anthropic.Message
	starts, open, next, deltas, events, stopped := 0, -1, 0, 0, 0, false
	for stream.Next() {
		ev := stream.Current()
		events++
		if stopped {
			t.Errorf("event %s after message_stop", ev.Type)
		}
		if starts == 0 && ev.Type != "message_start" {
			t.Errorf("event %s before message_start", ev.Type)
		}
		switch ev.Type {
		case "message_start":
			starts++
			m := ev.Message
			requireValid(t, "message_start.message", map[string]respjson.Field{"id": m.JSON.ID, "type": m.JSON.Type,
				"role": m.JSON.Role, "model": m.JSON.Model, "content": m.JSON.Content, "usage": m.JSON.Usage})
			requireValid(t, "message_start.message.usage", map[string]respjson.Field{
				"input_tokens": m.Usage.JSON.InputTokens, "output_tokens": m.Usage.JSON.OutputTokens})
		case "content_block_start":
			if open >= 0 {
				t.Errorf("content_block_start %d while block %d is open", ev.Index, open)
			}
			if int(ev.Index) != next {
				t.Errorf("content_block_start index %d, want %d", ev.Index, next)
			}
			open, next = int(ev.Index), next+1
			cb := ev.ContentBlock
			switch cb.Type {
			case "text":
				requireValid(t, "text block", map[string]respjson.Field{"text": cb.JSON.Text})
			case "thinking":
				requireValid(t, "thinking block", map[string]respjson.Field{"thinking": cb.JSON.Thinking, "signature": cb.JSON.Signature})
			case "tool_use":
				requireValid(t, "tool_use block", map[string]respjson.Field{"id": cb.JSON.ID, "name": cb.JSON.Name, "input": cb.JSON.Input})
			default:
				t.Errorf("unexpected block type %q", cb.Type)
			}
		case "content_block_delta":
			deltas++
			if int(ev.Index) != open {
				t.Errorf("delta for block %d, open block is %d", ev.Index, open)
			}
		case "content_block_stop":
			if int(ev.Index) != open {
				t.Errorf("content_block_stop %d, open block is %d", ev.Index, open)
			}
			open = -1
		case "message_delta":
			if open >= 0 {
				t.Errorf("message_delta while block %d is open", open)
			}
			requireValid(t, "message_delta", map[string]respjson.Field{"delta.stop_reason": ev.Delta.JSON.StopReason,
				"usage": ev.JSON.Usage, "usage.output_tokens": ev.Usage.JSON.OutputTokens})
		case "message_stop":
			stopped = true
		}
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("the SDK's Message.Accumulate(%s) failed: %v", ev.Type, err)
		}
	}
	err := stream.Err()
	if starts != 1 && (err == nil || events > 0) {
		t.Errorf("got %d message_start events, want exactly 1", starts)
	}
	if err == nil && !stopped {
		t.Errorf("stream ended without message_stop and without an error")
	}
	if err == nil && deltas == 0 {
		t.Errorf("stream carried no content_block_delta: the answer was not streamed")
	}
	return msg, err
}

func textOfMessage(m anthropic.Message) string {
	var sb strings.Builder
	for _, b := range m.Content {
		if b.Type == "text" {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

// anthropicTurn sends params, streaming or not, and returns the message.
func anthropicTurn(t *testing.T, c anthropic.Client, params anthropic.MessageNewParams, stream bool) anthropic.Message {
	t.Helper()
	ctx := testCtx(t)
	if stream {
		msg, err := anthropicStream(t, c.Messages.NewStreaming(ctx, params))
		if err != nil {
			t.Fatalf("stream failed: %v", err)
		}
		return msg
	}
	msg, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	requireValid(t, "message", map[string]respjson.Field{"id": msg.JSON.ID, "model": msg.JSON.Model, "role": msg.JSON.Role,
		"content": msg.JSON.Content, "stop_reason": msg.JSON.StopReason, "usage": msg.JSON.Usage})
	requireValid(t, "message.usage", map[string]respjson.Field{"input_tokens": msg.Usage.JSON.InputTokens, "output_tokens": msg.Usage.JSON.OutputTokens})
	return *msg
}

func modes() []struct {
	name   string
	stream bool
} {
	return []struct {
		name   string
		stream bool
	}{{"NonStreaming", false}, {"Streaming", true}}
}

func TestAnthropicGoSDK_TextFromEveryBackend(t *testing.T) {
	e := newEnv(t)
	c := e.anthropicClient()
	for _, b := range allBackends {
		for _, m := range modes() {
			t.Run(b.prefix+"/"+m.name, func(t *testing.T) {
				msg := anthropicTurn(t, c, anthropicParams(b.model("text"), "Say hello"), m.stream)
				if msg.Role != "assistant" || msg.Type != "message" || msg.Model == "" {
					t.Errorf("role %q type %q model %q", msg.Role, msg.Type, msg.Model)
				}
				// Translated answers name the gateway's model; a passed-through
				// Anthropic answer keeps the backend's own model name.
				if b.dialect != "anthropic" && msg.Model != anthropic.Model(b.model("text")) {
					t.Errorf("model %q, want the requested %q", msg.Model, b.model("text"))
				}
				text := textOfMessage(msg)
				if !b.scripts {
					// The simulator's answer is random text of random length.
					if text == "" || msg.Usage.OutputTokens <= 0 || msg.Usage.OutputTokens > 64 || msg.Usage.InputTokens <= 0 {
						t.Fatalf("text %q usage %+v", text, msg.Usage)
					}
					if msg.StopReason != anthropic.StopReasonEndTurn && msg.StopReason != anthropic.StopReasonMaxTokens {
						t.Errorf("stop_reason %q", msg.StopReason)
					}
					if (msg.Usage.OutputTokens == 64) != (msg.StopReason == anthropic.StopReasonMaxTokens) {
						t.Errorf("stop_reason %q with %d of 64 output tokens", msg.StopReason, msg.Usage.OutputTokens)
					}
					return
				}
				if text != textAnswer || msg.StopReason != anthropic.StopReasonEndTurn {
					t.Errorf("text %q stop_reason %q, want %q end_turn", text, msg.StopReason, textAnswer)
				}
				if msg.Usage.OutputTokens != fakeCompletionTokens || msg.Usage.InputTokens != fakePromptTokens {
					t.Errorf("usage in %d out %d, want %d %d", msg.Usage.InputTokens, msg.Usage.OutputTokens, fakePromptTokens, fakeCompletionTokens)
				}
			})
		}
	}
}

func TestAnthropicGoSDK_ToolCallRoundTrip(t *testing.T) {
	e := newEnv(t)
	c := e.anthropicClient()
	for _, b := range scriptedBackends {
		for _, scenario := range toolScenarios {
			for _, m := range modes() {
				t.Run(b.prefix+"/"+scenario+"/"+m.name, func(t *testing.T) {
					params := anthropicParams(b.model(scenario), "What is the weather in Paris and Tokyo?")
					params.Tools = []anthropic.ToolUnionParam{weatherTool}
					first := anthropicTurn(t, c, params, m.stream)
					if first.StopReason != anthropic.StopReasonToolUse {
						t.Fatalf("stop_reason %q, want tool_use; content %s", first.StopReason, first.RawJSON())
					}
					var results []anthropic.ContentBlockParamUnion
					var cities []string
					for _, blk := range first.Content {
						if blk.Type != "tool_use" {
							continue
						}
						use := blk.AsToolUse()
						var input struct{ City string }
						if err := json.Unmarshal(use.Input, &input); err != nil || use.Name != "get_weather" || use.ID == "" {
							t.Fatalf("tool_use %+v input %s (%v): want get_weather with a city", use, use.Input, err)
						}
						cities = append(cities, input.City)
						results = append(results, anthropic.NewToolResultBlock(use.ID, weatherResult[input.City], false))
					}
					if want := toolCities[scenario]; strings.Join(cities, ",") != want {
						t.Fatalf("tool calls for %v, want %s", cities, want)
					}
					params.Messages = append(params.Messages, first.ToParam(), anthropic.NewUserMessage(results...))
					second := anthropicTurn(t, c, params, m.stream)
					if got := textOfMessage(second); got != toolAnswers[scenario] || second.StopReason != anthropic.StopReasonEndTurn {
						t.Errorf("second turn %q stop %q, want %q end_turn", got, second.StopReason, toolAnswers[scenario])
					}
				})
			}
		}
	}
}

func TestAnthropicGoSDK_ThinkingBlocks(t *testing.T) {
	e := newEnv(t)
	c := e.anthropicClient()
	for _, b := range scriptedBackends {
		for _, m := range modes() {
			t.Run(b.prefix+"/"+m.name, func(t *testing.T) {
				msg := anthropicTurn(t, c, anthropicParams(b.model("reason"), "Hello"), m.stream)
				if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[1].Type != "text" {
					t.Fatalf("content %s, want a thinking block then a text block", msg.RawJSON())
				}
				if msg.Content[0].Thinking != thinkingText || msg.Content[1].Text != textAnswer {
					t.Errorf("thinking %q text %q", msg.Content[0].Thinking, msg.Content[1].Text)
				}
			})
		}
	}
}

// A stream that breaks after headers must end in an error event the SDK
// turns into its typed error, never in a silently truncated message.
func TestAnthropicGoSDK_MidStreamFailuresSurfaceAsTypedErrors(t *testing.T) {
	e := newEnv(t)
	c := e.anthropicClient()
	for _, b := range scriptedBackends {
		for _, scenario := range []string{"cut", "errmid"} {
			t.Run(b.prefix+"/"+scenario, func(t *testing.T) {
				msg, err := anthropicStream(t, c.Messages.NewStreaming(testCtx(t), anthropicParams(b.model(scenario), "Hello")))
				var ae *anthropic.Error
				if !errors.As(err, &ae) {
					t.Fatalf("stream error %v (%T), want *anthropic.Error; message so far %q", err, err, textOfMessage(msg))
				}
				want := anthropic.ErrorTypeAPIError
				if b == anthropicBackend && scenario == "errmid" {
					want = anthropic.ErrorTypeOverloadedError // passed through from the backend
				}
				if ae.Type() != want || ae.Message == "" {
					t.Errorf("error type %q message %q, want %q with a message", ae.Type(), ae.Message, want)
				}
				if !strings.HasPrefix(textOfMessage(msg), "Hello from") {
					t.Errorf("the text before the failure was lost: %q", textOfMessage(msg))
				}
			})
		}
	}
}

func TestAnthropicGoSDK_ErrorsAreTypedWithStatus(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name   string
		client anthropic.Client
		model  string
		status int
		typ    anthropic.ErrorType
	}{
		{"BadAPIKey", e.anthropicClient(option.WithAPIKey("sk-lg-not-a-real-key")), "oa-text", http.StatusUnauthorized, anthropic.ErrorTypeAuthenticationError},
		{"BadAuthToken", anthropic.NewClient(option.WithBaseURL(e.root+"/"), option.WithAuthToken("sk-lg-not-a-real-key"), option.WithMaxRetries(0)),
			"an-text", http.StatusUnauthorized, anthropic.ErrorTypeAuthenticationError},
		{"UnknownModel", e.anthropicClient(), "no-such-model", http.StatusNotFound, anthropic.ErrorTypeNotFoundError},
		{"ModelNotAllowedForKey", e.anthropicClient(option.WithAPIKey(e.narrowKey)), "oa-text", http.StatusForbidden, anthropic.ErrorTypePermissionError},
		{"ChatBackendRateLimited", e.anthropicClient(), "oa-ratelimit", http.StatusTooManyRequests, anthropic.ErrorTypeRateLimitError},
		{"AnthropicBackendRateLimited", e.anthropicClient(), "an-ratelimit", http.StatusTooManyRequests, anthropic.ErrorTypeRateLimitError},
	}
	for _, tc := range cases {
		for _, m := range modes() {
			t.Run(tc.name+"/"+m.name, func(t *testing.T) {
				params := anthropicParams(tc.model, "Hello")
				var err error
				if m.stream {
					_, err = anthropicStream(t, tc.client.Messages.NewStreaming(testCtx(t), params))
				} else {
					_, err = tc.client.Messages.New(testCtx(t), params)
				}
				var ae *anthropic.Error
				if !errors.As(err, &ae) {
					t.Fatalf("error %v (%T), want *anthropic.Error", err, err)
				}
				if ae.StatusCode != tc.status || ae.Type() != tc.typ || ae.Message == "" {
					t.Errorf("status %d type %q message %q, want %d %q with a message", ae.StatusCode, ae.Type(), ae.Message, tc.status, tc.typ)
				}
				if tc.status == http.StatusTooManyRequests && ae.Response.Header.Get("Retry-After") != "7" {
					t.Errorf("Retry-After %q, want the backend's 7", ae.Response.Header.Get("Retry-After"))
				}
			})
		}
	}
}

func TestAnthropicGoSDK_CountTokens(t *testing.T) {
	e := newEnv(t)
	c := e.anthropicClient()
	for _, b := range scriptedBackends {
		t.Run(b.prefix, func(t *testing.T) {
			res, err := c.Messages.CountTokens(testCtx(t), anthropic.MessageCountTokensParams{
				Model:    anthropic.Model(b.model("text")),
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("How many tokens is this sentence?"))},
			})
			if err != nil {
				t.Fatal(err)
			}
			requireValid(t, "count_tokens", map[string]respjson.Field{"input_tokens": res.JSON.InputTokens})
			if b == anthropicBackend && res.InputTokens != fakePromptTokens {
				t.Errorf("input_tokens %d, want the backend's %d (passed through)", res.InputTokens, fakePromptTokens)
			}
			if res.InputTokens <= 0 {
				t.Errorf("input_tokens %d, want a positive estimate", res.InputTokens)
			}
		})
	}
}
