package translate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	osdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/respjson"
	ossestream "github.com/openai/openai-go/v3/packages/ssestream"
	oresp "github.com/openai/openai-go/v3/responses"

	"llmgate/internal/api/openai"
)

// These tests read the translator's output with the official openai-go SDK:
// its SSE decoder, ChatCompletionAccumulator, and the Responses stream event
// union, so a field the SDK needs that is missing fails the test.

func ofield(t *testing.T, what string, fields map[string]respjson.Field) {
	t.Helper()
	for name, f := range fields {
		if !f.Valid() {
			t.Errorf("%s: field %s is missing or null (raw %q)", what, name, f.Raw())
		}
	}
}

// sdkChatAccumulate decodes a chat stream with openai-go and accumulates it.
func sdkChatAccumulate(t *testing.T, body []byte) (osdk.ChatCompletionAccumulator, error) {
	t.Helper()
	stream := ossestream.NewStream[osdk.ChatCompletionChunk](ossestream.NewDecoder(sseResponse(body)), nil)
	defer stream.Close()
	var acc osdk.ChatCompletionAccumulator
	for stream.Next() {
		c := stream.Current()
		ofield(t, "chunk", map[string]respjson.Field{"id": c.JSON.ID, "object": c.JSON.Object, "created": c.JSON.Created,
			"model": c.JSON.Model, "choices": c.JSON.Choices})
		if !acc.AddChunk(c) {
			t.Fatalf("ChatCompletionAccumulator rejected chunk %s", c.RawJSON())
		}
	}
	return acc, stream.Err()
}

func TestAnthropicToChatStream_SDKAccumulatesTextAndUsage(t *testing.T) {
	acc, err := sdkChatAccumulate(t, translateStream(t, "stream_anthropic_to_chat", "text_include_usage.in.sse"))
	if err != nil {
		t.Fatal(err)
	}
	c := acc.Choices[0]
	if c.Message.Content != "Hello there" || c.FinishReason != "stop" {
		t.Errorf("choice = %q finish %q", c.Message.Content, c.FinishReason)
	}
	// input 25 + cache read 10 = 35 prompt tokens, 10 of them cached.
	if u := acc.Usage; u.PromptTokens != 35 || u.CompletionTokens != 6 || u.TotalTokens != 41 || u.PromptTokensDetails.CachedTokens != 10 {
		t.Errorf("usage = %+v", u)
	}
}

func TestAnthropicToChatStream_SDKAccumulatesParallelToolCalls(t *testing.T) {
	acc, err := sdkChatAccumulate(t, translateStream(t, "stream_anthropic_to_chat", "thinking_parallel_tools.in.sse"))
	if err != nil {
		t.Fatal(err)
	}
	c := acc.Choices[0]
	if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 2 {
		t.Fatalf("finish %q with %d tool calls", c.FinishReason, len(c.Message.ToolCalls))
	}
	want := [][3]string{{"toolu_a", "get_weather", `{"city": "Paris"}`}, {"toolu_b", "now", `{}`}}
	for i, w := range want {
		tc := c.Message.ToolCalls[i]
		if tc.ID != w[0] || tc.Function.Name != w[1] || tc.Function.Arguments != w[2] {
			t.Errorf("tool call %d = %s %s %s, want %v", i, tc.ID, tc.Function.Name, tc.Function.Arguments, w)
		}
	}
	if acc.Usage.TotalTokens != 0 {
		t.Errorf("usage chunk sent although the client did not ask for include_usage: %+v", acc.Usage)
	}
}

func TestAnthropicToChatStream_SDKRaisesErrorsAndCuts(t *testing.T) {
	for file, want := range map[string]string{"error_event.in.sse": "Overloaded", "cut_midway.in.sse": "ended the stream"} {
		_, err := sdkChatAccumulate(t, translateStream(t, "stream_anthropic_to_chat", file))
		var se *ossestream.StreamError
		if !errors.As(err, &se) || !strings.Contains(se.Message, want) {
			t.Errorf("%s: stream error = %v, want a StreamError containing %q", file, err, want)
		}
	}
}

