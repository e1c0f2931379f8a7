//go:build unix

package agents

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// describe renders one exchange as the few lines the report needs: the
// endpoint, the headers that select API behaviour, every top-level body
// field (long ones summarised), and the error body of a failed request.
func describe(ex exchange) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %s %s -> %d", ex.Seq, ex.Time.Format("15:04:05.000"), ex.Method, ex.URL, ex.Status)
	if ex.Err != "" {
		fmt.Fprintf(&b, " (proxy error: %s)", ex.Err)
	}
	for _, h := range []string{"Anthropic-Version", "Anthropic-Beta", "User-Agent", "Openai-Beta", "Originator"} {
		if v := ex.Header[h]; v != "" {
			fmt.Fprintf(&b, "\n    %s: %s", h, v)
		}
	}
	var body map[string]json.RawMessage
	if len(ex.Body) > 0 && json.Unmarshal(ex.Body, &body) == nil {
		keys := make([]string, 0, len(body))
		for k := range body {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "\n    body (%d bytes): %s", len(ex.Body), strings.Join(keys, ","))
		for _, k := range keys {
			if s := field(k, body[k]); s != "" {
				fmt.Fprintf(&b, "\n      %s = %s", k, s)
			}
		}
	} else if ex.RawBody != "" {
		fmt.Fprintf(&b, "\n    body (not JSON, %d bytes)", len(ex.RawBody))
	}
	if ex.Status >= 400 || ex.Status == 0 {
		fmt.Fprintf(&b, "\n    response: %s", clip(ex.RespBody, 600))
	}
	return b.String()
}

// field summarises one top-level request field.
func field(name string, raw json.RawMessage) string {
	switch name {
	case "messages", "input":
		return items(raw)
	case "tools":
		return tools(raw)
	case "system", "instructions":
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return fmt.Sprintf("string, %d chars", len(s))
		}
		var blocks []map[string]json.RawMessage
		if json.Unmarshal(raw, &blocks) == nil {
			cached := 0
			for _, bl := range blocks {
				if _, ok := bl["cache_control"]; ok {
					cached++
				}
			}
			return fmt.Sprintf("%d blocks, %d with cache_control", len(blocks), cached)
		}
	case "metadata", "client_metadata", "prompt_cache_key":
		return "(present)"
	}
	return clip(string(raw), 300)
}

// items lists the roles and content kinds of chat messages, Anthropic
// messages or Responses input items, e.g. "user[text], system[text+cache],
// assistant[tool_use:Read], user[tool_result]".
func items(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return fmt.Sprintf("string, %d chars", len(s))
	}
	var list []map[string]json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return clip(string(raw), 200)
	}
	var out []string
	for _, m := range list {
		role, typ := str(m["role"]), str(m["type"])
		label := role
		if label == "" {
			label = typ
		} else if typ != "" && typ != "message" {
			label = typ + ":" + role
		}
		var kinds []string
		var parts []map[string]json.RawMessage
		if json.Unmarshal(m["content"], &parts) == nil {
			for _, p := range parts {
				k := str(p["type"])
				if n := str(p["name"]); n != "" {
					k += ":" + n
				}
				if _, ok := p["cache_control"]; ok {
					k += "+cache"
				}
				kinds = append(kinds, k)
			}
		} else if len(m["content"]) > 0 && string(m["content"]) != "null" {
			kinds = append(kinds, "string")
		}
		var calls []map[string]json.RawMessage
		if json.Unmarshal(m["tool_calls"], &calls) == nil {
			for _, c := range calls {
				var fn map[string]json.RawMessage
				_ = json.Unmarshal(c["function"], &fn)
				kinds = append(kinds, "tool_call:"+str(fn["name"]))
			}
		}
		if n := str(m["name"]); n != "" && role == "" {
			kinds = append(kinds, n)
		}
		if len(kinds) > 0 {
			label += "[" + strings.Join(kinds, ",") + "]"
		}
		out = append(out, label)
	}
	return fmt.Sprintf("%d: %s", len(list), strings.Join(out, ", "))
}

// tools lists tool names, with the type when it is not a plain function.
func tools(raw json.RawMessage) string {
	var list []map[string]json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return clip(string(raw), 200)
	}
	var names []string
	for _, t := range list {
		name, typ := str(t["name"]), str(t["type"])
		if name == "" {
			var fn map[string]json.RawMessage
			if json.Unmarshal(t["function"], &fn) == nil {
				name = str(fn["name"])
			}
		}
		switch {
		case name == "":
			name = typ
		case typ != "" && typ != "function" && typ != "custom":
			name += "(" + typ + ")"
		}
		if _, ok := t["defer_loading"]; ok {
			name += "(defer_loading)"
		}
		names = append(names, name)
	}
	return fmt.Sprintf("%d: %s", len(list), strings.Join(names, ","))
}

// toolResults returns the text of every tool result in a request body of
// any of the three dialects: Anthropic tool_result blocks, Responses
// function_call_output items and chat "tool" messages.
func toolResults(body json.RawMessage) []string {
	var req struct {
		Messages []map[string]json.RawMessage `json:"messages"`
		Input    json.RawMessage              `json:"input"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	var out []string
	for _, m := range req.Messages {
		if str(m["role"]) == "tool" { // chat completions
			out = append(out, text(m["content"]))
			continue
		}
		var parts []map[string]json.RawMessage
		if json.Unmarshal(m["content"], &parts) == nil { // Anthropic messages
			for _, p := range parts {
				if str(p["type"]) == "tool_result" {
					out = append(out, text(p["content"]))
				}
			}
		}
	}
	var input []map[string]json.RawMessage
	if json.Unmarshal(req.Input, &input) == nil { // Responses
		for _, it := range input {
			if t := str(it["type"]); t == "function_call_output" || t == "custom_tool_call_output" {
				out = append(out, text(it["output"]))
			}
		}
	}
	return out
}

// text flattens a content value: a string, or a list of parts with text.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []map[string]json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(str(p["text"]))
	}
	return b.String()
}

func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + fmt.Sprintf("…(%d bytes)", len(s))
	}
	return s
}
