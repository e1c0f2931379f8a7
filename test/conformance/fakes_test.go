package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// The scripted upstreams choose their behaviour by the upstream model name,
// so one fake per dialect serves every scenario:
//
//	text    a short fixed answer with exact usage
//	tool    first turn: a get_weather call for Paris; second turn (the request
//	        carries the tool result): an answer quoting the result. The fake
//	        checks the history it receives and answers 400 with the reason when
//	        the call or its result was mangled, so a translation bug fails the
//	        SDK call with a message that says what was wrong.
//	tools2  the same with two parallel calls (Paris and Tokyo) whose two
//	        results must come back, each under its own call id
//	reason  reasoning (reasoning_content / a thinking block) then text
//	ratelimit  429 with Retry-After before any byte is streamed
//	image   checks that the system prompt and the last user message's text,
//	        base64 image and URL image arrived, in order, then answers
//	        imageAnswer
//	cut     a few text deltas, then the connection is dropped
//	errmid  a few text deltas, then an in-band error event
//	forced  (Anthropic fake only) tool_use blocks as tool_choice forces
//	        them, inputs built from each tool's input_schema, one call or two
//	        in parallel; text quoting the tool results otherwise (forcedTurn)
//
// Both fakes also check the gateway's credentials and answer 401 otherwise.

const (
	upstreamKey  = "sk-upstream-secret"
	toolResult   = `{"city":"Paris","temperature":"18C","sky":"clear"}`
	toolResult2  = `{"city":"Tokyo","temperature":"22C","sky":"rain"}`
	toolAnswer   = "It is 18C and clear in Paris."
	tools2Answer = "Paris: 18C and clear; Tokyo: 22C and rain."
	textAnswer   = "Hello from the scripted upstream."
	thinkingText = "The user greets me; I should greet back."
	imageAnswer  = "One red pixel and one cat."
	systemPrompt = "You are a terse assistant."
	// imagePNG is a 1x1 red PNG.
	imagePNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	imageURL = "https://example.com/cat.png"
	// Fixed usage of the scripted answers.
	fakePromptTokens     = 21
	fakeCompletionTokens = 7
)

// scriptedCall is one tool call a fake issues and the result it expects.
type scriptedCall struct {
	id, city, result string
}

// scriptedCalls returns the calls of the tool scenarios, with ids in the
// style of the dialect (prefix "call_w" or "toolu_w").
func scriptedCalls(scenario, idPrefix string) []scriptedCall {
	calls := []scriptedCall{{idPrefix + "1", "Paris", toolResult}}
	if scenario == "tools2" {
		calls = append(calls, scriptedCall{idPrefix + "2", "Tokyo", toolResult2})
	}
	return calls
}

func (c scriptedCall) args() string { return `{"city":"` + c.city + `"}` }

// checkOpenAIImages checks the system prompt and that the last user
// message is [text, base64 image as a data: URI, URL image].
func checkOpenAIImages(body map[string]any) string {
	msgs, _ := body["messages"].([]any)
	if len(msgs) < 2 {
		return "fake: want a system and a user message, got " + mustJSON(msgs)
	}
	sys, _ := msgs[0].(map[string]any)
	if sys["role"] != "system" || !strings.Contains(textOf(sys["content"]), systemPrompt) {
		return "fake: the system prompt did not arrive as the first message: " + mustJSON(msgs[0])
	}
	last, _ := msgs[len(msgs)-1].(map[string]any)
	parts, _ := last["content"].([]any)
	if last["role"] != "user" || len(parts) != 3 {
		return "fake: want a user message with text and two images, got " + mustJSON(last)
	}
	p0, _ := parts[0].(map[string]any)
	urls := make([]string, 0, 2)
	for _, p := range parts[1:] {
		m, _ := p.(map[string]any)
		iu, _ := m["image_url"].(map[string]any)
		u, _ := iu["url"].(string)
		if m["type"] != "image_url" {
			return "fake: want image_url parts, got " + mustJSON(m)
		}
		urls = append(urls, u)
	}
	if p0["type"] != "text" || p0["text"] != "What is in these images?" || urls[0] != "data:image/png;base64,"+imagePNG || urls[1] != imageURL {
		return "fake: the text or the images came back mangled: " + mustJSON(last)
	}
	return ""
}

