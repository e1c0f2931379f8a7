package mcpserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/api/openai"
)

// fakeGateway is an httptest upstream that behaves like an OpenAI-compatible
// gateway: bearer-key auth, GET /v1/models, POST /v1/chat/completions with
// SSE streaming (a role chunk, one chunk per word, a finish chunk, a usage
// chunk when include_usage is asked, then [DONE]) and OpenAI error
// envelopes. Special model names switch on the misbehaviours the tools
// must explain.
type fakeGateway struct {
	*httptest.Server
	key    string
	models []string
	// tokenGap is the pause between streamed chunks, so TTFT and tokens/s
	// are measurable rather than zero.
	tokenGap time.Duration
	// rejectStreamOptions makes the gateway answer 400 to stream_options,
	// as some OpenAI-compatible servers do.
	rejectStreamOptions bool
	// ignoreStream makes the gateway answer every chat with one JSON body.
	ignoreStream bool
	// rejectStream makes the gateway answer 400 to any streaming request.
	rejectStream bool
	// barrier, when set, holds chat requests for the models it names until
	// all of them have arrived: proof that compare runs them concurrently.
	barrier *barrier

	// cancelled receives when a request to the "slow" model is abandoned
	// by the client before its answer.
	cancelled chan struct{}
	// arrived receives when a chat request has been recorded (dropped
	// when nobody listens and its buffer is full).
	arrived chan struct{}

	mu       sync.Mutex
	requests []openai.ChatCompletionRequest
	auth     []string
}

func newFakeGateway(t testing.TB) *fakeGateway {
	t.Helper()
	g := &fakeGateway{key: "sk-lg-good", models: []string{"model-a", "model-b", "model-c"}, tokenGap: 2 * time.Millisecond,
		cancelled: make(chan struct{}, 16), arrived: make(chan struct{}, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", g.handleModels)
	mux.HandleFunc("POST /v1/chat/completions", g.handleChat)
	g.Server = httptest.NewServer(mux)
	t.Cleanup(g.Close)
	return g
}

func (g *fakeGateway) chatRequests() []openai.ChatCompletionRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]openai.ChatCompletionRequest(nil), g.requests...)
}

func (g *fakeGateway) authHeaders() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.auth...)
}

func writeEnvelope(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code, "param": nil}})
}

func (g *fakeGateway) authorized(w http.ResponseWriter, r *http.Request) bool {
	got := r.Header.Get("Authorization")
	g.mu.Lock()
	g.auth = append(g.auth, got)
	g.mu.Unlock()
	if got != "Bearer "+g.key {
		writeEnvelope(w, http.StatusUnauthorized, "authentication_error", "invalid_api_key", "invalid API key: the key is unknown or revoked")
		return false
	}
	return true
}

