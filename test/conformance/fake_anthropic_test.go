package conformance

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// anthropicFake is a scripted Anthropic Messages API upstream (see
// fakes_test.go for the scenarios).
type anthropicFake struct {
	*httptest.Server
	log upstreamLog
}

func newAnthropicFake(t *testing.T) *anthropicFake {
	f := &anthropicFake{}
	f.Server = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.Close)
	return f
}

func anthropicError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(mustJSON(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})))
}

// blocksOf returns a message's content as blocks (a string becomes one
// text block).
func blocksOf(v any) []map[string]any {
	switch c := v.(type) {
	case string:
		return []map[string]any{{"type": "text", "text": c}}
	case []any:
		out := make([]map[string]any, 0, len(c))
		for _, b := range c {
			if m, ok := b.(map[string]any); ok {
				out = append(out, m)
			}
		}
		return out
	}
	return nil
}

// checkAnthropicToolTurn is checkOpenAIToolTurn for the Messages dialect:
// an assistant message with the tool_use blocks, then ONE user message with
// a tool_result block per call (the Messages API requires all results of a
// turn in the next user message).
func checkAnthropicToolTurn(body map[string]any, want []scriptedCall) (second bool, problem string) {
	tools, _ := body["tools"].([]any)
	if len(tools) != 1 {
		return false, "fake: want exactly one tool, got " + mustJSON(body["tools"])
	}
	tool, _ := tools[0].(map[string]any)
	if tool["name"] != "get_weather" || !strings.Contains(mustJSON(tool["input_schema"]), `"city"`) {
		return false, "fake: want tool get_weather with an input_schema naming city, got " + mustJSON(tool)
	}
	msgs, _ := body["messages"].([]any)
	for i, m := range msgs {
		msg, _ := m.(map[string]any)
		var uses []map[string]any
		for _, b := range blocksOf(msg["content"]) {
			if b["type"] == "tool_use" {
				uses = append(uses, b)
			}
		}
		if len(uses) == 0 {
			for _, b := range blocksOf(msg["content"]) {
				if b["type"] == "tool_result" {
					return false, "fake: a tool_result without the tool_use before it: " + mustJSON(msgs)
				}
			}
			continue
		}
		if msg["role"] != "assistant" || len(uses) != len(want) {
			return false, fmt.Sprintf("fake: want %d tool_use blocks in an assistant message, got %s", len(want), mustJSON(msg))
		}
		for j, w := range want {
			b := uses[j]
			if b["id"] != w.id || b["name"] != "get_weather" || !jsonEqual(mustJSON(b["input"]), w.args()) {
				return false, "fake: the tool_use block came back mangled: " + mustJSON(msg)
			}
		}
		if i+1 >= len(msgs) {
			return false, "fake: the tool_use is not followed by a tool_result: " + mustJSON(msgs)
		}
		next, _ := msgs[i+1].(map[string]any)
		var results []map[string]any
		for _, b := range blocksOf(next["content"]) {
			if b["type"] == "tool_result" {
				results = append(results, b)
			}
		}
		if next["role"] != "user" || len(results) != len(want) {
			return false, fmt.Sprintf("fake: want %d tool_result blocks in the next user message, got %s", len(want), mustJSON(next))
		}
		for j, w := range want {
			b := results[j]
			if b["tool_use_id"] != w.id || !jsonEqual(textOf(b["content"]), w.result) || b["is_error"] == true {
				return false, "fake: the tool_result came back mangled: " + mustJSON(next)
			}
		}
		return true, ""
	}
	return false, ""
}

// checkAnthropicImages is checkOpenAIImages for the Messages dialect: the
// system prompt in "system", images as base64 and url sources.
func checkAnthropicImages(body map[string]any) string {
	if !strings.Contains(textOf(body["system"]), systemPrompt) {
		return "fake: the system prompt did not arrive in system: " + mustJSON(body["system"])
	}
	msgs, _ := body["messages"].([]any)
	last, _ := msgs[len(msgs)-1].(map[string]any)
	blocks := blocksOf(last["content"])
	if last["role"] != "user" || len(blocks) != 3 {
		return "fake: want a user message with text and two images, got " + mustJSON(last)
	}
	src1, _ := blocks[1]["source"].(map[string]any)
	src2, _ := blocks[2]["source"].(map[string]any)
	if blocks[0]["type"] != "text" || blocks[0]["text"] != "What is in these images?" ||
		blocks[1]["type"] != "image" || src1["type"] != "base64" || src1["media_type"] != "image/png" || src1["data"] != imagePNG ||
		blocks[2]["type"] != "image" || src2["type"] != "url" || src2["url"] != imageURL {
		return "fake: the text or the images came back mangled: " + mustJSON(last)
	}
	return ""
}