// upstreamLog keeps the request bodies a fake received.
type upstreamLog struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (l *upstreamLog) add(b map[string]any) {
	l.mu.Lock()
	l.bodies = append(l.bodies, b)
	l.mu.Unlock()
}

func readBody(w http.ResponseWriter, r *http.Request, log *upstreamLog) (map[string]any, bool) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		http.Error(w, `{"error":{"message":"fake: body is not JSON"}}`, http.StatusBadRequest)
		return nil, false
	}
	log.add(body)
	return body, true
}

// sseFlusher writes SSE events and flushes each one.
type sseFlusher struct {
	w http.ResponseWriter
}

func startSSE(w http.ResponseWriter) sseFlusher {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return sseFlusher{w}
}

func (s sseFlusher) event(name, data string) {
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	s.w.(http.Flusher).Flush()
}

// drop closes the connection without finishing the stream.
func (s sseFlusher) drop() {
	if hj, ok := s.w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
		}
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// textOf flattens a content value (a string or a list of text blocks).
func textOf(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case []any:
		var sb strings.Builder
		for _, p := range c {
			if m, ok := p.(map[string]any); ok {
				if s, ok := m["text"].(string); ok {
					sb.WriteString(s)
				}
			}
		}
		return sb.String()
	}
	return ""
}

// ---- OpenAI chat completions fake ----

type openaiFake struct {
	*httptest.Server
	log upstreamLog
}

func newOpenAIFake(t *testing.T) *openaiFake {
	f := &openaiFake{}
	f.Server = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.Close)
	return f
}

func openaiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "BadRequestError", "code": status}})
	_, _ = w.Write(b)
}

