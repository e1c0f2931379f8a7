package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	asdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/respjson"
	assestream "github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/apierror"
)

// These tests read the translator's output with the official
// anthropic-sdk-go: its SSE decoder, its stream event types and its
// Message.Accumulate. A field the SDK needs (message_start usage, block
// fields, message_delta usage) that is missing or null fails the test.

// sseResponse wraps an SSE body the way the SDK receives it from HTTP.
func sseResponse(body []byte) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(body)), Request: httptest.NewRequest("POST", "http://gateway/v1/messages", nil)}
}

// requireFields fails when any named field is absent or null in the SDK's
// view of the JSON.
func requireFields(t *testing.T, what string, fields map[string]respjson.Field) {
	t.Helper()
	for name, f := range fields {
		if !f.Valid() {
			t.Errorf("%s: field %s is missing or null (raw %q)", what, name, f.Raw())
		}
	}
}

// sdkAccumulate decodes an Anthropic stream with the SDK, checks the event
// grammar the SDKs rely on, and returns the accumulated message and the
// stream's error.
func sdkAccumulate(t *testing.T, body []byte) (asdk.Message, error) {
	t.Helper()
	stream := assestream.NewStream[asdk.MessageStreamEventUnion](assestream.NewDecoder(sseResponse(body)), nil)
	defer stream.Close()
	var msg asdk.Message
	starts, open, next, stopped := 0, -1, 0, false
	var openType string
	for stream.Next() {
		ev := stream.Current()
		if stopped {
			t.Errorf("event %s after message_stop", ev.Type)
		}
		if ev.Type != "message_start" && starts == 0 {
			t.Errorf("event %s before message_start", ev.Type)
		}
		switch ev.Type {
		case "message_start":
			starts++
			m := ev.Message
			requireFields(t, "message_start.message", map[string]respjson.Field{"id": m.JSON.ID, "type": m.JSON.Type,
				"role": m.JSON.Role, "model": m.JSON.Model, "content": m.JSON.Content, "usage": m.JSON.Usage})
			requireFields(t, "message_start.message.usage", map[string]respjson.Field{
				"input_tokens": m.Usage.JSON.InputTokens, "output_tokens": m.Usage.JSON.OutputTokens})
		case "content_block_start":
			if open >= 0 {
				t.Errorf("content_block_start %d while block %d is open", ev.Index, open)
			}
			if int(ev.Index) != next {
				t.Errorf("content_block_start index %d, want %d", ev.Index, next)
			}
			open, next, openType = int(ev.Index), next+1, ev.ContentBlock.Type
			cb := ev.ContentBlock
			switch cb.Type {
			case "text":
				requireFields(t, "text block", map[string]respjson.Field{"text": cb.JSON.Text})
			case "thinking":
				requireFields(t, "thinking block", map[string]respjson.Field{"thinking": cb.JSON.Thinking, "signature": cb.JSON.Signature})
			case "tool_use":
				requireFields(t, "tool_use block", map[string]respjson.Field{"id": cb.JSON.ID, "name": cb.JSON.Name, "input": cb.JSON.Input})
			default:
				t.Errorf("unexpected block type %q", cb.Type)
			}
		case "content_block_delta":
			if int(ev.Index) != open {
				t.Errorf("delta for block %d, open block is %d", ev.Index, open)
			}
			want := map[string]string{"text": "text_delta", "thinking": "thinking_delta", "tool_use": "input_json_delta"}[openType]
			if ev.Delta.Type != want && ev.Delta.Type != "signature_delta" {
				t.Errorf("%s in a %s block", ev.Delta.Type, openType)
			}
		case "content_block_stop":
			if int(ev.Index) != open {
				t.Errorf("stop for block %d, open block is %d", ev.Index, open)
			}
			open = -1
		case "message_delta":
			if open >= 0 {
				t.Errorf("message_delta while block %d is open", open)
			}
			requireFields(t, "message_delta", map[string]respjson.Field{"delta.stop_reason": ev.Delta.JSON.StopReason,
				"usage": ev.JSON.Usage, "usage.output_tokens": ev.Usage.JSON.OutputTokens})
		case "message_stop":
			stopped = true
		}
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("Accumulate(%s): %v", ev.Type, err)
		}
	}
	if starts != 1 {
		t.Errorf("got %d message_start events, want exactly 1", starts)
	}
	if stream.Err() == nil && !stopped {
		t.Errorf("stream ended without message_stop and without an error")
	}
	return msg, stream.Err()
}