func (f *anthropicFake) handle(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Api-Key") != upstreamKey {
		anthropicError(w, http.StatusUnauthorized, "authentication_error", "fake: invalid x-api-key")
		return
	}
	if r.Header.Get("Anthropic-Version") == "" {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "fake: anthropic-version header is required")
		return
	}
	body, ok := readBody(w, r, &f.log)
	if !ok {
		return
	}
	model, _ := body["model"].(string)
	if r.URL.Path == "/v1/messages/count_tokens" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"input_tokens":%d}`, fakePromptTokens)
		return
	}
	if r.URL.Path != "/v1/messages" {
		anthropicError(w, http.StatusNotFound, "not_found_error", "fake: no route "+r.URL.Path)
		return
	}
	if mt, _ := body["max_tokens"].(float64); mt <= 0 {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "fake: max_tokens: Field required")
		return
	}
	stream, _ := body["stream"].(bool)
	var blocks []map[string]any    // final content blocks
	var pieces map[string][]string // input_json_delta pieces by tool_use id, when not the scripted city split
	stop := "end_turn"
	switch model {
	case "forced":
		var problem string
		if blocks, stop, pieces, problem = forcedTurn(body); problem != "" {
			anthropicError(w, http.StatusBadRequest, "invalid_request_error", problem)
			return
		}
	case "text", "cut", "errmid":
		blocks = []map[string]any{{"type": "text", "text": textAnswer}}
	case "image":
		if problem := checkAnthropicImages(body); problem != "" {
			anthropicError(w, http.StatusBadRequest, "invalid_request_error", problem)
			return
		}
		blocks = []map[string]any{{"type": "text", "text": imageAnswer}}
	case "reason":
		blocks = []map[string]any{{"type": "thinking", "thinking": thinkingText, "signature": "c2lnbmF0dXJl"}, {"type": "text", "text": textAnswer}}
	case "tool", "tools2":
		want := scriptedCalls(model, "toolu_w")
		second, problem := checkAnthropicToolTurn(body, want)
		if problem != "" {
			anthropicError(w, http.StatusBadRequest, "invalid_request_error", problem)
			return
		}
		switch {
		case !second:
			blocks = []map[string]any{{"type": "text", "text": "Let me check."}}
			for _, c := range want {
				blocks = append(blocks, map[string]any{"type": "tool_use", "id": c.id, "name": "get_weather", "input": map[string]any{"city": c.city}})
			}
			stop = "tool_use"
		case model == "tools2":
			blocks = []map[string]any{{"type": "text", "text": tools2Answer}}
		default:
			blocks = []map[string]any{{"type": "text", "text": toolAnswer}}
		}
	case "ratelimit":
		w.Header().Set("Retry-After", "7")
		anthropicError(w, http.StatusTooManyRequests, "rate_limit_error", "fake: rate limit exceeded")
		return
	default:
		anthropicError(w, http.StatusNotFound, "not_found_error", "model: "+model)
		return
	}
	usage := map[string]any{"input_tokens": fakePromptTokens, "output_tokens": fakeCompletionTokens,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(mustJSON(map[string]any{"id": "msg_fake1", "type": "message", "role": "assistant", "model": model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": usage})))
		return
	}
	s := startSSE(w)
	s.event("message_start", mustJSON(map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_fake2", "type": "message",
		"role": "assistant", "model": model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": fakePromptTokens, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}))
	s.event("ping", `{"type": "ping"}`)
	delta := func(i int, d map[string]any) {
		s.event("content_block_delta", mustJSON(map[string]any{"type": "content_block_delta", "index": i, "delta": d}))
	}
	for i, b := range blocks {
		switch b["type"] {
		case "text":
			s.event("content_block_start", mustJSON(map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}}))
			words := strings.SplitAfter(b["text"].(string), " ")
			for j, wd := range words {
				delta(i, map[string]any{"type": "text_delta", "text": wd})
				if j == 1 && model == "cut" {
					s.drop()
					return
				}
				if j == 1 && model == "errmid" {
					s.event("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
					return
				}
			}
		case "thinking":
			s.event("content_block_start", mustJSON(map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}}))
			t := b["thinking"].(string)
			delta(i, map[string]any{"type": "thinking_delta", "thinking": t[:len(t)/2]})
			delta(i, map[string]any{"type": "thinking_delta", "thinking": t[len(t)/2:]})
			delta(i, map[string]any{"type": "signature_delta", "signature": b["signature"]})
		case "tool_use":
			s.event("content_block_start", mustJSON(map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}}))
			parts, ok := pieces[b["id"].(string)]
			if !ok {
				parts = []string{"", `{"city": `, `"` + b["input"].(map[string]any)["city"].(string) + `"}`}
			}
			for _, p := range parts {
				delta(i, map[string]any{"type": "input_json_delta", "partial_json": p})
			}
		}
		s.event("content_block_stop", mustJSON(map[string]any{"type": "content_block_stop", "index": i}))
	}
	s.event("message_delta", mustJSON(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": fakeCompletionTokens}}))
	s.event("message_stop", `{"type":"message_stop"}`)
}

// forcedTurn answers the "forced" scenario as Anthropic's API answers a
// request that offers tools. With tool_choice {"type":"any"} or
// {"type":"tool","name":…} it calls a tool: the named one, or the first
// offered; two calls when the choice is "any" and parallel tool use is not
// disabled. Each call's input is built from the tool's input_schema
// (forcedInput), and streamed in three input_json_delta pieces. Without a
// forcing tool_choice it answers in text quoting the tool results of the
// last user message (forcedAnswer), so a test can check that they arrived.
// The history is checked as the real API checks it (every tool_use answered
// by a tool_result first in the next user message, no empty text blocks),
// and every tool_use that comes back must be the one this fake issued:
// same id, name and input.
func forcedTurn(body map[string]any) (blocks []map[string]any, stop string, pieces map[string][]string, problem string) {
	toolList, _ := body["tools"].([]any)
	if len(toolList) == 0 {
		return nil, "", nil, "fake: the forced scenario needs tools, got none"
	}
	schemas := map[string]map[string]any{}
	var names []string
	for i, tl := range toolList {
		tool, _ := tl.(map[string]any)
		name, _ := tool["name"].(string)
		schema, _ := tool["input_schema"].(map[string]any)
		if name == "" || schema == nil || schema["type"] != "object" {
			return nil, "", nil, fmt.Sprintf("fake: tools.%d: want a name and an input_schema of type object, got %s", i, mustJSON(tool))
		}
		schemas[name] = schema
		names = append(names, name)
	}
	msgs, _ := body["messages"].([]any)
	for i, m := range msgs {
		msg, _ := m.(map[string]any)
		var ids []string
		for j, b := range blocksOf(msg["content"]) {
			if b["type"] == "text" && b["text"] == "" {
				return nil, "", nil, fmt.Sprintf("fake: messages.%d.content.%d: text content blocks must be non-empty", i, j)
			}
			if b["type"] != "tool_use" {
				continue
			}
			id, _ := b["id"].(string)
			name, _ := b["name"].(string)
			var k int
			if _, err := fmt.Sscanf(id, "toolu_f%d", &k); err != nil || k < 1 || schemas[name] == nil {
				return nil, "", nil, fmt.Sprintf("fake: messages.%d.content.%d: a tool_use this fake did not issue: %s", i, j, mustJSON(b))
			}
			want, err := forcedInput(schemas[name], k-1)
			if err != nil || !jsonEqual(mustJSON(b["input"]), mustJSON(want)) {
				return nil, "", nil, fmt.Sprintf("fake: messages.%d.content.%d: the tool_use input came back mangled: %s, issued %s", i, j, mustJSON(b), mustJSON(want))
			}
			ids = append(ids, id)
		}
		if len(ids) == 0 {
			continue
		}
		if msg["role"] != "assistant" {
			return nil, "", nil, fmt.Sprintf("fake: messages.%d: tool_use blocks in a %v message", i, msg["role"])
		}
		if i+1 >= len(msgs) {
			return nil, "", nil, fmt.Sprintf("fake: messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %v", i, ids)
		}
		next, _ := msgs[i+1].(map[string]any)
		nb := blocksOf(next["content"])
		if next["role"] != "user" || len(nb) < len(ids) {
			return nil, "", nil, fmt.Sprintf("fake: messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %v; next %s", i, ids, mustJSON(next))
		}
		for j, id := range ids {
			// The results come first in the user message, in the order of the calls.
			if nb[j]["type"] != "tool_result" || nb[j]["tool_use_id"] != id || textOf(nb[j]["content"]) == "" || nb[j]["is_error"] == true {
				return nil, "", nil, fmt.Sprintf("fake: messages.%d.content.%d: want the tool_result of %s, got %s", i+1, j, id, mustJSON(nb[j]))
			}
		}
	}
	for i, m := range msgs {
		msg, _ := m.(map[string]any)
		for j, b := range blocksOf(msg["content"]) {
			if b["type"] != "tool_result" {
				continue
			}
			issued := false
			if i > 0 {
				prev, _ := msgs[i-1].(map[string]any)
				for _, pb := range blocksOf(prev["content"]) {
					issued = issued || (pb["type"] == "tool_use" && pb["id"] == b["tool_use_id"])
				}
			}
			if !issued {
				return nil, "", nil, fmt.Sprintf("fake: messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %v", i, j, b["tool_use_id"])
			}
		}
	}
	choice, _ := body["tool_choice"].(map[string]any)
	n, tool := 0, names[0]
	switch choice["type"] {
	case "any":
		n = 2
		if choice["disable_parallel_tool_use"] == true {
			n = 1
		}
	case "tool":
		tool, _ = choice["name"].(string)
		if schemas[tool] == nil {
			return nil, "", nil, fmt.Sprintf("fake: tool_choice.name: tool %q is not among the tools %v", tool, names)
		}
		n = 1
	}
	if n == 0 {
		last, _ := msgs[len(msgs)-1].(map[string]any)
		var results []string
		for _, b := range blocksOf(last["content"]) {
			if b["type"] == "tool_result" {
				results = append(results, textOf(b["content"]))
			}
		}
		return []map[string]any{{"type": "text", "text": forcedAnswer(results)}}, "end_turn", nil, ""
	}
	pieces = map[string][]string{}
	for k := range n {
		input, err := forcedInput(schemas[tool], k)
		if err != nil {
			return nil, "", nil, "fake: " + err.Error()
		}
		id := fmt.Sprintf("toolu_f%d", k+1)
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": id, "name": tool, "input": input})
		js := mustJSON(input)
		pieces[id] = []string{"", js[:len(js)/3], js[len(js)/3 : 2*len(js)/3], js[2*len(js)/3:]}
	}
	return blocks, "tool_use", pieces, ""
}

// forcedInput builds the input of the k-th call (from 0) from a tool's
// input_schema: every required property, an enum's (k mod n)-th value, a
// city name for strings, k+1 for numbers. Schemas beyond that are refused,
// so a test that needs more extends this fake rather than passing silently.
func forcedInput(schema map[string]any, k int) (map[string]any, error) {
	props, _ := schema["properties"].(map[string]any)
	required, _ := schema["required"].([]any)
	cities := []string{"Paris", "Tokyo", "Lima"}
	input := map[string]any{}
	for _, r := range required {
		name, _ := r.(string)
		p, _ := props[name].(map[string]any)
		enum, _ := p["enum"].([]any)
		switch {
		case len(enum) > 0:
			input[name] = enum[k%len(enum)]
		case p["type"] == "string":
			input[name] = cities[k%len(cities)]
		case p["type"] == "integer" || p["type"] == "number":
			input[name] = k + 1
		default:
			return nil, fmt.Errorf("no input for property %q of schema %s", name, mustJSON(schema))
		}
	}
	return input, nil
}

// forcedAnswer is the forced scenario's text answer to tool results.
func forcedAnswer(results []string) string {
	if len(results) == 0 {
		return "No tool result to answer."
	}
	return "Tool results: " + strings.Join(results, " | ")
}
