package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agentScript answers three agent CLIs with one file: each is asked to read
// hello.txt with its own tool, and the answer to the tool's output reports
// the file's content.
const agentScript = `
# one script for Claude Code, Codex and opencode
on_unmatched: generate
turns:
  - match: "read the file hello.txt"
    tool_calls:
      - name: Read            # Claude Code
        arguments: {file_path: /work/hello.txt}
  - match: "read the file hello.txt"
    tool_calls:
      - name: shell           # Codex
        arguments:
          command: [cat, hello.txt]
          timeout_ms: 10000
  - match: "read the file hello.txt"
    when_tool: [read, bash]   # opencode
    tool_calls:
      - name: read
        arguments: '{"filePath":"/work/hello.txt"}'
  - match: "LLMGATE-SENTINEL-42"
    after_tool: true
    reasoning: The tool returned the file.
    text: The file says LLMGATE-SENTINEL-42.
`

func scriptConfig(t *testing.T, src string) Config {
	t.Helper()
	sc, err := ParseScript([]byte(src), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := quickConfig()
	cfg.Script = sc
	return cfg
}

// fnTools renders function tools with permissive schemas.
func fnTools(names ...string) string {
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf(`{"type":"function","function":{"name":%q,"parameters":{"type":"object"}}}`, n))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func TestScript_ParsesYAMLAndJSONAndKeepsArgumentOrder(t *testing.T) {
	sc, err := ParseScript([]byte(agentScript), "agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	turns := sc.Turns()
	if len(turns) != 4 || sc.OnUnmatched() != UnmatchedGenerate {
		t.Fatalf("%d turns, on_unmatched %q", len(turns), sc.OnUnmatched())
	}
	for i, want := range []string{
		`{"file_path": "/work/hello.txt"}`,
		`{"command": ["cat", "hello.txt"], "timeout_ms": 10000}`,
		`{"filePath":"/work/hello.txt"}`, // a string is sent as written
	} {
		if got := turns[i].ToolCalls[0].Arguments; got != want {
			t.Errorf("turn %d arguments %s, want %s", i+1, got, want)
		}
	}
	if !slicesEqual(turns[2].WhenTool, []string{"read", "bash"}) || turns[3].AfterTool == nil || !*turns[3].AfterTool {
		t.Errorf("conditions: %+v %+v", turns[2], turns[3])
	}
	// JSON is YAML, and a bare list of turns is a script.
	js := `[{"match":"hi","text":"Hello!"},{"tool_calls":[{"name":"f","arguments":{"b":1,"a":[true,null,1.5]}}]}]`
	sc, err = ParseScript([]byte(js), "s.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Turns()[1].ToolCalls[0].Arguments; got != `{"b": 1, "a": [true, null, 1.5]}` {
		t.Errorf("JSON arguments %s", got)
	}
	path := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(path, []byte(agentScript), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadScript(path); err != nil {
		t.Error(err)
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func TestScript_RefusesMistakesWithTheirLine(t *testing.T) {
	for src, want := range map[string]string{
		"":            "empty",
		"turns: []\n": "no turns",
		"on_unmatched: maybe\nturns: [{text: x}]\n":                    `on_unmatched must be "generate" or "error"`,
		"turns:\n  - text: x\n  - matchh: y\n    text: z\n":            `line 3: unknown key "matchh" in a turn`,
		"turns:\n  - match: x\n":                                       "turn 1 (line 2): a turn needs text:, reasoning: or tool_calls:",
		"turns:\n  - tool_calls: [{arguments: {}}]\n":                  "tool_calls[0] has no name",
		"turns:\n  - tool_calls: [{name: f, arguments: 'not json'}]\n": "line 2: arguments must be a mapping or a string holding a JSON object",
		"turns:\n  - tool_calls: [{name: f, arguments: [1, 2]}]\n":     "arguments must be a mapping",
		"turns:\n  - tool_calls: [{name: f, args: {}}]\n":              `unknown key "args" in a tool call`,
		"turns:\n  - text: x\nextra: 1\n":                              `line 3: unknown key "extra" in the script`,
		"just a string\n":                                              "a script is a list of turns",
	} {
		_, err := ParseScript([]byte(src), "bad.yaml")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "bad.yaml") {
			t.Errorf("%q: error %v, want %q", src, err, want)
		}
	}
	if _, err := LoadScript(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestScript_SequentialTurnsAnswerInOrderThenTheGeneratorTakesOver(t *testing.T) {
	_, url := startServer(t, scriptConfig(t, "- text: First answer.\n- text: Second answer.\n"))
	for _, want := range []string{"First answer.", "Second answer."} {
		a := chat(t, url, `{"messages":[{"role":"user","content":"anything"}]}`)
		if c := a.Choices[0]; c.Message.Content == nil || *c.Message.Content != want || c.FinishReason != "stop" {
			t.Fatalf("got %v (%s), want %q", c.Message.Content, c.FinishReason, want)
		}
		if a.Usage.CompletionTokens != len(splitUnits(want)) {
			t.Errorf("usage %+v for %q", a.Usage, want)
		}
	}
	a := chat(t, url, `{"messages":[{"role":"user","content":"anything"}],"max_tokens":5,"ignore_eos":true}`)
	if c := a.Choices[0].Message.Content; c == nil || strings.Contains(*c, "answer.") || a.Usage.CompletionTokens != 5 {
		t.Errorf("after the script: %v %+v", c, a.Usage)
	}
}

func TestScript_OneScriptDrivesThreeAgentsThroughAToolCall(t *testing.T) {
	_, url := startServer(t, scriptConfig(t, agentScript))
	clients := map[string]struct{ tools, tool, args string }{
		"claude-code": {fnTools("Task", "Bash", "Glob", "Read", "Edit"), "Read", `{"file_path": "/work/hello.txt"}`},
		"codex":       {fnTools("shell", "update_plan", "view_image"), "shell", `{"command": ["cat", "hello.txt"], "timeout_ms": 10000}`},
		"opencode":    {fnTools("bash", "edit", "read", "write"), "read", `{"filePath":"/work/hello.txt"}`},
	}
	for name, c := range clients {
		ask := fmt.Sprintf(`{"messages":[{"role":"system","content":"You are %s."},{"role":"user","content":"Please read the file hello.txt and tell me what it says."}],"tools":%s}`, name, c.tools)
		a := chat(t, url, ask)
		ch := a.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != nil {
			t.Fatalf("%s: %+v", name, ch)
		}
		call := ch.Message.ToolCalls[0]
		if call.Function.Name != c.tool || call.Function.Arguments != c.args {
			t.Errorf("%s: called %s(%s), want %s(%s)", name, call.Function.Name, call.Function.Arguments, c.tool, c.args)
		}
		// The client runs the tool and sends its output back.
		callJSON, _ := json.Marshal(map[string]any{"id": call.ID, "type": "function",
			"function": map[string]string{"name": call.Function.Name, "arguments": call.Function.Arguments}})
		reply := fmt.Sprintf(`{"messages":[{"role":"user","content":"Please read the file hello.txt and tell me what it says."},
			{"role":"assistant","content":null,"tool_calls":[%s]},
			{"role":"tool","tool_call_id":%q,"content":"     1\tLLMGATE-SENTINEL-42\n"}],"tools":%s,"stream":true}`, callJSON, call.ID, c.tools)
		s := readAnswerStream(t, stream(t, url+"/v1/chat/completions", reply))
		if s.text != "The file says LLMGATE-SENTINEL-42." || s.reasoning != "The tool returned the file." || strings.Join(s.order, "") != strings.Repeat("r", s.reasoningChunks)+strings.Repeat("c", s.contentChunks) {
			t.Errorf("%s: final answer %q (reasoning %q, order %v)", name, s.text, s.reasoning, s.order)
		}
	}
	// A client offering none of the tools gets generated text.
	a := chat(t, url, `{"messages":[{"role":"user","content":"Please read the file hello.txt"}],"tools":`+fnTools("fetch")+`,"max_tokens":4}`)
	if len(a.Choices[0].Message.ToolCalls) != 0 {
		t.Error("a turn called a tool the request does not offer")
	}
}

func TestScript_ConditionsModelAndAfterTool(t *testing.T) {
	src := `
turns:
  - match: ping
    model: other
    text: wrong model
  - match: ping
    after_tool: true
    text: after a tool
  - match: ping
    after_tool: false
    text: pong
`
	_, url := startServer(t, scriptConfig(t, src))
	if a := chat(t, url, `{"messages":[{"role":"user","content":"ping"}]}`); *a.Choices[0].Message.Content != "pong" {
		t.Errorf("user ping: %q", *a.Choices[0].Message.Content)
	}
	a := chat(t, url, `{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":"ok"},{"role":"tool","content":"ping"}]}`)
	if *a.Choices[0].Message.Content != "after a tool" {
		t.Errorf("tool ping: %q", *a.Choices[0].Message.Content)
	}
	// Only the messages after the last assistant message are matched.
	a = chat(t, url, `{"messages":[{"role":"user","content":"ping"},{"role":"assistant","content":"pong"},{"role":"user","content":"thanks"}],"max_tokens":3,"ignore_eos":true}`)
	if c := *a.Choices[0].Message.Content; c == "pong" || c == "after a tool" {
		t.Errorf("matched an earlier turn's message: %q", c)
	}
}

func TestScript_UnmatchedRequestsCanBeAnError(t *testing.T) {
	_, url := startServer(t, scriptConfig(t, "on_unmatched: error\nturns:\n  - match: hello\n    text: hi\n"))
	code, _, b := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"goodbye"}]}`)
	if e := decodeError(t, b); code != 400 || !strings.Contains(e.Message, `"goodbye"`) || !strings.Contains(e.Message, "test.yaml") {
		t.Errorf("unmatched: %d %s", code, b)
	}
}

func TestScript_TurnsKeepTheTimingModelAndObeyLimits(t *testing.T) {
	cfg := scriptConfig(t, "- reasoning: Let me think about it for a while.\n  text: "+strings.Repeat("word ", 30)+"\n")
	cfg.Models[0].DecodeBase = 2 * time.Millisecond
	_, url := startServer(t, cfg)
	res := stream(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`)
	s := readAnswerStream(t, res)
	tokens := s.completionTokens
	if tokens != len(splitUnits("Let me think about it for a while."))+2+30 {
		t.Errorf("%d completion tokens", tokens)
	}
	// Every token is one engine step of at least DecodeBase.
	if took := res.events[len(res.events)-1].at.Sub(res.start); took < time.Duration(tokens)*2*time.Millisecond {
		t.Errorf("%d tokens streamed in %v, faster than the decode steps allow", tokens, took)
	}
	if len(res.tokenTimes(t)) < 30 {
		t.Errorf("%d content chunks", len(res.tokenTimes(t)))
	}

	// A sequential turn cut by max_tokens, and scripted reasoning dropped
	// when the request turns thinking off.
	_, url = startServer(t, scriptConfig(t, "- reasoning: Thinking hard here.\n  text: One two three four five six.\n- reasoning: Hidden.\n  text: Shown.\n"))
	// <think>, 4 reasoning tokens, </think>, then 2 of the text's.
	a := chat(t, url, `{"messages":[{"role":"user","content":"x"}],"max_tokens":8}`)
	if c := a.Choices[0]; c.FinishReason != "length" || a.Usage.CompletionTokens != 8 || *c.Message.Content != "One two" {
		t.Errorf("cut turn: %q %s %+v", *c.Message.Content, c.FinishReason, a.Usage)
	}
	a = chat(t, url, `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false}}`)
	if m := a.Choices[0].Message; m.ReasoningContent != nil || *m.Content != "Shown." {
		t.Errorf("thinking off: %v %q", m.ReasoningContent, *m.Content)
	}
}