func TestChatToAnthropicStream_SDKAccumulatesTextAndUsage(t *testing.T) {
	msg, err := sdkAccumulate(t, translateStream(t, "stream_chat_to_anthropic", "text_with_usage.in.sse"))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != "Hello, world" {
		t.Fatalf("content = %+v, want one text block \"Hello, world\"", msg.Content)
	}
	if msg.StopReason != asdk.StopReasonEndTurn {
		t.Errorf("stop_reason = %q", msg.StopReason)
	}
	// prompt 50 with 32 cached -> 18 uncached input + 32 cache reads.
	if u := msg.Usage; u.InputTokens != 18 || u.CacheReadInputTokens != 32 || u.OutputTokens != 7 {
		t.Errorf("usage = in %d cacheRead %d out %d, want 18/32/7", u.InputTokens, u.CacheReadInputTokens, u.OutputTokens)
	}
}

func TestChatToAnthropicStream_SDKAccumulatesParallelToolCalls(t *testing.T) {
	msg, err := sdkAccumulate(t, translateStream(t, "stream_chat_to_anthropic", "parallel_tools.in.sse"))
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != asdk.StopReasonToolUse || len(msg.Content) != 3 {
		t.Fatalf("stop_reason %q with %d blocks, want tool_use with 3", msg.StopReason, len(msg.Content))
	}
	want := []struct{ id, name, input string }{{"call_1", "get_weather", `{"city":"Paris"}`}, {"call_2", "read_file", `{"path":"/etc/motd"}`}}
	for i, w := range want {
		b := msg.Content[i+1].AsToolUse()
		if b.ID != w.id || b.Name != w.name || string(b.Input) != w.input {
			t.Errorf("tool_use %d = %s %s %s, want %s %s %s", i, b.ID, b.Name, b.Input, w.id, w.name, w.input)
		}
	}
	// Round trip: the SDK turns the message into the next request's
	// assistant turn, the client adds tool results (one failed), and the
	// request translates back into chat tool messages for the backend.
	params := asdk.MessageNewParams{Model: "qwen3-8b", MaxTokens: 100, Messages: []asdk.MessageParam{
		asdk.NewUserMessage(asdk.NewTextBlock("Weather in Paris and read /etc/motd")),
		msg.ToParam(),
		asdk.NewUserMessage(asdk.NewToolResultBlock("call_1", "18C", false), asdk.NewToolResultBlock("call_2", "permission denied", true)),
	}}
	body, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	var req anthropic.MessagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("decode SDK request %s: %v", body, err)
	}
	chat, err := AnthropicToChat(&req)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(chat.Messages); n != 4 {
		t.Fatalf("got %d chat messages, want user, assistant, tool, tool: %s", n, mustJSON(chat.Messages))
	}
	a := chat.Messages[1]
	if a.Content.String() != "Checking." || len(a.ToolCalls) != 2 || a.ToolCalls[1].Function.Arguments != `{"path":"/etc/motd"}` {
		t.Errorf("assistant turn = %s", mustJSON(a))
	}
	if r := chat.Messages[3]; r.Role != "tool" || r.ToolCallID != "call_2" || r.Content.String() != "Error: permission denied" {
		t.Errorf("error result = %s", mustJSON(r))
	}
}

