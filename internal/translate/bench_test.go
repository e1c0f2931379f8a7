package translate

import (
	"fmt"
	"testing"
)

// BenchmarkChatToAnthropicStream_Feed measures translating one upstream text
// chunk into Anthropic events, the per-token cost on the streaming hot path.
func BenchmarkChatToAnthropicStream_Feed(b *testing.B) {
	chunk := chunkJSON(`{"content":" token"}`, "")
	tr := NewChatToAnthropicStream("m", 10)
	_, _ = tr.Feed(chunk)
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		if _, err := tr.Feed(chunk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChatToAnthropicStream_FeedToolArguments measures one fragment
// of a tool call's arguments (a coding agent's edit streams as hundreds
// of them) becoming an input_json_delta.
func BenchmarkChatToAnthropicStream_FeedToolArguments(b *testing.B) {
	tr := NewChatToAnthropicStream("m", 10)
	if _, err := tr.Feed(chunkJSON(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"Edit","arguments":"{\"path\": \""}}]}`, "")); err != nil {
		b.Fatal(err)
	}
	chunk := chunkJSON(`{"tool_calls":[{"index":0,"function":{"arguments":"line\\n  x"}}]}`, "")
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		if _, err := tr.Feed(chunk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnthropicToChatStream_Feed measures one text_delta event.
func BenchmarkAnthropicToChatStream_Feed(b *testing.B) {
	ev := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" token"}}`)
	tr := NewAnthropicToChatStream("m", true)
	_, _ = tr.Feed("message_start", []byte(`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":5,"output_tokens":1}}}`))
	b.ReportAllocs()
	b.SetBytes(int64(len(ev)))
	for b.Loop() {
		if _, err := tr.Feed("content_block_delta", ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChatToResponsesStream_Feed measures one text chunk.
func BenchmarkChatToResponsesStream_Feed(b *testing.B) {
	chunk := chunkJSON(`{"content":" token"}`, "")
	tr := NewChatToResponsesStream(nil)
	_, _ = tr.Feed(chunk)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Feed(chunk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChatToResponsesStream_FeedToolArguments measures one fragment
// of a tool call's arguments becoming a function_call_arguments.delta
// (Codex on a chat engine), and one line of code as a text delta.
func BenchmarkChatToResponsesStream_FeedToolArguments(b *testing.B) {
	for name, c := range map[string][2]string{
		"arguments": {`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"shell","arguments":"{\"cmd\": \""}}]}`,
			`{"tool_calls":[{"index":0,"function":{"arguments":"line\\n  x"}}]}`},
		"code-text": {`{"content":"func main() {"}`, `{"content":"\tfmt.Println(\"hi\")\n"}`},
	} {
		b.Run(name, func(b *testing.B) {
			tr := NewChatToResponsesStream(nil)
			if _, err := tr.Feed(chunkJSON(c[0], "")); err != nil {
				b.Fatal(err)
			}
			chunk := chunkJSON(c[1], "")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tr.Feed(chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAnthropicToChat_Request measures translating a 20-turn
// conversation with tools, the per-request cost.
func BenchmarkAnthropicToChat_Request(b *testing.B) {
	body := `{"model":"m","max_tokens":100,"system":"sys","tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[`
	for i := range 10 {
		body += fmt.Sprintf(`{"role":"user","content":"question %d"},{"role":"assistant","content":[{"type":"text","text":"answer"},{"type":"tool_use","id":"t%d","name":"f","input":{"x":1}}]},`, i, i)
	}
	body += `{"role":"user","content":"last"}]}`
	req := decodeMessagesRequest(b, body)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AnthropicToChat(req); err != nil {
			b.Fatal(err)
		}
	}
}
