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
	var blocks []map[string]any // final content blocks
	stop := "end_turn"
	switch model {
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
			delta(i, map[string]any{"type": "input_json_delta", "partial_json": ""})
			delta(i, map[string]any{"type": "input_json_delta", "partial_json": `{"city": `})
			delta(i, map[string]any{"type": "input_json_delta", "partial_json": `"` + b["input"].(map[string]any)["city"].(string) + `"}`})
		}
		s.event("content_block_stop", mustJSON(map[string]any{"type": "content_block_stop", "index": i}))
	}
	s.event("message_delta", mustJSON(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": fakeCompletionTokens}}))
	s.event("message_stop", `{"type":"message_stop"}`)
}