func TestChatToAnthropicStream_SDKKeepsEstimateWhenUsageAbsent(t *testing.T) {
	msg, err := sdkAccumulate(t, translateStream(t, "stream_chat_to_anthropic", "thinking_no_usage.in.sse"))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != "17*23: 17*20=340, plus 51 = 391." {
		t.Errorf("thinking block = %+v", msg.Content[0])
	}
	if msg.Content[1].Text != "391" {
		t.Errorf("text block = %+v", msg.Content[1])
	}
	if msg.Usage.InputTokens != 42 || msg.Usage.OutputTokens <= 0 {
		t.Errorf("usage = %+v, want the input estimate 42 and a positive output estimate", msg.Usage)
	}
}

func TestChatToAnthropicStream_SDKSeesStopSequence(t *testing.T) {
	msg, err := sdkAccumulate(t, translateStream(t, "stream_chat_to_anthropic", "stop_sequence.in.sse"))
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != asdk.StopReasonStopSequence || msg.StopSequence != "three" {
		t.Errorf("stop = %q %q, want stop_sequence \"three\"", msg.StopReason, msg.StopSequence)
	}
}

func TestChatToAnthropicStream_SDKRaisesTypedErrorForCutAndUpstreamErrors(t *testing.T) {
	for _, tc := range []struct{ file, errType, msgPart, text string }{
		{"cut_midway.in.sse", "api_error", "ended the stream", "Let me look."},
		{"upstream_error.in.sse", "invalid_request_error", "maximum context length", "Partial"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			msg, err := sdkAccumulate(t, translateStream(t, "stream_chat_to_anthropic", tc.file))
			var apiErr *asdk.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("stream error = %T %v, want *anthropic.Error", err, err)
			}
			if string(apiErr.Type()) != tc.errType || !strings.Contains(apiErr.Message, tc.msgPart) {
				t.Errorf("error = %s %q, want %s containing %q", apiErr.Type(), apiErr.Message, tc.errType, tc.msgPart)
			}
			if len(msg.Content) == 0 || msg.Content[0].Text != tc.text {
				t.Errorf("partial content = %+v, want text %q", msg.Content, tc.text)
			}
		})
	}
}

func TestChatToAnthropic_SDKDecodesEveryGoldenMessage(t *testing.T) {
	wants, _ := filepath.Glob("testdata/chat_to_anthropic/*.want.json")
	for _, path := range wants {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m asdk.Message
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		requireFields(t, path, map[string]respjson.Field{"id": m.JSON.ID, "type": m.JSON.Type, "role": m.JSON.Role,
			"model": m.JSON.Model, "content": m.JSON.Content, "stop_reason": m.JSON.StopReason, "usage": m.JSON.Usage,
			"usage.input_tokens": m.Usage.JSON.InputTokens, "usage.output_tokens": m.Usage.JSON.OutputTokens})
		for i, c := range m.Content {
			if c.Type == "tool_use" && !json.Valid(c.Input) {
				t.Errorf("%s: block %d input is not JSON", path, i)
			}
		}
	}
}

func TestAnthropicErrorEnvelope_SDKReadsTypeAndMessage(t *testing.T) {
	for _, tc := range []struct {
		err  *apierror.Error
		want string
	}{
		{apierror.InvalidRequest("bad", "max_tokens is required"), "invalid_request_error"},
		{apierror.New(401, apierror.KindAuthentication, "bad_key", "invalid API key"), "authentication_error"},
		{apierror.New(403, apierror.KindPermission, "scope", "key may not use this model"), "permission_error"},
		{apierror.New(404, apierror.KindNotFound, "model_not_found", "unknown model"), "not_found_error"},
		{apierror.New(413, apierror.KindInvalidRequest, "too_large", "body too large"), "request_too_large"},
		{apierror.New(429, apierror.KindRateLimit, "rpm", "slow down"), "rate_limit_error"},
		{apierror.New(502, apierror.KindUpstream, "upstream", "backend failed"), "api_error"},
		{apierror.New(504, apierror.KindTimeout, "timeout", "backend timed out"), "timeout_error"},
		{apierror.New(529, apierror.KindOverloaded, "busy", "all backends busy"), "overloaded_error"},
	} {
		rec := httptest.NewRecorder()
		anthropic.WriteError(rec, tc.err)
		if rec.Code != tc.err.Status || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: status %d content-type %q", tc.want, rec.Code, rec.Header().Get("Content-Type"))
		}
		var sdkErr asdk.Error
		if err := sdkErr.UnmarshalJSON(rec.Body.Bytes()); err != nil {
			t.Fatal(err)
		}
		if string(sdkErr.Type()) != tc.want || sdkErr.Message != tc.err.Message {
			t.Errorf("SDK read %s %q from %s, want %s %q", sdkErr.Type(), sdkErr.Message, rec.Body, tc.want, tc.err.Message)
		}
	}
}

