package translate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/apierror"
)

// The shape Claude Code 2.1.332 sends when its ToolSearch tool loaded a
// deferred MCP tool: the tool stays in tools with defer_loading, a
// placeholder that is never loaded keeps deferral on, and the search's
// tool_result holds a tool_reference block.
const toolSearchTurn = `{"model":"m","max_tokens":100,"stream":true,
 "tools":[
  {"name":"ToolSearch","description":"Fetches full schema definitions for deferred tools.","input_schema":{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}},
  {"name":"DeferredToolPlaceholder","description":"never call this tool","input_schema":{"type":"object","properties":{}},"defer_loading":true},
  {"name":"mcp__llmgate__chat","description":"Ask a model","input_schema":{"type":"object","properties":{"prompt":{"type":"string"}},"required":["prompt"]},"defer_loading":true},
  {"name":"mcp__llmgate__compare","description":"Compare models","input_schema":{"type":"object","properties":{}},"defer_loading":true}],
 "messages":[
  {"role":"user","content":"ask the other model"},
  {"role":"assistant","content":[{"type":"tool_use","id":"tu_1","name":"ToolSearch","input":{"query":"select:mcp__llmgate__chat"}}]},
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"tool_reference","tool_name":"mcp__llmgate__chat"}]}]}]}`

func TestAnthropicToChat_ToolSearchLoadsDeferredTools(t *testing.T) {
	var req anthropic.MessagesRequest
	if err := json.Unmarshal([]byte(toolSearchTurn), &req); err != nil {
		t.Fatal(err)
	}
	out, err := AnthropicToChat(&req)
	if err != nil {
		t.Fatalf("a tool_reference in a tool_result is refused: %v", err)
	}
	var names []string
	for _, tl := range out.Tools {
		names = append(names, tl.Function.Name)
	}
	if got := strings.Join(names, ","); got != "ToolSearch,mcp__llmgate__chat" {
		t.Errorf("tools sent to the chat backend = %s; want the undeferred tool and the one a tool_reference loaded", got)
	}
	var toolMsg string
	for _, m := range out.Messages {
		if m.Role == "tool" && m.ToolCallID == "tu_1" {
			toolMsg = m.Content.String()
		}
	}
	for _, want := range []string{"<functions>", `"name":"mcp__llmgate__chat"`, `"description":"Ask a model"`, `"required":["prompt"]`, "</functions>"} {
		if !strings.Contains(toolMsg, want) {
			t.Errorf("tool message %q lacks %s", toolMsg, want)
		}
	}
	if strings.Contains(toolMsg, "compare") {
		t.Errorf("tool message names a tool that was not referenced: %q", toolMsg)
	}

	// Before any search, deferred tools are not offered at all.
	req.Messages = req.Messages[:1]
	out, err = AnthropicToChat(&req)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Tools) != 1 || out.Tools[0].Function.Name != "ToolSearch" {
		t.Errorf("before a search the backend got %d tools (%v); want ToolSearch only", len(out.Tools), out.Tools)
	}
}

func TestAnthropicToChat_ToolReferenceWithoutNameIs400(t *testing.T) {
	body := strings.Replace(toolSearchTurn, `"tool_name":"mcp__llmgate__chat"`, `"name":"x"`, 1)
	var req anthropic.MessagesRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	_, err := AnthropicToChat(&req)
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, "tool_name") {
		t.Fatalf("err = %v; want a 400 naming tool_name", err)
	}
}

// Many references to one large tool cannot blow the request up: the
// definition is written once, later references name the tool.
func TestAnthropicToChat_ToolReferencesDoNotAmplify(t *testing.T) {
	schema := `{"type":"object","description":"` + strings.Repeat("x", 20000) + `"}`
	var b strings.Builder
	b.WriteString(`{"model":"m","max_tokens":10,"tools":[{"name":"big","defer_loading":true,"input_schema":` + schema + `}],"messages":[{"role":"user","content":"go"}`)
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","content":[{"type":"tool_use","id":"t%d","name":"ToolSearch","input":{}}]}`, i)
		fmt.Fprintf(&b, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":[{"type":"tool_reference","tool_name":"big"},{"type":"tool_reference","tool_name":"big"}]}]}`, i)
	}
	b.WriteString(`]}`)
	var req anthropic.MessagesRequest
	if err := json.Unmarshal([]byte(b.String()), &req); err != nil {
		t.Fatal(err)
	}
	out, err := AnthropicToChat(&req)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := json.Marshal(out)
	if len(enc) > 2*b.Len() {
		t.Fatalf("a %d-byte request became %d bytes for the backend", b.Len(), len(enc))
	}
	if n := strings.Count(string(enc), strings.Repeat("x", 20000)); n != 2 { // the tool list, and the first reference
		t.Fatalf("the schema appears %d times; want 2", n)
	}
}

func TestAnthropicToChat_ToolChoiceOfAnUnloadedDeferredToolIs400(t *testing.T) {
	var req anthropic.MessagesRequest
	if err := json.Unmarshal([]byte(toolSearchTurn), &req); err != nil {
		t.Fatal(err)
	}
	req.ToolChoice = &anthropic.ToolChoice{Type: "tool", Name: "mcp__llmgate__compare"}
	_, err := AnthropicToChat(&req)
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != "tool_choice.name" {
		t.Fatalf("err = %v; want a 400 on tool_choice.name", err)
	}
	req.ToolChoice.Name = "mcp__llmgate__chat" // loaded by the tool_reference
	if _, err := AnthropicToChat(&req); err != nil {
		t.Fatalf("a loaded deferred tool as tool_choice: %v", err)
	}
}

// TestToolReferenceBytes_CountsWhatTheFunctionsBlocksAdd: the size a caller
// bounds before translating is what the <functions> blocks then hold (for
// text that needs no escaping), each definition once however often it is
// referenced.
func TestToolReferenceBytes_CountsWhatTheFunctionsBlocksAdd(t *testing.T) {
	desc := strings.Repeat("a", 10000)
	body := `{"model":"m","max_tokens":10,"tools":[{"name":"big","description":"` + desc + `","input_schema":{"type":"object"},"defer_loading":true}],
 "messages":[{"role":"user","content":"go"},
  {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ToolSearch","input":{}}]},
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"tool_reference","tool_name":"big"},{"type":"tool_reference","tool_name":"big"}]}]}]}`
	var req anthropic.MessagesRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	out, err := AnthropicToChat(&req)
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, m := range out.Messages {
		if m.Role == "tool" {
			written += len(m.Content.String())
		}
	}
	got := ToolReferenceBytes(&req)
	if got < int64(written)-64 || got > int64(written)+256 || got < 10000 || got > 11000 {
		t.Fatalf("ToolReferenceBytes = %d, the functions blocks hold %d bytes (one 10,000-byte definition, referenced twice)", got, written)
	}
}
