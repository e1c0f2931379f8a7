package relay

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"llmgate/internal/codec"
	"llmgate/internal/router"
)

// Exact token counts for count_tokens on OpenAI-dialect backends. vLLM
// (and engines that copy its API) tokenize at POST /tokenize, at the server
// root: with chat messages the count is what prompt_tokens will be, chat
// template included. Other backends answer 404; they are remembered for a
// while and get the local estimate. A count never fails over or opens a
// breaker: without a tokenizer the gateway estimates, and a local engine
// that is not running is not started for a count (its closed port gives
// the estimate).
const (
	tokenizeTimeout = 3 * time.Second
	tokenizeMaxBody = 64 << 20
	// noTokenizeFor is how long a backend without /tokenize is not asked
	// again (an engine upgrade or a restart with another server shows up
	// after it).
	noTokenizeFor = 10 * time.Minute
)

// TokenCountHeader tells a count_tokens client where its count came from:
// "tokenizer" (the backend's own, exact) or "estimate" (llmgate's rule of
// thumb, see translate.EstimateAnthropicInputTokens).
const TokenCountHeader = "Llmgate-Token-Count"

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

// countTokens answers a count_tokens request for an OpenAI-dialect
// deployment: the backend tokenizer's count when it has one, else the
// estimate. The answer is a local source for the relay loop.
func (rl *Relay) countTokens(ctx context.Context, w http.ResponseWriter, c *Call, dep router.Deployment, out codec.Outbound) source {
	n, exact := rl.tokenize(ctx, c, dep, out.Body, tokenizeTimeout)
	from := "tokenizer"
	if !exact {
		n, from = c.Req.EstimateInputTokens(), "estimate"
	}
	w.Header().Set(TokenCountHeader, from)
	body := []byte(`{"input_tokens":` + strconv.Itoa(n) + "}")
	return &localSource{evs: []codec.Event{{Data: body, Content: true, End: true}}}
}

// tokenize asks the deployment's tokenizer to count body (a /tokenize
// request); ok is false when it cannot say (no such endpoint, down, an
// error).
func (rl *Relay) tokenize(ctx context.Context, c *Call, dep router.Deployment, body []byte, timeout time.Duration) (n int, ok bool) {
	if len(body) > c.Req.MaxTokenizeBody() {
		return 0, false // larger than what the client sent allows: estimated
	}
	b := dep.Backend
	key := b.Name + " " + b.BaseURL
	if rl.noTokenize.skip(key, time.Now()) {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hr, err := b.NewRequest(ctx, "", body, c.UpstreamID()) // the backend's headers and key
	if err != nil {
		return 0, false
	}
	path, besideV1 := codec.TokenizerURLPath(hr.URL.Path)
	if !besideV1 {
		return 0, false
	}
	hr.URL.Path = path
	resp, err := b.Do(hr)
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
		rl.noTokenize.remember(key, time.Now())
		rl.log.Info("backend has no /tokenize; count_tokens estimates for it", "backend", b.Name, "status", resp.StatusCode)
		return 0, false
	default:
		return 0, false // a prompt the tokenizer refused (too long, bad model): estimate this once
	}
	var got struct {
		Count *int `json:"count"`
	}
	if json.Unmarshal(raw, &got) != nil || got.Count == nil || *got.Count < 0 {
		// A 200 that is not vLLM's answer (a catch-all page, another API).
		rl.noTokenize.remember(key, time.Now())
		return 0, false
	}
	return *got.Count, true
}
