package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/dialect"
	"llmgate/internal/sse"
)

// chunkJSON builds one upstream chat chunk payload.
func chunkJSON(delta string, finish string) []byte {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return []byte(`{"id":"chatcmpl-u","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`)
}

func eventNames(evs []Event) string {
	names := make([]string, len(evs))
	for i, e := range evs {
		names[i] = e.Name
	}
	return strings.Join(names, ",")
}

func TestAnthropicToChat_RejectsInvalidInputWithParam(t *testing.T) {
	for _, tc := range []struct{ name, body, param string }{
		{"no messages", `{"model":"m","max_tokens":5,"messages":[]}`, "messages"},
		{"unknown role in messages", `{"model":"m","max_tokens":5,"messages":[{"role":"tool","content":"x"}]}`, "messages[0].role"},
		{"non-text block in a system message", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"},{"role":"system","content":[{"type":"image","source":{"type":"url","url":"u"}}]}]}`, "messages[1].content[0].type"},
		{"output format without schema", `{"model":"m","max_tokens":5,"output_config":{"format":{"type":"json_schema"}},"messages":[{"role":"user","content":"x"}]}`, "output_config.format"},
		{"tool choice without name", `{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.name"},
		{"unknown tool choice", `{"model":"m","max_tokens":5,"tool_choice":{"type":"maybe"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.type"},
		{"tool_use without id", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]}`, "messages[0].content[0]"},
		{"tool_result without id", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, "messages[0].content[0].tool_use_id"},
		{"pdf document", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBER"}}]}]}`, "messages[0].content[0].source"},
		{"non-text system block", `{"model":"m","max_tokens":5,"system":[{"type":"image"}],"messages":[{"role":"user","content":"x"}]}`, "system[0].type"},
		{"base64 image without data", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png"}}]}]}`, "messages[0].content[0].source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req anthropic.MessagesRequest
			if err := json.Unmarshal([]byte(tc.body), &req); err != nil {
				t.Fatal(err)
			}
			_, err := AnthropicToChat(&req)
			var e *apierror.Error
			if !errors.As(err, &e) || e.Status != 400 || e.Param != tc.param || e.Message == "" {
				t.Fatalf("err = %#v, want a 400 for param %s", err, tc.param)
			}
		})
	}
}

func TestAnthropicToChat_TextDocumentBecomesTextWithTitle(t *testing.T) {
	var req anthropic.MessagesRequest
	_ = json.Unmarshal([]byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","title":"notes.txt","source":{"type":"text","media_type":"text/plain","data":"buy milk"}},{"type":"text","text":"summarise"}]}]}`), &req)
	out, err := AnthropicToChat(&req)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Messages[0].Content.String(); got != "notes.txt\n\nbuy milk\n\nsummarise" {
		t.Errorf("content = %q", got)
	}
}

func TestChatToAnthropicStream_FinishIsIdempotentAndFeedAfterFinishIsIgnored(t *testing.T) {
	tr := NewChatToAnthropicStream("m", 3)
	if _, err := tr.Feed(chunkJSON(`{"content":"hi"}`, "stop")); err != nil {
		t.Fatal(err)
	}
	first := tr.Finish(nil)
	if got := eventNames(first); got != "content_block_stop,message_delta,message_stop" {
		t.Fatalf("Finish events = %s", got)
	}
	if evs := tr.Finish(io.ErrUnexpectedEOF); evs != nil {
		t.Errorf("second Finish returned %s", eventNames(evs))
	}
	if evs, err := tr.Feed(chunkJSON(`{"content":"late"}`, "")); evs != nil || err != nil {
		t.Errorf("Feed after Finish = %v, %v", evs, err)
	}
}

func TestChatToAnthropicStream_EmptyUpstreamStillGivesACompleteMessage(t *testing.T) {
	tr := NewChatToAnthropicStream("m", 7)
	evs := tr.Finish(nil)
	if got := eventNames(evs); got != "message_start,ping,message_delta,message_stop" {
		t.Fatalf("events = %s", got)
	}
	var start anthropic.MessageStartEvent
	_ = json.Unmarshal(evs[0].Data, &start)
	if !strings.HasPrefix(start.Message.ID, "msg_") || start.Message.Usage.InputTokens != 7 {
		t.Errorf("message_start = %s", evs[0].Data)
	}
	if _, _, _, ok := tr.Usage(); ok {
		t.Error("Usage reported ok without upstream usage")
	}
}

func TestChatToAnthropicStream_ErrorBeforeAnyChunkStillStartsTheMessage(t *testing.T) {
	tr := NewChatToAnthropicStream("m", 1)
	evs := tr.Finish(apierror.New(504, apierror.KindTimeout, "timeout", "the backend did not answer within 60s"))
	if got := eventNames(evs); got != "message_start,ping,error" {
		t.Fatalf("events = %s", got)
	}
	if !strings.Contains(string(evs[2].Data), `"type":"timeout_error"`) {
		t.Errorf("error event = %s", evs[2].Data)
	}
}

func TestChatToAnthropicStream_ToolNameArrivingLateKeepsBufferedArguments(t *testing.T) {
	tr := NewChatToAnthropicStream("m", 1)
	var all []Event
	for _, d := range []string{
		`{"tool_calls":[{"index":0,"id":"call_z","function":{"arguments":"{\"a\":"}}]}`,
		`{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"1}"}}]}`,
	} {
		evs, err := tr.Feed(chunkJSON(d, ""))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
	}
	all = append(all, tr.Finish(nil)...)
	msg, err := sdkAccumulate(t, renderEvents(all))
	if err != nil {
		t.Fatal(err)
	}
	b := msg.Content[0].AsToolUse()
	if b.ID != "call_z" || b.Name != "f" || string(b.Input) != `{"a":1}` {
		t.Errorf("tool_use = %s %s %s", b.ID, b.Name, b.Input)
	}
	if msg.StopReason != "tool_use" {
		t.Errorf("stop_reason = %q, want tool_use although the upstream sent no finish_reason", msg.StopReason)
	}
}

func TestChatToAnthropicStream_InterleavedParallelCallsAreBufferedNotCorrupted(t *testing.T) {
	tr := NewChatToAnthropicStream("m", 1)
	var all []Event
	for _, d := range []string{
		`{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":"}}]}`,
		`{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{\"y\""}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}`,
		`{"tool_calls":[{"index":1,"function":{"arguments":":2}"}}]}`,
		`{"tool_calls":[{"index":2,"id":"c","function":{"name":"h","arguments":"{}"}}]}`,
	} {
		evs, err := tr.Feed(chunkJSON(d, ""))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
	}
	all = append(all, tr.Finish(nil)...)
	msg, err := sdkAccumulate(t, renderEvents(all))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ id, name, input string }{{"a", "f", `{"x":1}`}, {"b", "g", `{"y":2}`}, {"c", "h", `{}`}}
	if len(msg.Content) != len(want) {
		t.Fatalf("content = %s", msg.RawJSON())
	}
	for i, w := range want {
		b := msg.Content[i].AsToolUse()
		if b.ID != w.id || b.Name != w.name || string(b.Input) != w.input {
			t.Errorf("block %d = %s %s %s, want %v", i, b.ID, b.Name, b.Input, w)
		}
	}
}

func TestChatToAnthropicStream_ArgumentsAfterACompleteCallEndWithError(t *testing.T) {
	tr := NewChatToAnthropicStream("m", 1)
	_, _ = tr.Feed(chunkJSON(`{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}`, ""))
	_, _ = tr.Feed(chunkJSON(`{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]}`, ""))
	if _, err := tr.Feed(chunkJSON(`{"tool_calls":[{"index":0,"function":{"arguments":" "}}]}`, "")); err != nil {
		t.Fatalf("whitespace after a complete call: %v", err)
	}
	_, err := tr.Feed(chunkJSON(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"late\":1}"}}]}`, ""))
	if err == nil || !strings.Contains(err.Error(), "after they were complete") {
		t.Fatalf("err = %v, want an error for arguments after the call was complete", err)
	}
	evs := tr.Finish(err)
	if evs[len(evs)-1].Name != "error" {
		t.Errorf("last event = %s", evs[len(evs)-1].Name)
	}
}

func TestChatToAnthropicStream_UsageReportsUpstreamCounts(t *testing.T) {
	tr := NewChatToAnthropicStream("m", 1)
	_, _ = tr.Feed([]byte(`{"id":"x","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":4}}}`))
	p, c, cached, ok := tr.Usage()
	if p != 10 || c != 3 || cached != 4 || !ok {
		t.Errorf("Usage() = %d %d %d %v", p, c, cached, ok)
	}
}

func TestChatToAnthropicStream_InvalidChunkIsAnUpstreamError(t *testing.T) {
	tr := NewChatToAnthropicStream("m", 1)
	_, err := tr.Feed([]byte(`{not json`))
	var e *apierror.Error
	if !errors.As(err, &e) || e.Status != 502 {
		t.Fatalf("err = %v, want a 502", err)
	}
}

func TestAnthropicToChatStream_UsageSumsCacheIntoPrompt(t *testing.T) {
	tr := NewAnthropicToChatStream("m", true)
	_, _ = tr.Feed("message_start", []byte(`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":5,"output_tokens":1,"cache_read_input_tokens":20,"cache_creation_input_tokens":3}}}`))
	_, _ = tr.Feed("message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":9}}`))
	evs, _ := tr.Feed("message_stop", []byte(`{"type":"message_stop"}`))
	p, c, cached, ok := tr.Usage()
	if p != 28 || c != 9 || cached != 20 || !ok {
		t.Errorf("Usage() = %d %d %d %v, want 28 9 20", p, c, cached, ok)
	}
	if len(evs) != 2 || !strings.Contains(string(evs[0].Data), `"finish_reason":"length"`) || !strings.Contains(string(evs[1].Data), `"prompt_tokens":28`) {
		t.Errorf("final chunks = %s / %s", evs[0].Data, evs[1].Data)
	}
	if done := tr.Finish(nil); len(done) != 1 || string(done[0].Data) != "[DONE]" {
		t.Errorf("Finish = %v", done)
	}
}

func TestChatToAnthropicRequest_MergesToolResultsBeforeUserText(t *testing.T) {
	var req openai.ChatCompletionRequest
	_ = json.Unmarshal([]byte(`{"model":"c","messages":[{"role":"user","content":"go"},
	 {"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},
	 {"role":"user","content":"also this"},{"role":"tool","tool_call_id":"a","content":"done"}]}`), &req)
	out, err := ChatToAnthropicRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	last := out.Messages[len(out.Messages)-1]
	if len(out.Messages) != 3 || last.Content.Blocks[0].Type != "tool_result" || last.Content.Blocks[1].Text != "also this" {
		t.Errorf("messages = %s", mustJSON(out.Messages))
	}
	if out.MaxTokens != DefaultAnthropicMaxTokens {
		t.Errorf("max_tokens = %d", out.MaxTokens)
	}
}

// Turns merge across the messages that fill them: every tool result of a
// user turn first, in order, then its other blocks in order; a system
// message (hoisted) or a message with nothing to send (empty text) does
// not end a turn.
func TestChatToAnthropicRequest_TurnsKeepOrderAcrossAlternatingMessages(t *testing.T) {
	var req openai.ChatCompletionRequest
	if err := json.Unmarshal([]byte(`{"model":"c","messages":[{"role":"user","content":"go"},
	 {"role":"assistant","content":"calling","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"f","arguments":"{}"}}]},
	 {"role":"tool","tool_call_id":"a","content":"ra"},{"role":"user","content":"u1"},{"role":"system","content":"be brief"},
	 {"role":"tool","tool_call_id":"b","content":"rb"},{"role":"user","content":[{"type":"text","text":"u2"},{"type":"text","text":""}]},
	 {"role":"assistant","content":"x"},{"role":"user","content":""},{"role":"assistant","content":"y"}]}`), &req); err != nil {
		t.Fatal(err)
	}
	out, err := ChatToAnthropicRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range out.Messages {
		var blocks []string
		for _, b := range m.Content.Blocks {
			switch b.Type {
			case "tool_result":
				blocks = append(blocks, "result:"+*b.Content.Text)
			case "tool_use":
				blocks = append(blocks, "use:"+b.ID)
			default:
				blocks = append(blocks, b.Text)
			}
		}
		got = append(got, m.Role+"["+strings.Join(blocks, " ")+"]")
	}
	want := []string{"user[go]", "assistant[calling use:a use:b]", "user[result:ra result:rb u1 u2]", "assistant[x y]"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("turns:\n got %v\nwant %v", got, want)
	}
	if out.System.Text == nil || *out.System.Text != "be brief" {
		t.Errorf("system = %s", mustJSON(out.System))
	}
}

// A message that adds no block (an empty assistant message) does not end
// the turn before it, so the turn may get more than open sized it for:
// here a tool result after it, in a user turn sized for its one text. (It
// indexed past the turn's array and panicked.)
func TestChatToAnthropicRequest_ATurnOutgrowingItsSizeKeepsItsOrder(t *testing.T) {
	for _, msgs := range []string{
		`{"role":"user","content":"a"},{"role":"assistant","content":""},{"role":"tool","tool_call_id":"x","content":"r"}`,
		`{"role":"tool","tool_call_id":"x","content":"r"},{"role":"assistant","content":""},{"role":"user","content":"a"},{"role":"tool","tool_call_id":"y","content":"s"}`,
		`{"role":"user","content":"a"},{"role":"assistant","content":""},{"role":"user","content":[{"type":"text","text":"b"},{"type":"text","text":"c"}]}`,
	} {
		var req openai.ChatCompletionRequest
		if err := json.Unmarshal([]byte(`{"model":"c","messages":[`+msgs+`]}`), &req); err != nil {
			t.Fatal(err)
		}
		out, err := ChatToAnthropicRequest(&req)
		if err != nil {
			t.Fatalf("%s: %v", msgs, err)
		}
		if len(out.Messages) != 1 || out.Messages[0].Role != "user" {
			t.Fatalf("%s: messages %s, want one user turn", msgs, mustJSON(out.Messages))
		}
		blocks := out.Messages[0].Content.Blocks
		seenText := false
		for _, b := range blocks {
			if b.Type == "tool_result" && seenText {
				t.Fatalf("%s: a tool result after the turn's text: %s", msgs, mustJSON(blocks))
			}
			seenText = seenText || b.Type == "text"
		}
	}
}

func TestChatToAnthropicRequest_RejectsBadImageURLs(t *testing.T) {
	for _, u := range []string{"data:image/png,notbase64", "ftp://x/y.png", "data:;base64,AAAA"} {
		req := openai.ChatCompletionRequest{Model: "c", Messages: []openai.ChatMessage{{Role: "user",
			Content: openai.Content{Parts: []openai.ContentPart{{Type: "image_url", ImageURL: &openai.ImageURL{URL: u}}}}}}}
		if _, err := ChatToAnthropicRequest(&req); err == nil || !strings.Contains(err.Error(), "image") {
			t.Errorf("%s: err = %v", u, err)
		}
	}
}

func TestResponsesToChat_ToolChoiceAndStatelessErrors(t *testing.T) {
	var req openai.ResponsesRequest
	_ = json.Unmarshal([]byte(`{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"}}`), &req)
	out, err := ResponsesToChat(&req)
	if err != nil {
		t.Fatal(err)
	}
	if string(out.ToolChoice) != `{"function":{"name":"f"},"type":"function"}` {
		t.Errorf("tool_choice = %s", out.ToolChoice)
	}
	req.Conversation = json.RawMessage(`"conv_1"`)
	if _, err := ResponsesToChat(&req); err == nil || !strings.Contains(err.Error(), "store to false") {
		t.Errorf("conversation err = %v", err)
	}
}

func TestChatToResponsesStream_ErrorBeforeAnyChunkIsACompleteFailedStream(t *testing.T) {
	tr := NewChatToResponsesStream(&openai.ResponsesRequest{Model: "m"})
	evs := tr.Finish(apierror.New(429, apierror.KindRateLimit, "rpm", "rate limit reached; retry in 2s"))
	if got := eventNames(evs); got != "response.created,response.in_progress,error,response.failed" {
		t.Fatalf("events = %s", got)
	}
	got := sdkResponsesEvents(t, renderEvents(evs))
	if r := got[3].AsResponseFailed().Response; r.Error.Code != "rate_limit_exceeded" {
		t.Errorf("failed response error = %s", r.Error.RawJSON())
	}
}

func TestEstimateAnthropicInputTokens(t *testing.T) {
	text := func(s string) anthropic.MessagesRequest {
		return anthropic.MessagesRequest{Messages: []anthropic.MessageParam{{Role: "user", Content: anthropic.TextContent(s)}}}
	}
	img := anthropic.MessagesRequest{Messages: []anthropic.MessageParam{{Role: "user", Content: anthropic.Content{
		Blocks: []anthropic.ContentBlock{{Type: "image", Source: &anthropic.ImageSource{Type: "url", URL: "u"}}}}}}}
	tools := text("")
	tools.Tools = []anthropic.Tool{{Name: "read_file", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	for _, tc := range []struct {
		name string
		req  anthropic.MessagesRequest
		want int
	}{
		{"empty request is at least one token", anthropic.MessagesRequest{}, 1},
		{"400 ASCII bytes are 100 tokens plus framing", text(strings.Repeat("abcd", 100)), 104},
		{"CJK counts one token per character", text("你好世界"), 8},
		{"an image is 1600 tokens", img, 1604},
		{"tools add the preamble and their definitions", tools, 4 + 350 + 8 + 3 + 5},
	} {
		if got := EstimateAnthropicInputTokens(&tc.req); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestContentBlock_MarshalWritesRequiredEmptyFields(t *testing.T) {
	for _, tc := range []struct {
		b    anthropic.ContentBlock
		want string
	}{
		{anthropic.ContentBlock{Type: "text"}, `{"type":"text","text":""}`},
		{anthropic.ContentBlock{Type: "thinking"}, `{"type":"thinking","thinking":"","signature":""}`},
		{anthropic.ContentBlock{Type: "tool_use", ID: "t", Name: "f"}, `{"type":"tool_use","id":"t","name":"f","input":{}}`},
		{anthropic.ContentBlock{Type: "tool_result", ToolUseID: "t", Content: ptr(anthropic.TextContent("ok")), IsError: true},
			`{"type":"tool_result","tool_use_id":"t","content":"ok","is_error":true}`},
	} {
		if got := string(mustJSON(tc.b)); got != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
}

func renderEvents(evs []Event) []byte {
	var b strings.Builder
	for _, e := range evs {
		if e.Name != "" {
			b.WriteString("event: " + e.Name + "\n")
		}
		b.WriteString("data: " + string(e.Data) + "\n\n")
	}
	return []byte(b.String())
}

func TestUpstreamError_MapsEnvelopesAndStatuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   int
		kind   apierror.Kind
		msg    string
	}{
		{"openai envelope 400", 400, `{"error":{"message":"max_tokens too large","type":"invalid_request_error"}}`, 400, apierror.KindInvalidRequest, "max_tokens too large"},
		{"anthropic envelope 429", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, 429, apierror.KindRateLimit, "slow down"},
		{"anthropic overloaded", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529, apierror.KindOverloaded, "Overloaded"},
		{"vllm top-level message", 404, `{"object":"error","message":"The model x does not exist.","type":"NotFoundError","code":404}`, 404, apierror.KindNotFound, "does not exist"},
		{"plain text 500", 500, "Internal Server Error", 502, apierror.KindUpstream, "Internal Server Error"},
		{"backend key rejected", 401, `{"error":{"message":"bad key"}}`, 502, apierror.KindUpstream, "operator must fix"},
		{"timeout", 504, ``, 504, apierror.KindTimeout, "Gateway Timeout"},
	} {
		e := UpstreamError(tc.status, []byte(tc.body))
		if e.Status != tc.want || e.Kind != tc.kind || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: got %d %s %q", tc.name, e.Status, e.Kind, e.Message)
		}
	}
}

func decodeMessagesRequest(tb testing.TB, body string) *anthropic.MessagesRequest {
	tb.Helper()
	var req anthropic.MessagesRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		tb.Fatal(err)
	}
	return &req
}

// TestStreams_ComposeAnthropicUpstreamToResponsesClient chains the
// translators the way the gateway serves a Responses client from an
// anthropic backend: Anthropic events -> chat chunks -> Responses events.
func TestStreams_ComposeAnthropicUpstreamToResponsesClient(t *testing.T) {
	in, err := os.ReadFile("testdata/stream_anthropic_to_chat/thinking_parallel_tools.in.sse")
	if err != nil {
		t.Fatal(err)
	}
	a2c := NewAnthropicToChatStream("m", true)
	c2r := NewChatToResponsesStream(&openai.ResponsesRequest{Model: "m"})
	var out []Event
	pipe := func(chunks []Event) {
		for _, c := range chunks {
			if string(c.Data) == "[DONE]" {
				out = append(out, c2r.Finish(nil)...)
				continue
			}
			evs, err := c2r.Feed(c.Data)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, evs...)
		}
	}
	r := sse.NewReader(bytes.NewReader(in), 0)
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks, err := a2c.Feed(ev.Name, ev.Data)
		if err != nil {
			t.Fatal(err)
		}
		pipe(chunks)
	}
	pipe(a2c.Finish(nil))
	evs := sdkResponsesEvents(t, renderEvents(out))
	final := evs[len(evs)-1].AsResponseCompleted().Response
	if len(final.Output) != 3 || final.Output[0].Type != "reasoning" ||
		final.Output[1].AsFunctionCall().Arguments != `{"city": "Paris"}` || final.Output[2].AsFunctionCall().CallID != "toolu_b" {
		t.Errorf("final response = %s", final.RawJSON())
	}
}

func TestChatToAnthropicStream_ToolCallsWithoutIndexAreSeparateCalls(t *testing.T) {
	tr := NewChatToAnthropicStream("m", 1)
	evs, err := tr.Feed(chunkJSON(`{"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]}`, "tool_calls"))
	if err != nil {
		t.Fatal(err)
	}
	evs = append(evs, tr.Finish(nil)...)
	msg, err := sdkAccumulate(t, renderEvents(evs))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 2 || msg.Content[0].ID != "c1" || string(msg.Content[0].Input) != `{"a":1}` || msg.Content[1].Name != "g" {
		t.Errorf("content = %s", msg.RawJSON())
	}
}

func TestToolIndexer_NumbersCalls(t *testing.T) {
	var x toolIndexer
	calls := []openai.ToolCall{{ID: "a"}, {}, {ID: "b"}, {Index: ptr(5), ID: "c"}, {}, {ID: "a"}}
	want := []int{0, 0, 1, 5, 5, 0}
	for i, tc := range calls {
		if got := x.index(tc); got != want[i] {
			t.Errorf("call %d: index %d, want %d", i, got, want[i])
		}
	}
}

func TestDropUnsignedThinking_KeepsSignedBlocks(t *testing.T) {
	req := decodeMessagesRequest(t, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"},
	 {"role":"assistant","content":[{"type":"thinking","thinking":"local","signature":""},{"type":"thinking","thinking":"claude","signature":"EqQB"},{"type":"text","text":"a"}]}]}`)
	if !DropUnsignedThinking(req) {
		t.Fatal("reported no change")
	}
	got := req.Messages[1].Content.Blocks
	if len(got) != 2 || got[0].Signature != "EqQB" || got[1].Text != "a" {
		t.Errorf("blocks = %s", mustJSON(got))
	}
	if DropUnsignedThinking(req) {
		t.Error("second call reported a change")
	}
}

func TestChatToAnthropicRequest_LeavesOutEmptyText(t *testing.T) {
	var req openai.ChatCompletionRequest
	_ = json.Unmarshal([]byte(`{"model":"c","messages":[{"role":"user","content":""},{"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"hi"}]}]}`), &req)
	out, err := ChatToAnthropicRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || len(out.Messages[0].Content.Blocks) != 1 || out.Messages[0].Content.Blocks[0].Text != "hi" {
		t.Errorf("messages = %s", mustJSON(out.Messages))
	}
}

func TestStreams_IgnoreEmptyKeepAliveEvents(t *testing.T) {
	a := NewChatToAnthropicStream("m", 1)
	r := NewChatToResponsesStream(nil)
	c := NewAnthropicToChatStream("m", false)
	for _, data := range [][]byte{nil, []byte(" "), []byte("\n")} {
		if evs, err := a.Feed(data); evs != nil || err != nil {
			t.Errorf("chat->anthropic: %v %v", evs, err)
		}
		if evs, err := r.Feed(data); evs != nil || err != nil {
			t.Errorf("chat->responses: %v %v", evs, err)
		}
		if evs, err := c.Feed("ping", data); evs != nil || err != nil {
			t.Errorf("anthropic->chat: %v %v", evs, err)
		}
	}
}

// Claude Code's billing line (a hash of the session's first prompt, first
// in the system prompt) would make every session's prompt differ at its
// start, so no engine could reuse another session's cached prefix: it is
// removed for chat backends, as its own block or as the first line of one,
// and kept with KeepBillingHeader. Other system text is untouched.
func TestAnthropicToChat_RemovesClaudeCodesBillingLineUnlessKept(t *testing.T) {
	const line = "x-anthropic-billing-header: cc_version=2.1.332.a1f; cc_entrypoint=sdk-cli;"
	for _, tc := range []struct {
		name, system string
		want, kept   string
	}{
		{"own block", `[{"type":"text","text":"` + line + `"},{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}]`,
			"You are Claude Code.", line + "\n\nYou are Claude Code."},
		{"first line of a block", `[{"type":"text","text":"` + line + `\nYou are Claude Code."},{"type":"text","text":"Be brief."}]`,
			"You are Claude Code.\n\nBe brief.", line + "\nYou are Claude Code.\n\nBe brief."},
		{"string", `"` + line + `\nYou are Claude Code."`, "You are Claude Code.", line + "\nYou are Claude Code."},
		{"only the line", `[{"type":"text","text":"` + line + `"}]`, "", line},
		{"not first", `[{"type":"text","text":"You are Claude Code."},{"type":"text","text":"` + line + `"}]`,
			"You are Claude Code.\n\n" + line, "You are Claude Code.\n\n" + line},
		{"not at the start of the text", `" ` + line + `"`, " " + line, " " + line},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"m","max_tokens":5,"system":` + tc.system + `,"messages":[{"role":"user","content":"hi"}]}`
			var req anthropic.MessagesRequest
			if err := json.Unmarshal([]byte(body), &req); err != nil {
				t.Fatal(err)
			}
			before, _ := json.Marshal(req.System)
			for _, keep := range []bool{false, true} {
				out, err := AnthropicToChatWith(&req, dialect.ChatOptions{KeepBillingHeader: keep})
				if err != nil {
					t.Fatal(err)
				}
				want := tc.want
				if keep {
					want = tc.kept
				}
				got := ""
				if out.Messages[0].Role == "system" {
					got = out.Messages[0].Content.String()
				}
				if got != want {
					t.Errorf("keep=%v: system = %q, want %q", keep, got, want)
				}
			}
			if after, _ := json.Marshal(req.System); !bytes.Equal(before, after) {
				t.Errorf("the request's own system prompt changed: %s -> %s", before, after)
			}
		})
	}
}
