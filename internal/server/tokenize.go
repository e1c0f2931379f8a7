package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/router"
	"llmgate/internal/translate"
)

// Exact token counts for count_tokens on OpenAI-dialect backends. vLLM
// (and engines that copy its API) tokenize at POST /tokenize, at the server
// root: with chat messages the count is what prompt_tokens will be, chat
// template included. Other backends answer 404; they are remembered for a
// while and get the local estimate.
const (
	tokenizeTimeout = 3 * time.Second
	tokenizeMaxBody = 64 << 20
	// noTokenizeFor is how long a backend without /tokenize is not asked
	// again (an engine upgrade or a restart with another server shows up
	// after it).
	noTokenizeFor = 10 * time.Minute
)

// tokenizeMemo remembers backends that have no tokenizer endpoint.
type tokenizeMemo struct {
	mu    sync.Mutex
	until map[string]time.Time // backend name + base URL -> ask again after
}

func (m *tokenizeMemo) skip(key string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.until[key]
	if ok && now.After(t) {
		delete(m.until, key)
		return false
	}
	return ok
}

func (m *tokenizeMemo) remember(key string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.until == nil {
		m.until = map[string]time.Time{}
	}
	m.until[key] = now.Add(noTokenizeFor)
}

type tokenizeChat struct {
	Model               string               `json:"model"`
	Messages            []openai.ChatMessage `json:"messages"`
	Tools               []openai.Tool        `json:"tools,omitempty"`
	AddGenerationPrompt bool                 `json:"add_generation_prompt"`
}

// tokenizeCount asks an OpenAI-dialect backend's tokenizer for the input
// tokens of a Messages request. ok is false when the backend cannot say
// (no such endpoint, down, an error): the caller then estimates. A local
// engine is asked only if it is running: a count does not start one (the
// request is refused at its closed port).
func (s *Server) tokenizeCount(ctx context.Context, dep router.Deployment, req *anthropic.MessagesRequest, reqID string) (n int, ok bool) {
	// vLLM's tokenizer sits beside /v1, not in it; a base URL with another
	// path (a cloud API's /api/paas/v4) is not a vLLM server.
	if !strings.HasSuffix(dep.Backend.BaseURL, "/v1") {
		return 0, false
	}
	key := dep.Backend.Name + " " + dep.Backend.BaseURL
	if s.noTokenize.skip(key, time.Now()) {
		return 0, false
	}
	// count_tokens takes a Messages body without max_tokens, which the
	// translation requires; the tokenizer does not look at it.
	r := *req
	r.MaxTokens, r.Stream = 1, false
	chat, err := translate.AnthropicToChat(&r)
	if err != nil {
		return 0, false
	}
	body, err := json.Marshal(tokenizeChat{Model: dep.UpstreamModel, Messages: chat.Messages, Tools: chat.Tools, AddGenerationPrompt: true})
	if err != nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, tokenizeTimeout)
	defer cancel()
	hr, err := dep.Backend.NewRequest(ctx, "", body, reqID) // the backend's headers and key
	if err != nil {
		return 0, false
	}
	hr.URL.Path = strings.TrimSuffix(hr.URL.Path, "/v1") + "/tokenize"
	resp, err := dep.Backend.Do(hr)
	if err != nil {
		return 0, false // down or slow: not a reason to stop asking
	}
	defer resp.Body.Close()
	// The answer lists every token id: ~7 bytes a token, so a 1M-token
	// prompt is ~7 MB. One larger than the limit is not a reason to stop
	// asking.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, tokenizeMaxBody+1))
	if err != nil || len(raw) > tokenizeMaxBody {
		return 0, false
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented,
		http.StatusUnprocessableEntity: // a /tokenize of another shape (FastAPI's schema error; vLLM answers 400)
		s.noTokenize.remember(key, time.Now())
		s.log.Info("backend has no /tokenize; count_tokens estimates for it", "backend", dep.Backend.Name, "status", resp.StatusCode)
		return 0, false
	default:
		return 0, false // a prompt the tokenizer refused (too long, bad model): estimate this once
	}
	var out struct {
		Count *int `json:"count"`
	}
	if json.Unmarshal(raw, &out) != nil || out.Count == nil || *out.Count < 0 {
		// A 200 that is not vLLM's answer (a catch-all page, another API).
		s.noTokenize.remember(key, time.Now())
		return 0, false
	}
	return *out.Count, true
}
