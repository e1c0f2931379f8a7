package provider

import (
	"net/http"

	"llmgate/internal/dialect"
)

// Authorize sets the backend's credentials and configured headers on a
// request the gateway makes of its own (health probes, engine metrics).
func (b *Backend) Authorize(req *http.Request) {
	if b.apiKey != "" {
		if b.Dialect == dialect.Anthropic {
			req.Header.Set("X-Api-Key", b.apiKey)
		} else {
			req.Header.Set("Authorization", "Bearer "+b.apiKey)
		}
	}
	for k, v := range b.headers {
		req.Header.Set(k, v)
	}
}

// HTTPClient is the client for the gateway's own requests to the backend
// (on the backend's connection pool; it follows redirects).
func (b *Backend) HTTPClient() *http.Client { return b.client }