func (g *fakeGateway) handleModels(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	list := openai.ModelList{Object: "list"}
	for _, m := range g.models {
		list.Data = append(list.Data, openai.Model{ID: m, Object: "model", Created: 1, OwnedBy: "llmgate", MaxModelLen: 8192})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

// answerFor is the deterministic answer of every fake model.
func answerFor(model, prompt string) string { return model + " says: " + prompt }

func countWords(msgs []openai.ChatMessage) int {
	n := 0
	for _, m := range msgs {
		n += len(strings.Fields(m.Content.String()))
	}
	return n
}

func (g *fakeGateway) handleChat(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(w, r) {
		return
	}
	var req openai.ChatCompletionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeEnvelope(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "the body is not valid JSON: "+err.Error())
		return
	}
	g.mu.Lock()
	g.requests = append(g.requests, req)
	g.mu.Unlock()
	select {
	case g.arrived <- struct{}{}:
	default:
	}
	if g.barrier != nil {
		if err := g.barrier.wait(req.Model); err != nil {
			writeEnvelope(w, http.StatusInternalServerError, "api_error", "barrier", err.Error())
			return
		}
	}
	known := false
	for _, m := range g.models {
		known = known || m == req.Model
	}
	switch {
	case req.Model == "error-200":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"error":{"message":"upstream engine crashed while loading weights","type":"api_error","code":"engine_failed"}}`))
		return
	case req.Model == "slow":
		select {
		case <-time.After(10 * time.Second):
		case <-r.Context().Done():
			select {
			case g.cancelled <- struct{}{}:
			default:
			}
		}
		return
	case !known && !strings.HasPrefix(req.Model, "stream-"):
		writeEnvelope(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
			fmt.Sprintf("the model %q does not exist or you do not have access to it", req.Model))
		return
	case req.Stream && g.rejectStream:
		writeEnvelope(w, http.StatusBadRequest, "invalid_request_error", "unsupported_parameter", "stream=true is not supported by this server")
		return
	case req.StreamOptions != nil && g.rejectStreamOptions:
		writeEnvelope(w, http.StatusBadRequest, "invalid_request_error", "unsupported_parameter", "Unrecognized request argument supplied: stream_options")
		return
	}
	prompt := req.Messages[len(req.Messages)-1].Content.String()
	words := strings.Fields(answerFor(req.Model, prompt))
	if req.MaxTokens != nil && *req.MaxTokens < len(words) {
		words = words[:*req.MaxTokens]
	}
	usage := &openai.Usage{PromptTokens: countWords(req.Messages), CompletionTokens: len(words), TotalTokens: countWords(req.Messages) + len(words)}
	if !req.Stream || g.ignoreStream {
		stop := "stop"
		content := strings.Join(words, " ")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(openai.ChatCompletion{ID: "c1", Object: "chat.completion", Created: 1, Model: req.Model,
			Choices: []openai.ChatChoice{{Message: openai.ChatMessage{Role: "assistant", Content: openai.TextContent(content)}, FinishReason: &stop}},
			Usage:   usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	chunk := func(d openai.ChunkDelta, finish *string) openai.ChatCompletionChunk {
		return openai.ChatCompletionChunk{ID: "c1", Object: "chat.completion.chunk", Created: 1, Model: req.Model,
			Choices: []openai.ChunkChoice{{Delta: d, FinishReason: finish}}}
	}
	send(chunk(openai.ChunkDelta{Role: "assistant"}, nil))
	if req.Model == "stream-reasoner" {
		// Newer vLLM names the field "reasoning"; older engines "reasoning_content".
		time.Sleep(g.tokenGap) // the stream's pace (see tokenGap)
		fmt.Fprint(w, `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning":"thinking "},"finish_reason":null}]}`+"\n\n")
		fmt.Fprint(w, `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"hard"},"finish_reason":null}]}`+"\n\n")
		fl.Flush()
	}
	for i, word := range words {
		time.Sleep(g.tokenGap) // the stream's pace (see tokenGap)
		if req.Model == "stream-cut" && i == 2 {
			return // connection closes mid-answer, no finish reason, no [DONE]
		}
		if req.Model == "stream-error" && i == 2 {
			fmt.Fprint(w, `data: {"error":{"message":"the engine ran out of KV cache","type":"overloaded_error","code":503}}`+"\n\n")
			fl.Flush()
			return
		}
		if i > 0 {
			word = " " + word
		}
		send(chunk(openai.ChunkDelta{Content: &word}, nil))
	}
	stop := "stop"
	send(chunk(openai.ChunkDelta{}, &stop))
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send(openai.ChatCompletionChunk{ID: "c1", Object: "chat.completion.chunk", Created: 1, Model: req.Model, Choices: []openai.ChunkChoice{}, Usage: usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// barrier holds requests for its member models until every member has
// arrived, or fails them after a generous time-out so a broken
// implementation fails the test instead of hanging it. Other models pass.
type barrier struct {
	members map[string]bool
	mu      sync.Mutex
	waiting map[string]bool
	all     chan struct{}
	need    int
}

func newBarrier(models ...string) *barrier {
	b := &barrier{members: map[string]bool{}, waiting: map[string]bool{}, all: make(chan struct{}), need: len(models)}
	for _, m := range models {
		b.members[m] = true
	}
	return b
}

func (b *barrier) wait(model string) error {
	if !b.members[model] {
		return nil
	}
	b.mu.Lock()
	b.waiting[model] = true
	if len(b.waiting) == b.need {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return nil
	case <-time.After(20 * time.Second):
		return fmt.Errorf("barrier: model %s waited 20s for the other requests; they were not sent concurrently", model)
	}
}
