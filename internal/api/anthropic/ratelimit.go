package anthropic

import (
	"net/http"
	"time"
)

// rateLimitNames pairs the gateway's OpenAI-style x-ratelimit-* headers with
// Anthropic's names for the same figures.
var rateLimitNames = [...]struct{ openai, anthropic string }{
	{"X-Ratelimit-Limit-Requests", "Anthropic-Ratelimit-Requests-Limit"},
	{"X-Ratelimit-Remaining-Requests", "Anthropic-Ratelimit-Requests-Remaining"},
	{"X-Ratelimit-Reset-Requests", "Anthropic-Ratelimit-Requests-Reset"},
	{"X-Ratelimit-Limit-Tokens", "Anthropic-Ratelimit-Tokens-Limit"},
	{"X-Ratelimit-Remaining-Tokens", "Anthropic-Ratelimit-Tokens-Remaining"},
	{"X-Ratelimit-Reset-Tokens", "Anthropic-Ratelimit-Tokens-Reset"},
}

// RateLimitHeaders adds, beside the x-ratelimit-* headers in h, the
// anthropic-ratelimit-* headers Anthropic's API sends for the same limits:
// the same limit and remaining figures, and the reset as an RFC 3339 time
// (OpenAI's header carries a duration from now).
func RateLimitHeaders(h http.Header, now time.Time) {
	for _, n := range rateLimitNames {
		v := h[n.openai]
		if len(v) == 0 {
			continue
		}
		val := v[0]
		if n.openai == "X-Ratelimit-Reset-Requests" || n.openai == "X-Ratelimit-Reset-Tokens" {
			d, err := time.ParseDuration(val)
			if err != nil {
				continue
			}
			val = now.Add(d).UTC().Format(time.RFC3339)
		}
		h[n.anthropic] = []string{val}
	}
}
