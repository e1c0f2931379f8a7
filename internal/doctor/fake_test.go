package doctor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"llmgate/internal/sse"
)

// fakeServer is a faithful small OpenAI + Anthropic compatible server whose
// faults are switched on one at a time to reproduce client-visible failures.
type fakeServer struct {
	key    string // required key; "" accepts any request
	models []string
	// Faults.
	errorBody200 bool // chat answers 200 with an error envelope
	noUsage      bool // streams ignore stream_options.include_usage
	noDone       bool // streams end without data: [DONE]
	noAnthropic  bool // no /v1/messages
	noResponses  bool // no /v1/responses
	noStartUsage bool // Anthropic message_start without usage
	xAPIKeyOnly  bool // OpenAI endpoints accept only x-api-key
	forbidden    bool // every authenticated request gets 403
	thinkOnly    bool // a whole chat answer is all reasoning_content, cut at max_tokens
	newOpenAI    bool // chat refuses max_tokens and takes max_completion_tokens, as OpenAI's newer models
	// toolsRefused, when set, is the status of a chat request with tools,
	// answered with toolsMessage (llama-server without --jinja: 500).
	toolsRefused int
	toolsMessage string
	// serverTiming, when set, is the Server-Timing header of chat answers
	// (as an llmgate gateway sends one).
	serverTiming string
	// realm is the WWW-Authenticate realm of a refused key ("fake" when
	// empty; an llmgate gateway says "llmgate"); server, when set, the
	// Server header of every answer (llama-server says "llama.cpp").
	realm, server string
}

func newFake() *fakeServer {
	return &fakeServer{key: "sk-lg-test-0123456789abcdef", models: []string{"qwen2.5-7b-instruct", "llama-3.1-8b-instruct"}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func openaiErr(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code, "param": nil}})
}