func TestAnthropicToChatCompletion_SDKDecodesEveryGolden(t *testing.T) {
	wants, _ := filepath.Glob("testdata/anthropic_to_chat_response/*.want.json")
	for _, path := range wants {
		b, _ := os.ReadFile(path)
		var cc osdk.ChatCompletion
		if err := json.Unmarshal(b, &cc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ofield(t, path, map[string]respjson.Field{"id": cc.JSON.ID, "object": cc.JSON.Object, "created": cc.JSON.Created,
			"model": cc.JSON.Model, "choices": cc.JSON.Choices, "usage": cc.JSON.Usage})
		ch := cc.Choices[0]
		ofield(t, path+" choice", map[string]respjson.Field{"finish_reason": ch.JSON.FinishReason, "message": ch.JSON.Message})
		for _, tc := range ch.Message.ToolCalls {
			if !json.Valid([]byte(tc.Function.Arguments)) {
				t.Errorf("%s: arguments %q are not JSON", path, tc.Function.Arguments)
			}
		}
	}
}

// sdkResponsesEvents decodes a Responses stream with openai-go, checks that
// sequence numbers run 0, 1, 2, ... and that every delta's text reaches the
// matching done event, and returns the events.
func sdkResponsesEvents(t *testing.T, body []byte) []oresp.ResponseStreamEventUnion {
	t.Helper()
	stream := ossestream.NewStream[oresp.ResponseStreamEventUnion](ossestream.NewDecoder(sseResponse(body)), nil)
	defer stream.Close()
	var evs []oresp.ResponseStreamEventUnion
	deltas := map[string]string{}
	for stream.Next() {
		ev := stream.Current()
		if !ev.JSON.SequenceNumber.Valid() || ev.SequenceNumber != int64(len(evs)) {
			t.Errorf("event %d (%s) has sequence_number %s", len(evs), ev.Type, ev.JSON.SequenceNumber.Raw())
		}
		switch ev.Type {
		case "response.created", "response.in_progress", "response.completed", "response.incomplete", "response.failed":
			r := ev.Response
			ofield(t, ev.Type, map[string]respjson.Field{"id": r.JSON.ID, "created_at": r.JSON.CreatedAt, "model": r.JSON.Model,
				"output": r.JSON.Output, "tools": r.JSON.Tools, "tool_choice": r.JSON.ToolChoice, "parallel_tool_calls": r.JSON.ParallelToolCalls})
		case "response.output_text.delta", "response.function_call_arguments.delta", "response.reasoning_text.delta":
			deltas[ev.ItemID] += ev.Delta
		case "response.output_text.done", "response.reasoning_text.done":
			if ev.Text != deltas[ev.ItemID] {
				t.Errorf("%s text %q != accumulated deltas %q", ev.Type, ev.Text, deltas[ev.ItemID])
			}
		case "response.function_call_arguments.done":
			if ev.Arguments != deltas[ev.ItemID] {
				t.Errorf("%s arguments %q != accumulated deltas %q", ev.Type, ev.Arguments, deltas[ev.ItemID])
			}
		case "response.output_item.added", "response.output_item.done":
			ofield(t, ev.Type, map[string]respjson.Field{"item": ev.JSON.Item, "output_index": ev.JSON.OutputIndex})
		}
		evs = append(evs, ev)
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream error: %v", err)
	}
	return evs
}

func TestChatToResponsesStream_SDKReadsTextAndUsage(t *testing.T) {
	evs := sdkResponsesEvents(t, translateStream(t, "stream_chat_to_responses", "text_with_usage.in.sse"))
	last := evs[len(evs)-1]
	if last.Type != "response.completed" {
		t.Fatalf("last event %s, want response.completed", last.Type)
	}
	r := last.AsResponseCompleted().Response
	if r.OutputText() != "Hello, world" || r.Status != "completed" {
		t.Errorf("output %q status %s", r.OutputText(), r.Status)
	}
	if u := r.Usage; u.InputTokens != 50 || u.OutputTokens != 7 || u.TotalTokens != 57 || u.InputTokensDetails.CachedTokens != 32 {
		t.Errorf("usage = %+v", u)
	}
	if evs[0].Type != "response.created" || evs[1].Type != "response.in_progress" {
		t.Errorf("stream starts with %s, %s", evs[0].Type, evs[1].Type)
	}
}

func TestChatToResponsesStream_SDKReadsFunctionCalls(t *testing.T) {
	evs := sdkResponsesEvents(t, translateStream(t, "stream_chat_to_responses", "tool_calls.in.sse"))
	var done []oresp.ResponseOutputItemUnion
	for _, ev := range evs {
		if ev.Type == "response.output_item.done" && ev.Item.Type == "function_call" {
			done = append(done, ev.Item)
		}
	}
	if len(done) != 2 || done[0].CallID != "call_1" || done[0].Name != "get_weather" || done[0].Arguments.OfString != `{"city":"Paris"}` ||
		done[1].CallID != "call_2" || done[1].Arguments.OfString != `{"path":"/etc/motd"}` {
		t.Errorf("function calls = %+v", done)
	}
	final := evs[len(evs)-1].AsResponseCompleted().Response
	if len(final.Output) != 3 || final.Output[2].AsFunctionCall().Name != "read_file" {
		t.Errorf("final output = %s", final.RawJSON())
	}
}

func TestChatToResponsesStream_SDKSeesFailureWithoutRunnableCall(t *testing.T) {
	evs := sdkResponsesEvents(t, translateStream(t, "stream_chat_to_responses", "cut_midway.in.sse"))
	for _, ev := range evs {
		if ev.Type == "response.output_item.done" && ev.Item.Type == "function_call" {
			t.Errorf("a cut function call was marked done: %s", ev.RawJSON())
		}
	}
	errEv, last := evs[len(evs)-2], evs[len(evs)-1]
	if errEv.Type != "error" || !strings.Contains(errEv.AsError().Message, "ended the stream") {
		t.Errorf("second to last event = %s", errEv.RawJSON())
	}
	r := last.AsResponseFailed().Response
	if last.Type != "response.failed" || r.Status != "failed" || r.Error.Code != "server_error" {
		t.Errorf("last event = %s", last.RawJSON())
	}
}

func TestChatToResponses_SDKDecodesEveryGolden(t *testing.T) {
	wants, _ := filepath.Glob("testdata/chat_to_responses/*.want.json")
	for _, path := range wants {
		b, _ := os.ReadFile(path)
		var r oresp.Response
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ofield(t, path, map[string]respjson.Field{"id": r.JSON.ID, "created_at": r.JSON.CreatedAt, "model": r.JSON.Model,
			"output": r.JSON.Output, "usage": r.Usage.JSON.InputTokens, "status": r.JSON.Status})
		for _, it := range r.Output {
			if it.Type == "message" {
				ofield(t, path+" message", map[string]respjson.Field{"content": it.JSON.Content, "status": it.JSON.Status})
			}
		}
	}
}

func TestResponsesRequest_DecodesSDKParams(t *testing.T) {
	output := oresp.ResponseInputItemParamOfFunctionCallOutput("main.go")
	output.OfFunctionCallOutput.CallID = osdk.String("call_1")
	params := oresp.ResponseNewParams{
		Model:        "qwen3-coder",
		Instructions: osdk.String("be brief"),
		Store:        osdk.Bool(false),
		Input: oresp.ResponseNewParamsInputUnion{OfInputItemList: oresp.ResponseInputParam{
			oresp.ResponseInputItemParamOfMessage("hi", oresp.EasyInputMessageRoleUser),
			oresp.ResponseInputItemParamOfFunctionCall(`{"command":["ls"]}`, "call_1", "shell"),
			output,
		}},
		Tools: []oresp.ToolUnionParam{oresp.ToolParamOfFunction("shell", map[string]any{"type": "object"}, false)},
	}
	body, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	var req openai.ResponsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	chat, err := ResponsesToChat(&req)
	if err != nil {
		t.Fatal(err)
	}
	roles := []string{}
	for _, m := range chat.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool" || chat.Messages[2].ToolCalls[0].ID != "call_1" ||
		chat.Messages[3].Content.String() != "main.go" || len(chat.Tools) != 1 {
		t.Errorf("chat request from SDK params %s = %s", body, mustJSON(chat))
	}
}

// TestChatToResponsesStream_SDKReadsReasoningAndFunctionCalls reads a
// reasoning model's streamed answer with openai-go's Responses event types,
// then sends the output back the way Codex does (store false: the reasoning
// item with only its encrypted_content, the calls and their outputs) and
// checks that the model's reasoning reaches the next chat request.
func TestChatToResponsesStream_SDKReadsReasoningAndFunctionCalls(t *testing.T) {
	evs := sdkResponsesEvents(t, translateStream(t, "stream_chat_to_responses", "reasoning_text_parallel_tools_cached.in.sse"))
	var reasoningDeltas string
	var doneItems []oresp.ResponseOutputItemUnion
	for _, ev := range evs {
		switch ev.Type {
		case "response.reasoning_text.delta":
			reasoningDeltas += ev.Delta
			if !ev.JSON.ContentIndex.Valid() {
				t.Errorf("reasoning delta without content_index (Codex drops it): %s", ev.RawJSON())
			}
		case "response.output_item.done":
			doneItems = append(doneItems, ev.Item)
		}
	}
	if reasoningDeltas != "Need the file and the git status." {
		t.Errorf("reasoning deltas = %q", reasoningDeltas)
	}
	final := evs[len(evs)-1].AsResponseCompleted().Response
	if len(final.Output) != 4 || len(doneItems) != 4 {
		t.Fatalf("output = %s", final.RawJSON())
	}
	rs := final.Output[0].AsReasoning()
	if len(rs.Content) != 1 || rs.Content[0].Text != reasoningDeltas || rs.EncryptedContent == "" || rs.Summary == nil {
		t.Errorf("reasoning item = %s", rs.RawJSON())
	}
	if final.OutputText() != "Reading both." {
		t.Errorf("output text = %q", final.OutputText())
	}
	calls := []oresp.ResponseFunctionToolCall{final.Output[2].AsFunctionCall(), final.Output[3].AsFunctionCall()}
	if calls[0].Name != "Read" || calls[1].CallID != "chatcmpl-tool-b2" || calls[1].Arguments != `{"command": "git status"}` {
		t.Errorf("calls = %+v", calls)
	}
	if u := final.Usage; u.InputTokens != 1200 || u.InputTokensDetails.CachedTokens != 1024 || u.OutputTokens != 61 {
		t.Errorf("usage = %+v", u)
	}

	reasoning := oresp.ResponseReasoningItemParam{ID: rs.ID, Summary: []oresp.ResponseReasoningItemSummaryParam{},
		EncryptedContent: osdk.String(rs.EncryptedContent)}
	input := oresp.ResponseInputParam{
		oresp.ResponseInputItemParamOfMessage("What does main.go do?", oresp.EasyInputMessageRoleUser),
		{OfReasoning: &reasoning},
	}
	text := final.Output[1].AsMessage().ToParam()
	input = append(input, oresp.ResponseInputItemUnionParam{OfOutputMessage: &text})
	for _, c := range calls {
		p := c.ToParam()
		input = append(input, oresp.ResponseInputItemUnionParam{OfFunctionCall: &p})
	}
	for _, c := range calls {
		out := oresp.ResponseInputItemParamOfFunctionCallOutput("ok")
		out.OfFunctionCallOutput.CallID = osdk.String(c.CallID)
		input = append(input, out)
	}
	body, err := json.Marshal(oresp.ResponseNewParams{Model: "qwen3-32b", Store: osdk.Bool(false),
		Input: oresp.ResponseNewParamsInputUnion{OfInputItemList: input}})
	if err != nil {
		t.Fatal(err)
	}
	var req openai.ResponsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	chat, err := ResponsesToChat(&req)
	if err != nil {
		t.Fatal(err)
	}
	if len(chat.Messages) != 4 {
		t.Fatalf("chat messages = %s", mustJSON(chat.Messages))
	}
	a := chat.Messages[1]
	if a.ReasoningContent != reasoningDeltas || a.Content.String() != "Reading both." || len(a.ToolCalls) != 2 || a.ToolCalls[1].ID != "chatcmpl-tool-b2" {
		t.Errorf("assistant turn = %s", mustJSON(a))
	}
}