// TestChatToAnthropicStream_SDKAccumulatesThinkingTextAndTools reads a
// reasoning model's streamed answer (newer vLLM's "reasoning" deltas, text,
// two tool calls, usage with cached tokens) with anthropic-sdk-go, then
// sends the accumulated message back the way Claude Code does, with tool
// results, and checks the next chat request.
func TestChatToAnthropicStream_SDKAccumulatesThinkingTextAndTools(t *testing.T) {
	msg, err := sdkAccumulate(t, translateStream(t, "stream_chat_to_anthropic", "reasoning_text_parallel_tools_cached.in.sse"))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 4 || msg.StopReason != asdk.StopReasonToolUse {
		t.Fatalf("stop %q, content %s", msg.StopReason, msg.RawJSON())
	}
	th := msg.Content[0].AsThinking()
	if th.Thinking != "Need the file and the git status." || th.Signature != "" {
		t.Errorf("thinking block = %+v", th)
	}
	if msg.Content[1].AsText().Text != "Reading both." {
		t.Errorf("text block = %+v", msg.Content[1])
	}
	if a, b := msg.Content[2].AsToolUse(), msg.Content[3].AsToolUse(); a.Name != "Read" || string(a.Input) != `{"file_path": "/repo/main.go"}` ||
		b.ID != "chatcmpl-tool-b2" || string(b.Input) != `{"command": "git status"}` {
		t.Errorf("tool_use blocks = %s / %s", a.RawJSON(), b.RawJSON())
	}
	// prompt 1200 of which 1024 cached: Anthropic counts them apart.
	if u := msg.Usage; u.InputTokens != 176 || u.CacheReadInputTokens != 1024 || u.OutputTokens != 61 {
		t.Errorf("usage = in %d cacheRead %d out %d, want 176/1024/61", u.InputTokens, u.CacheReadInputTokens, u.OutputTokens)
	}

	params := asdk.MessageNewParams{Model: "qwen3-32b", MaxTokens: 32000, Messages: []asdk.MessageParam{
		asdk.NewUserMessage(asdk.NewTextBlock("What does main.go do?")),
		msg.ToParam(),
		asdk.NewUserMessage(asdk.NewToolResultBlock("chatcmpl-tool-a1", "package main", false),
			asdk.NewToolResultBlock("chatcmpl-tool-b2", "not a git repository", true)),
	}}
	body, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	req := decodeMessagesRequest(t, string(body))
	chat, err := AnthropicToChat(req)
	if err != nil {
		t.Fatal(err)
	}
	a := chat.Messages[1]
	if a.ReasoningContent != "Need the file and the git status." || a.Content.String() != "Reading both." || len(a.ToolCalls) != 2 {
		t.Errorf("assistant turn = %s", mustJSON(a))
	}
	if r := chat.Messages[3]; r.Role != "tool" || r.ToolCallID != "chatcmpl-tool-b2" || r.Content.String() != "Error: not a git repository" {
		t.Errorf("second tool result = %s", mustJSON(r))
	}
	// The same history sent to an anthropic backend loses the unsigned
	// thinking block, which Anthropic would reject.
	if !DropUnsignedThinking(req) || len(req.Messages[1].Content.Blocks) != 3 {
		t.Errorf("unsigned thinking kept: %s", mustJSON(req.Messages[1]))
	}
}
