//go:build unix

package agents

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// client is one coding agent under test.
type client struct {
	name string // the llmgate connect target, and the subtest name
	key  string // prefix of its script placeholders
	pkg  string // npm package
	bin  string // executable in node_modules/.bin
	// env returns the variables the client gets besides the sandbox's:
	// the key connect told it to read, and the switches that keep it off
	// the network (telemetry, update checks, downloads).
	env  func(e *env) []string
	runs []run
	// alsoConnect are more connect targets run in the client's sandbox,
	// whose written files runs use (wrote[target]): Claude Code runs the
	// "llmgate mcp" entry that connect cline-mcp writes, as an MCP client.
	alsoConnect []string
	// allowedEgress lists hosts the pinned version tries to reach with no
	// switch to stop it; the test's proxy refuses them like every other.
	allowedEgress []string
}

// run is one invocation of a client.
type run struct {
	name string
	args []string // before the prompt, which comes last
	// argsFor, when set, gives the arguments instead of args, from the
	// files connect wrote (by target).
	argsFor func(e *env, wrote map[string]string) []string
	prompt  func(e *env) string
	check   func(t *testing.T, e *env, res *result)
}

func plainPrompt(e *env) string {
	return fmt.Sprintf("Say hello in one short sentence. [plain %s]", e.runID)
}

// plainAnswer is the scripted answer to plainPrompt.
func plainAnswer(e *env) string {
	return fmt.Sprintf("Hello from the simulated model (plain %s).", e.runID)
}

func agentPrompt(e *env) string {
	return fmt.Sprintf("Read the file sentinel.txt in the current directory and tell me what it says. [agent %s]", e.runID)
}

// agentAnswer is the scripted answer to the tool result of c's agent turn.
func agentAnswer(e *env, c string) string {
	return fmt.Sprintf("Tool result received by the model (%s %s).", c, e.runID)
}

var clients = []*client{claudeCode, codex, opencode}

// Claude Code: `claude -p`. CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC turns
// off the auto-updater, telemetry, error reporting and feature-flag
// fetches (without it, 2.1.332 calls api.anthropic.com even with a custom
// ANTHROPIC_BASE_URL); DISABLE_AUTOUPDATER says the same for the updater
// in case the umbrella switch changes meaning. The key and base URL come
// from the settings.json connect wrote.
var claudeCode = &client{
	name: "claude-code", key: "CLAUDE", pkg: "@anthropic-ai/claude-code", bin: "claude", alsoConnect: []string{"cline-mcp"},
	env: func(*env) []string {
		return []string{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1"}
	},
	runs: []run{
		{name: "plain-json", args: []string{"-p", "--output-format", "json"}, prompt: plainPrompt,
			check: func(t *testing.T, e *env, res *result) {
				var out map[string]any
				if err := json.Unmarshal(res.stdout, &out); err != nil {
					t.Fatalf("stdout is not one JSON object: %v", err)
				}
				checkClaudeResult(t, out, plainAnswer(e))
			}},
		{name: "plain-stream-json", args: []string{"-p", "--output-format", "stream-json", "--verbose"}, prompt: plainPrompt,
			check: func(t *testing.T, e *env, res *result) {
				events := jsonLines(res.stdout)
				if !claudeSaid(events, plainAnswer(e)) {
					t.Errorf("no assistant event carries the answer %q", plainAnswer(e))
				}
				checkClaudeResult(t, lastOfType(events, "result"), plainAnswer(e))
			}},
		{name: "agent-read", args: []string{"-p", "--output-format", "stream-json", "--verbose"}, prompt: agentPrompt,
			check: func(t *testing.T, e *env, res *result) {
				events := jsonLines(res.stdout)
				sentinel := e.vars["CLAUDE_SENTINEL"]
				if !claudeToolUse(events, "Read") {
					t.Error("no assistant event with a Read tool_use")
				}
				if !claudeToolResult(events, sentinel) {
					t.Errorf("no tool_result containing %s: Claude Code did not read the file", sentinel)
				}
				gatewaySawToolResult(t, res, sentinel)
				checkClaudeResult(t, lastOfType(events, "result"), agentAnswer(e, "claude-code"))
			}},
		// Claude Code as the MCP client of "llmgate mcp", started from the
		// mcpServers entry connect cline-mcp wrote (Cline's file has the same
		// shape). Claude Code defers MCP tools behind its ToolSearch tool:
		// the scripted model searches, then calls the chat tool, whose
		// request goes through the gateway to the simulator.
		{name: "mcp-chat-tool", prompt: mcpPrompt,
			argsFor: func(e *env, wrote map[string]string) []string {
				return []string{"-p", "--output-format", "stream-json", "--verbose", "--mcp-config", wrote["cline-mcp"],
					"--strict-mcp-config", "--allowedTools", "mcp__llmgate__chat", "--"}
			},
			check: func(t *testing.T, e *env, res *result) {
				events := jsonLines(res.stdout)
				inner := "MCP-INNER-ANSWER-" + e.runID
				if claudeToolUse(events, "ToolSearch") {
					t.Log("Claude Code loaded the deferred MCP tool with ToolSearch (a tool_reference result)")
				}
				if !claudeToolUse(events, "mcp__llmgate__chat") {
					t.Error("no assistant event with an mcp__llmgate__chat tool_use")
				}
				if !claudeToolResult(events, inner) {
					t.Errorf("no tool_result containing %s: the llmgate mcp chat tool did not answer", inner)
				}
				innerSeen := false
				for _, ex := range res.exchanges {
					if strings.HasSuffix(ex.URL, "/chat/completions") && strings.Contains(string(ex.Body), "[mcp-inner "+e.runID+"]") && ex.Status == 200 {
						innerSeen = true
					}
				}
				if !innerSeen {
					t.Error("llmgate mcp's chat request never reached the gateway (no 200 POST /v1/chat/completions with the inner prompt)")
				}
				gatewaySawToolResult(t, res, inner)
				checkClaudeResult(t, lastOfType(events, "result"), agentAnswer(e, "claude-code-mcp"))
			}},
	},
}

func mcpPrompt(e *env) string {
	return fmt.Sprintf("Ask the other model for the code word with the llmgate chat tool. [mcp %s]", e.runID)
}

// checkClaudeResult checks Claude Code's final "result" object.
func checkClaudeResult(t *testing.T, out map[string]any, want string) {
	t.Helper()
	if out == nil {
		t.Fatal("no result event")
	}
	if out["is_error"] != false || out["subtype"] != "success" {
		t.Fatalf("result is an error: subtype %v, is_error %v, result %q", out["subtype"], out["is_error"], out["result"])
	}
	got, _ := out["result"].(string)
	if strings.TrimSpace(got) == "" {
		t.Fatal("empty answer")
	}
	if !strings.Contains(got, want) {
		t.Fatalf("answer %q does not contain the scripted %q", got, want)
	}
}

func lastOfType(events []map[string]any, typ string) map[string]any {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i]["type"] == typ {
			return events[i]
		}
	}
	return nil
}

