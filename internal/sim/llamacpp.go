package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Engines the simulator can answer as. Where they differ, the simulator
// follows the engine it mimics, as measured against the real servers (see
// docs/simulator.md): the gateway's cheap tests then catch what the real
// engine would show.
const (
	EngineVLLM     = "vllm"
	EngineLlamaCpp = "llamacpp"
)

// llamaCpp is the simulator's llama.cpp (llama-server) face:
//
//   - GET /v1/models lists the model as llama.cpp does (owned_by
//     "llamacpp", the context only as meta.n_ctx); GET /props has
//     default_generation_settings.n_ctx and total_slots.
//   - POST /apply-template renders chat messages through a ChatML template
//     into {"prompt"}; POST /tokenize takes {"content"} and answers
//     {"tokens": [...]} with no count, and answers a vLLM-shaped body
//     (messages, prompt) with 200 {"tokens": []}, as llama-server does.
//   - any model name is served by the one loaded model.
//   - a prompt that does not fit the context is a 400
//     exceed_context_size_error carrying n_prompt_tokens and n_ctx; an
//     output limit beyond what the context leaves is served, stopping
//     with finish_reason "length" when the context is full.
//   - the connection is closed after each streamed answer (llama-server
//     answers Keep-Alive but closes it).
//
// The simulator has no vocabulary, so /tokenize of a prompt that
// /apply-template rendered returns as many tokens as a chat request with
// the same messages reports as prompt_tokens (remembered for the last
// renderings); other text counts ceil(bytes/4), special tokens one each.
type llamaCpp struct {
	mu       sync.Mutex
	rendered map[string]int // rendered prompt -> its token count
	order    []string       // rendering order, for eviction
}

// llamaRendered bounds the renderings remembered.
const llamaRendered = 256

func (l *llamaCpp) remember(prompt string, tokens int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rendered == nil {
		l.rendered = map[string]int{}
	}
	if _, ok := l.rendered[prompt]; !ok {
		l.order = append(l.order, prompt)
	}
	l.rendered[prompt] = tokens
	for len(l.order) > llamaRendered {
		delete(l.rendered, l.order[0])
		l.order = l.order[1:]
	}
}

func (l *llamaCpp) count(text string) int {
	l.mu.Lock()
	n, ok := l.rendered[text]
	l.mu.Unlock()
	if ok {
		return n
	}
	specials := 0
	for _, sp := range []string{"<|im_start|>", "<|im_end|>"} {
		specials += strings.Count(text, sp)
		text = strings.ReplaceAll(text, sp, "")
	}
	return specials + countTextTokens(text)
}

// llamaCpp reports whether the simulator answers as llama.cpp.
func (s *Server) llamaCpp() bool { return s.cfg.Engine == EngineLlamaCpp }

// mountLlamaCpp adds llama.cpp's own endpoints.
func (s *Server) mountLlamaCpp(mux *http.ServeMux) {
	mux.HandleFunc("GET /props", s.handleProps)
	mux.HandleFunc("POST /apply-template", s.handleApplyTemplate)
}

// handleLlamaModels is llama.cpp's GET /v1/models.
func (s *Server) handleLlamaModels(w http.ResponseWriter, r *http.Request) {
	e := s.models[0]
	now := time.Now().Unix()
	writeJSON(w, http.StatusOK, map[string]any{
		"models": []map[string]any{{"name": e.mc.Name, "model": e.mc.Name, "type": "model", "capabilities": []string{"completion"}}},
		"object": "list",
		"data": []map[string]any{{
			"id": e.mc.Name, "aliases": []string{e.mc.Name}, "object": "model", "created": now, "owned_by": "llamacpp",
			"meta": map[string]any{"n_ctx": e.mc.MaxModelLen, "n_ctx_train": e.mc.MaxModelLen, "n_vocab": 151936},
		}},
	})
}

// handleProps is llama.cpp's GET /props.
func (s *Server) handleProps(w http.ResponseWriter, r *http.Request) {
	e := s.models[0]
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{"n_ctx": e.mc.MaxModelLen, "params": map[string]any{"max_tokens": -1, "n_predict": -1}},
		"total_slots":                 e.mc.MaxNumSeqs,
		"model_alias":                 e.mc.Name,
		"model_path":                  "/models/" + e.mc.Name + ".gguf",
		"build_info":                  "llmgate-sim",
	})
}