// checkOpenAIToolTurn inspects a tool scenario request: it reports whether
// the history carries the results of every call, or why the history is
// malformed (the assistant message must carry the calls with their ids and
// arguments, followed by one tool message per call).
func checkOpenAIToolTurn(body map[string]any, want []scriptedCall) (second bool, problem string) {
	tools, _ := body["tools"].([]any)
	if len(tools) != 1 || !strings.Contains(mustJSON(tools[0]), `"get_weather"`) || !strings.Contains(mustJSON(tools[0]), `"city"`) {
		return false, "fake: want exactly one function tool get_weather with a city parameter, got " + mustJSON(body["tools"])
	}
	msgs, _ := body["messages"].([]any)
	for i, m := range msgs {
		msg, _ := m.(map[string]any)
		calls, _ := msg["tool_calls"].([]any)
		if msg["role"] != "assistant" || len(calls) == 0 {
			continue
		}
		if len(calls) != len(want) {
			return false, fmt.Sprintf("fake: the assistant message carries %d tool calls, want %d: %s", len(calls), len(want), mustJSON(msg))
		}
		for j, w := range want {
			call, _ := calls[j].(map[string]any)
			fn, _ := call["function"].(map[string]any)
			args, _ := fn["arguments"].(string)
			if call["id"] != w.id || call["type"] != "function" || fn["name"] != "get_weather" || !jsonEqual(args, w.args()) {
				return false, "fake: the assistant tool call came back mangled: " + mustJSON(msg)
			}
		}
		rest := msgs[i+1:]
		if len(rest) < len(want) {
			return false, "fake: the assistant tool calls are not followed by their tool results: " + mustJSON(msgs)
		}
		for j, w := range want {
			tm, _ := rest[j].(map[string]any)
			if tm["role"] != "tool" || tm["tool_call_id"] != w.id || !jsonEqual(textOf(tm["content"]), w.result) {
				return false, fmt.Sprintf("fake: tool result %d came back mangled (want call id %s): %s", j, w.id, mustJSON(rest[j]))
			}
		}
		return true, ""
	}
	for _, m := range msgs {
		if msg, _ := m.(map[string]any); msg["role"] == "tool" {
			return false, "fake: a tool message without the assistant tool call before it: " + mustJSON(msgs)
		}
	}
	return false, ""
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (f *openaiFake) handle(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+upstreamKey {
		openaiError(w, http.StatusUnauthorized, "fake: wrong upstream key "+r.Header.Get("Authorization"))
		return
	}
	if r.URL.Path != "/v1/chat/completions" {
		openaiError(w, http.StatusNotFound, "fake: no route "+r.URL.Path)
		return
	}
	body, ok := readBody(w, r, &f.log)
	if !ok {
		return
	}
	model, _ := body["model"].(string)
	stream, _ := body["stream"].(bool)
	includeUsage := false
	if so, ok := body["stream_options"].(map[string]any); ok {
		includeUsage, _ = so["include_usage"].(bool)
	}
	var content, reasoning, finish string
	var calls []scriptedCall
	switch model {
	case "text", "cut", "errmid":
		content, finish = textAnswer, "stop"
	case "image":
		if problem := checkOpenAIImages(body); problem != "" {
			openaiError(w, http.StatusBadRequest, problem)
			return
		}
		content, finish = imageAnswer, "stop"
	case "reason":
		reasoning, content, finish = thinkingText, textAnswer, "stop"
	case "tool", "tools2":
		want := scriptedCalls(model, "call_w")
		second, problem := checkOpenAIToolTurn(body, want)
		if problem != "" {
			openaiError(w, http.StatusBadRequest, problem)
			return
		}
		switch {
		case !second:
			calls, finish = want, "tool_calls"
		case model == "tools2":
			content, finish = tools2Answer, "stop"
		default:
			content, finish = toolAnswer, "stop"
		}
	case "ratelimit":
		w.Header().Set("Retry-After", "7")
		openaiError(w, http.StatusTooManyRequests, "fake: rate limit reached for requests")
		return
	default:
		openaiError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", model))
		return
	}
	usage := map[string]any{"prompt_tokens": fakePromptTokens, "completion_tokens": fakeCompletionTokens, "total_tokens": fakePromptTokens + fakeCompletionTokens}
	if !stream {
		msg := map[string]any{"role": "assistant", "content": content}
		if reasoning != "" {
			msg["reasoning_content"] = reasoning
		}
		if len(calls) > 0 {
			msg["content"] = nil
			var tcs []any
			for _, c := range calls {
				tcs = append(tcs, map[string]any{"id": c.id, "type": "function",
					"function": map[string]any{"name": "get_weather", "arguments": c.args()}})
			}
			msg["tool_calls"] = tcs
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-fake1", "object": "chat.completion", "created": 1700000000, "model": model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}}, "usage": usage})
		return
	}
	s := startSSE(w)
	chunk := func(delta map[string]any, finish any) {
		s.event("", mustJSON(map[string]any{"id": "chatcmpl-fake2", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}}))
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	if reasoning != "" {
		half := len(reasoning) / 2
		chunk(map[string]any{"reasoning_content": reasoning[:half]}, nil)
		chunk(map[string]any{"reasoning_content": reasoning[half:]}, nil)
	}
	for i, c := range calls {
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.id, "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": ""}}}}, nil)
		for _, part := range []string{`{"city":`, ` "` + c.city + `"}`} {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": part}}}}, nil)
		}
	}
	words := strings.SplitAfter(content, " ")
	for i, wd := range words {
		if wd == "" {
			continue
		}
		chunk(map[string]any{"content": wd}, nil)
		if i == 1 && model == "cut" {
			s.drop()
			return
		}
		if i == 1 && model == "errmid" {
			s.event("", `{"error":{"message":"CUDA error: an illegal memory access was encountered","type":"InternalServerError","code":500}}`)
			s.event("", "[DONE]")
			return
		}
	}
	chunk(map[string]any{}, finish)
	if includeUsage {
		s.event("", mustJSON(map[string]any{"id": "chatcmpl-fake2", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []any{}, "usage": usage}))
	}
	s.event("", "[DONE]")
}