// claudeBlocks returns the content blocks of stream-json events of a type
// ("assistant" or "user").
func claudeBlocks(events []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, ev := range events {
		if ev["type"] != typ {
			continue
		}
		msg, _ := ev["message"].(map[string]any)
		blocks, _ := msg["content"].([]any)
		for _, b := range blocks {
			if m, ok := b.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

func claudeSaid(events []map[string]any, want string) bool {
	for _, b := range claudeBlocks(events, "assistant") {
		if s, _ := b["text"].(string); b["type"] == "text" && strings.Contains(s, want) {
			return true
		}
	}
	return false
}

func claudeToolUse(events []map[string]any, name string) bool {
	for _, b := range claudeBlocks(events, "assistant") {
		if b["type"] == "tool_use" && b["name"] == name {
			return true
		}
	}
	return false
}

func claudeToolResult(events []map[string]any, sentinel string) bool {
	for _, b := range claudeBlocks(events, "user") {
		if b["type"] != "tool_result" {
			continue
		}
		raw, _ := json.Marshal(b["content"])
		if strings.Contains(string(raw), sentinel) && b["is_error"] != true {
			return true
		}
	}
	return false
}

// Codex: `codex exec --json` in its read-only sandbox. Codex reads the key
// from LLMGATE_API_KEY (connect's env_key). Without --disable plugins
// 0.171.0 syncs its curated plugin marketplace on every run (git clone of
// github.com, then api.github.com and chatgpt.com); analytics.enabled=false
// stops the events to ab.chatgpt.com that also hold up its exit by seconds.
// check_for_update_on_startup=false: exec was not seen checking, but the
// TUI does, and a later version's exec might.
var codex = &client{
	name: "codex", key: "CODEX", pkg: "@openai/codex", bin: "codex",
	env: func(e *env) []string { return []string{"LLMGATE_API_KEY=" + e.gateway.key} },
	runs: []run{
		{name: "plain", args: codexArgs, prompt: plainPrompt,
			check: func(t *testing.T, e *env, res *result) {
				events := jsonLines(res.stdout)
				checkCodexTurn(t, events)
				if got := codexMessages(events); !strings.Contains(got, plainAnswer(e)) {
					t.Fatalf("agent messages %q do not contain the scripted %q", got, plainAnswer(e))
				}
			}},
		{name: "agent-cat", args: codexArgs, prompt: agentPrompt,
			check: func(t *testing.T, e *env, res *result) {
				events := jsonLines(res.stdout)
				checkCodexTurn(t, events)
				sentinel := e.vars["CODEX_SENTINEL"]
				ran := false
				for _, it := range codexItems(events, "command_execution") {
					out, _ := it["aggregated_output"].(string)
					if code, _ := it["exit_code"].(float64); code == 0 && it["status"] == "completed" && strings.Contains(out, sentinel) {
						ran = true
					}
				}
				if !ran {
					t.Errorf("no completed command_execution printed %s: Codex did not run cat", sentinel)
				}
				gatewaySawToolResult(t, res, sentinel)
				if got := codexMessages(events); !strings.Contains(got, agentAnswer(e, "codex")) {
					t.Fatalf("agent messages %q do not contain the scripted %q", got, agentAnswer(e, "codex"))
				}
			}},
	},
}

var codexArgs = []string{"exec", "--json", "--skip-git-repo-check", "--sandbox", "read-only",
	"--disable", "plugins", "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false"}

func codexItems(events []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, ev := range events {
		if ev["type"] != "item.completed" {
			continue
		}
		if it, _ := ev["item"].(map[string]any); it != nil && it["type"] == typ {
			out = append(out, it)
		}
	}
	return out
}

func codexMessages(events []map[string]any) string {
	var parts []string
	for _, it := range codexItems(events, "agent_message") {
		s, _ := it["text"].(string)
		parts = append(parts, s)
	}
	return strings.Join(parts, "\n")
}

// checkCodexTurn checks the turn completed without a failure event.
func checkCodexTurn(t *testing.T, events []map[string]any) {
	t.Helper()
	for _, ev := range events {
		if ev["type"] == "turn.failed" || ev["type"] == "error" {
			t.Fatalf("codex reported %v", ev)
		}
	}
	if lastOfType(events, "turn.completed") == nil {
		t.Fatal("no turn.completed event")
	}
}

// opencode: `opencode run --format json`. It reads the key from
// LLMGATE_API_KEY ({env:LLMGATE_API_KEY} in the config connect wrote).
// OPENCODE_DISABLE_MODELS_FETCH stops the download of the models.dev
// catalogue from models.opencode.ai on every start. The update check and
// language-server downloads were not seen in `run`, but the TUI does the
// first and touching a source file the second: OPENCODE_DISABLE_AUTOUPDATE
// and OPENCODE_DISABLE_LSP_DOWNLOAD keep them off.
var opencode = &client{
	name: "opencode", key: "OPENCODE", pkg: "opencode-ai", bin: "opencode",
	env: func(e *env) []string {
		return []string{"LLMGATE_API_KEY=" + e.gateway.key, "OPENCODE_DISABLE_MODELS_FETCH=1",
			"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1"}
	},
	// 1.18.33 installs @opencode-ai/plugin into its config directory in the
	// background on every start, with no switch to stop it; the install
	// fails (logged as a warning) and the run goes on.
	allowedEgress: []string{"registry.npmjs.org:443"},
	runs: []run{
		{name: "plain", args: []string{"run", "--format", "json"}, prompt: plainPrompt,
			check: func(t *testing.T, e *env, res *result) {
				events := jsonLines(res.stdout)
				checkOpencodeRun(t, events)
				if got := opencodeText(events); !strings.Contains(got, plainAnswer(e)) {
					t.Fatalf("text parts %q do not contain the scripted %q", got, plainAnswer(e))
				}
			}},
		{name: "agent-read", args: []string{"run", "--format", "json"}, prompt: agentPrompt,
			check: func(t *testing.T, e *env, res *result) {
				events := jsonLines(res.stdout)
				checkOpencodeRun(t, events)
				sentinel := e.vars["OPENCODE_SENTINEL"]
				read := false
				for _, ev := range events {
					part, _ := ev["part"].(map[string]any)
					state, _ := part["state"].(map[string]any)
					out, _ := state["output"].(string)
					if ev["type"] == "tool_use" && part["tool"] == "read" && state["status"] == "completed" && strings.Contains(out, sentinel) {
						read = true
					}
				}
				if !read {
					t.Errorf("no completed read tool_use with %s in its output: opencode did not read the file", sentinel)
				}
				gatewaySawToolResult(t, res, sentinel)
				if got := opencodeText(events); !strings.Contains(got, agentAnswer(e, "opencode")) {
					t.Fatalf("text parts %q do not contain the scripted %q", got, agentAnswer(e, "opencode"))
				}
			}},
	},
}

func opencodeText(events []map[string]any) string {
	var parts []string
	for _, ev := range events {
		part, _ := ev["part"].(map[string]any)
		if s, _ := part["text"].(string); ev["type"] == "text" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "\n")
}

// checkOpencodeRun fails on error events; opencode run exits 0 after some
// errors it prints as events.
func checkOpencodeRun(t *testing.T, events []map[string]any) {
	t.Helper()
	for _, ev := range events {
		if ev["type"] == "error" {
			t.Fatalf("opencode reported %v", ev)
		}
	}
	if len(events) == 0 {
		t.Fatal("no JSON events on stdout")
	}
}
