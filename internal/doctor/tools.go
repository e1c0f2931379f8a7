package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// toolsNoJinja is what llama.cpp's llama-server started without --jinja
// answers a request with tools (HTTP 500), and part of what an llmgate
// gateway in front of one says.
const toolsNoJinja = "--jinja"

// checkTools sends a chat completion with one tool, as every coding agent
// (Claude Code, Codex, opencode, Cline) does with every request: a server
// that refuses tools breaks them all, while plain chat still works. It
// runs only when the plain chat completion passed, so that it reports
// tools and not the chat check's failure again.
func (d *diagnosis) checkTools(ctx context.Context) {
	c := Check{ID: "tools", Title: "tool calling"}
	defer func() { d.add(c) }()
	if chat := d.find("chat"); chat == nil || chat.Status == StatusFail || chat.Status == StatusSkip {
		c.Status, c.Detail = StatusSkip, "skipped: no chat completion to compare with"
		return
	}
	rctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	tool := map[string]any{"type": "function", "function": map[string]any{
		"name": "get_time", "description": "Returns the current time.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{}},
	}}
	req := map[string]any{"model": d.model, "max_tokens": 16, "temperature": 0, "tools": []any{tool},
		"messages": []map[string]string{{"role": "user", "content": "What time is it? Use the tool."}}}
	r := d.postChat(rctx, req)
	c.DurationMS = ms(r.dur)
	switch {
	case r.err != nil:
		c.Status, c.Detail, c.Fix = StatusFail, "POST /chat/completions with tools failed: "+shortErr(r.err), requestErrFix(r.err, d.opts.Timeout)
	case is2xx(r.status):
		answer, ok := toolAnswer(r.body)
		if !ok {
			c.Status = StatusFail
			c.Detail = fmt.Sprintf("a chat completion with a tool → HTTP %d without choices: %s", r.status, quote(string(r.body), 160))
			c.Fix = "The server (or a proxy in between) must report errors with a 4xx/5xx status and an error envelope, not HTTP 200."
			return
		}
		c.Status, c.Detail = StatusPass, "a chat completion with a tool was answered ("+answer+")"
	default:
		msg := errorMessage(r.body)
		c.Status = StatusFail
		c.Detail = fmt.Sprintf("a chat completion with a tool → HTTP %d, where the same request without one passed: %s", r.status, msg)
		if strings.Contains(msg, toolsNoJinja) {
			c.Fix = "llama.cpp's llama-server was started without --jinja: add --jinja to its command line and restart it; Claude Code, Codex, opencode and Cline send tools with every request."
		} else {
			c.Fix = "Claude Code, Codex, opencode and Cline send tools with every request and fail here: serve a model whose chat template supports tools (vLLM also needs --enable-auto-tool-choice and a --tool-call-parser; Ollama, a model with the tools capability)."
		}
	}
}

// toolAnswer says whether the model called the tool or answered in text;
// false for a body without choices (an error hidden in a 200).
func toolAnswer(body []byte) (string, bool) {
	var v struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Function struct {
						Name string `json:"name"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &v) != nil || len(v.Choices) == 0 {
		return "", false
	}
	if tc := v.Choices[0].Message.ToolCalls; len(tc) > 0 {
		return "the model called " + tc[0].Function.Name, true
	}
	return "the model answered in text, without calling it", true
}
