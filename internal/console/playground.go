package console

import (
	"bytes"
	"io"
	"llmgate/internal/keys"
	"net/http"
)

// handleChat relays a playground prompt to the gateway's own
// /v1/chat/completions, in-process, as the signed-in key (attached with
// keys.WithPrincipal: no secret is kept anywhere): limits, budgets, model
// allow-lists, metrics, traces and the usage ledger all apply as for any
// client. The browser never holds the key; it streams the answer with
// fetch and a ReadableStream.
func (c *Console) handleChat(w http.ResponseWriter, r *http.Request, s *session) {
	if c.opt.API == nil {
		writeError(w, http.StatusNotImplemented, "the playground is not connected to the gateway")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "playground prompts are limited to 1 MiB")
		return
	}
	// The request carries the session's principal in its context, not a
	// credential: the server holds no key secret.
	req, err := http.NewRequestWithContext(keys.WithPrincipal(r.Context(), s.principal), http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	req.Host = r.Host
	req.RemoteAddr = r.RemoteAddr
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/json")
	if id := r.Header.Get("X-Request-Id"); id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	// The API's answers are JSON or SSE, never HTML: the console's CSP
	// stays, and the API sets its own content type.
	w.Header().Del("Cache-Control")
	w.Header().Set("Cache-Control", "no-store")
	c.opt.API.ServeHTTP(w, req)
}
