package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// claudeCodeBody builds a request shaped like a Claude Code turn: a system
// array, 16 tools, and a 40-message tool-use conversation.
func claudeCodeBody() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","max_tokens":32000,"stream":true,"thinking":{"type":"adaptive"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"output_config":{"effort":"high"},"metadata":{"user_id":"u"},`)
	b.WriteString(`"system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],"tools":[`)
	for i := range 16 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"Tool%d","description":"%s","input_schema":{"type":"object","properties":{"file_path":{"type":"string","description":"path"}},"required":["file_path"]}}`, i, strings.Repeat("does things ", 40))
	}
	b.WriteString(`],"messages":[{"role":"user","content":[{"type":"text","text":"fix the bug","cache_control":{"type":"ephemeral"}}]},{"role":"system","content":[{"type":"text","text":"reminder","cache_control":{"type":"ephemeral"}}]}`)
	for i := range 20 {
		fmt.Fprintf(&b, `,{"role":"assistant","content":[{"type":"thinking","thinking":"let me look","signature":""},{"type":"text","text":"Reading."},{"type":"tool_use","id":"toolu_%d","name":"Tool1","input":{"file_path":"/src/main.go"}}]}`, i)
		fmt.Fprintf(&b, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":[{"type":"text","text":"%s"}]}]}`, i, strings.Repeat("package main\\n", 80))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkMessagesRequest_Decode measures decoding a Claude Code sized
// request, which every /v1/messages call pays once.
func BenchmarkMessagesRequest_Decode(b *testing.B) {
	body := claudeCodeBody()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var req MessagesRequest
		if err := json.Unmarshal(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}