// handleApplyTemplate is llama.cpp's POST /apply-template: the chat
// messages rendered through the model's chat template (ChatML here).
func (s *Server) handleApplyTemplate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []chatRequestMsg  `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeLlamaError(w, e)
		return
	}
	_, tokens, e := chatPrompt(req.Messages, req.Tools, true)
	if e != nil {
		writeLlamaError(w, e)
		return
	}
	var b strings.Builder
	if len(req.Tools) > 0 {
		b.WriteString("<|im_start|>system\n# Tools\n<tools>\n")
		for _, t := range req.Tools {
			b.Write(t)
			b.WriteByte('\n')
		}
		b.WriteString("</tools><|im_end|>\n")
	}
	for _, m := range req.Messages {
		text, _ := messageText(m.Content)
		fmt.Fprintf(&b, "<|im_start|>%s\n%s", m.Role, text)
		if calls := string(m.ToolCalls); calls != "" && calls != "null" && calls != "[]" {
			b.WriteString("\n<tool_call>\n" + calls + "\n</tool_call>")
		}
		b.WriteString("<|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	prompt := b.String()
	s.llama.remember(prompt, tokens)
	writeJSON(w, http.StatusOK, map[string]string{"prompt": prompt})
}

// handleLlamaTokenize is llama.cpp's POST /tokenize.
func (s *Server) handleLlamaTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Content *string `json:"content"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeLlamaError(w, e)
		return
	}
	if req.Content == nil {
		// llama-server answers a body without content (vLLM's) with no
		// tokens, and 200.
		writeJSON(w, http.StatusOK, map[string][]int{"tokens": {}})
		return
	}
	n := s.llama.count(*req.Content)
	writeJSON(w, http.StatusOK, map[string][]int{"tokens": standInIDs(*req.Content, n)})
}

// llamaContextCheck is llama.cpp's check of a generation request against
// the context: a prompt that does not fit is refused with the numbers; an
// output limit is cut to what the context leaves (the answer then stops
// with finish_reason "length").
func (s *Server) llamaContextCheck(g *genRequest) *apiError {
	limit := g.e.mc.MaxModelLen
	if g.promptTokens >= limit {
		return &apiError{status: http.StatusBadRequest, typ: "exceed_context_size_error",
			msg:    fmt.Sprintf("request (%d tokens) exceeds the available context size (%d tokens), try increasing it", g.promptTokens, limit),
			prompt: g.promptTokens, nCtx: limit}
	}
	g.explicitMax = g.maxTokens != nil
	left := limit - g.promptTokens
	if g.maxTokens == nil || *g.maxTokens > left {
		g.maxTokens = &left
	}
	return nil
}

// writeLlamaError writes e in llama.cpp's envelope.
func writeLlamaError(w http.ResponseWriter, e *apiError) {
	body := map[string]any{"code": e.status, "message": e.msg, "type": e.typ}
	if e.nCtx > 0 {
		body["n_prompt_tokens"], body["n_ctx"] = e.prompt, e.nCtx
	}
	writeJSON(w, e.status, map[string]any{"error": body})
}

// timings is llama-server's "timings" of a finished sequence, or nil for
// the vLLM face.
func (s *Server) timings(q *seq, promptTokens int) *llamaTimings {
	if !s.llamaCpp() {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	t := &llamaTimings{CacheN: q.pubCached, PromptN: promptTokens - q.pubCached, PredictedN: q.pubTokens}
	if !q.firstToken.IsZero() {
		t.PromptMS = ms(q.firstToken.Sub(q.scheduled))
		t.PredictedMS = ms(q.lastToken.Sub(q.firstToken))
	}
	perToken := func(total float64, n int) (float64, float64) {
		if n <= 0 || total <= 0 {
			return 0, 0
		}
		return total / float64(n), 1000 * float64(n) / total
	}
	t.PromptPerTokenMS, t.PromptPerSecond = perToken(t.PromptMS, t.PromptN)
	t.PredictedPerTokenMS, t.PredictedPerSecond = perToken(t.PredictedMS, t.PredictedN)
	return t
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