func (f *fakeServer) authOpenAI(w http.ResponseWriter, r *http.Request) bool {
	if f.key == "" {
		return true
	}
	ok := r.Header.Get("Authorization") == "Bearer "+f.key
	if f.xAPIKeyOnly {
		ok = r.Header.Get("x-api-key") == f.key
	}
	if !ok {
		realm := f.realm
		if realm == "" {
			realm = "fake"
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
		// Like some real servers, echo the rejected credential.
		openaiErr(w, http.StatusUnauthorized, "authentication_error", "invalid_api_key", "Incorrect API key provided: "+r.Header.Get("Authorization"))
		return false
	}
	if f.forbidden {
		openaiErr(w, http.StatusForbidden, "permission_error", "forbidden", "This key may not use this endpoint.")
		return false
	}
	return true
}

func (f *fakeServer) hasModel(m string) bool {
	for _, x := range f.models {
		if x == m {
			return true
		}
	}
	return false
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.server != "" {
		w.Header().Set("Server", f.server)
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		if !f.authOpenAI(w, r) {
			return
		}
		data := []map[string]any{}
		for _, m := range f.models {
			data = append(data, map[string]any{"id": m, "object": "model", "created": 1700000000, "owned_by": "fake"})
		}
		writeJSON(w, 200, map[string]any{"object": "list", "data": data})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		if f.serverTiming != "" {
			w.Header().Set("Server-Timing", f.serverTiming)
		}
		if f.authOpenAI(w, r) {
			f.chat(w, r)
		}
	case r.Method == http.MethodPost && r.URL.Path == "/v1/responses" && !f.noResponses:
		if f.authOpenAI(w, r) {
			f.responses(w, r)
		}
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages" && !f.noAnthropic:
		f.messages(w, r)
	default:
		openaiErr(w, http.StatusNotFound, "not_found_error", "not_found", "no route for "+r.Method+" "+r.URL.Path)
	}
}

type fakeChatReq struct {
	Model         string `json:"model"`
	MaxTokens     int    `json:"max_tokens"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools               []json.RawMessage `json:"tools"`
	MaxCompletionTokens int               `json:"max_completion_tokens"`
}

func (f *fakeServer) chat(w http.ResponseWriter, r *http.Request) {
	var req fakeChatReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		openaiErr(w, 400, "invalid_request_error", "bad_json", "invalid JSON body: "+err.Error())
		return
	}
	if !f.hasModel(req.Model) {
		openaiErr(w, 404, "invalid_request_error", "model_not_found", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	if f.newOpenAI && req.MaxTokens > 0 {
		openaiErr(w, 400, "invalid_request_error", "unsupported_parameter",
			"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.")
		return
	}
	if f.newOpenAI {
		req.MaxTokens = req.MaxCompletionTokens
	}
	if f.toolsRefused != 0 && len(req.Tools) > 0 {
		openaiErr(w, f.toolsRefused, "server_error", "", f.toolsMessage)
		return
	}
	if f.errorBody200 {
		writeJSON(w, 200, map[string]any{"error": map[string]any{"message": "upstream overloaded, try again", "type": "server_error"}})
		return
	}
	n := min(max(req.MaxTokens, 1), 8)
	if !req.Stream && f.thinkOnly {
		writeJSON(w, 200, map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": nil,
				"reasoning_content": "Okay, the user says hi. I should"}, "finish_reason": "length"}},
			"usage": map[string]int{"prompt_tokens": 9, "completion_tokens": 16, "total_tokens": 25},
		})
		return
	}
	if !req.Stream {
		writeJSON(w, 200, map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": "OK"}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
		})
		return
	}
	sse.SetHeaders(w.Header())
	sw := sse.NewWriter(w)
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}}})
		_ = sw.WriteData(b)
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for i := 1; i <= n; i++ {
		chunk(map[string]any{"content": fmt.Sprintf("%d ", i)}, nil)
	}
	chunk(map[string]any{}, "length")
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage && !f.noUsage {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": req.Model,
			"choices": []any{}, "usage": map[string]int{"prompt_tokens": 12, "completion_tokens": n, "total_tokens": 12 + n}})
		_ = sw.WriteData(b)
	}
	if !f.noDone {
		_ = sw.WriteDone()
	}
}

func anthropicErr(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

func (f *fakeServer) messages(w http.ResponseWriter, r *http.Request) {
	if f.key != "" && r.Header.Get("x-api-key") != f.key && r.Header.Get("Authorization") != "Bearer "+f.key {
		anthropicErr(w, 401, "authentication_error", "invalid x-api-key")
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		anthropicErr(w, 400, "invalid_request_error", "anthropic-version header is required")
		return
	}
	var req fakeChatReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.MaxTokens <= 0 {
		anthropicErr(w, 400, "invalid_request_error", "max_tokens: field required")
		return
	}
	if !f.hasModel(req.Model) {
		anthropicErr(w, 404, "not_found_error", "model: "+req.Model)
		return
	}
	if !req.Stream {
		writeJSON(w, 200, map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "model": req.Model,
			"content": []map[string]any{{"type": "text", "text": "OK"}}, "stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]int{"input_tokens": 9, "output_tokens": 1}})
		return
	}
	sse.SetHeaders(w.Header())
	sw := sse.NewWriter(w)
	ev := func(name string, v any) {
		b, _ := json.Marshal(v)
		_ = sw.WriteEvent(name, b)
	}
	msg := map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "usage": map[string]int{"input_tokens": 9, "output_tokens": 1}}
	if f.noStartUsage {
		delete(msg, "usage")
	}
	ev("message_start", map[string]any{"type": "message_start", "message": msg})
	ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	ev("ping", map[string]any{"type": "ping"})
	for _, t := range strings.Fields("O K") {
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": t}})
	}
	ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]int{"output_tokens": 2}})
	ev("message_stop", map[string]any{"type": "message_stop"})
}

func (f *fakeServer) responses(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		openaiErr(w, 400, "invalid_request_error", "bad_json", "invalid JSON body")
		return
	}
	if !f.hasModel(req.Model) {
		openaiErr(w, 404, "invalid_request_error", "model_not_found", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	writeJSON(w, 200, map[string]any{"id": "resp_1", "object": "response", "created_at": 1700000000, "status": "completed", "model": req.Model,
		"output": []map[string]any{{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
			"content": []map[string]any{{"type": "output_text", "text": "OK", "annotations": []any{}}}}},
		"usage": map[string]int{"input_tokens": 9, "output_tokens": 1, "total_tokens": 10}})
}
