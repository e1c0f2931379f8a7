package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/limit"
	"llmgate/internal/testenv"
)

// newKey creates a virtual key and makes the gateway see it at once.
func (e *env) newKey(k keys.Key) string {
	e.t.Helper()
	ctx := context.Background()
	_, secret, err := CreateKey(ctx, e.g.Store, k)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.g.Verifier.Reload(ctx); err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// wantRequestHeaders checks an answer's x-ratelimit request trio.
func wantRequestHeaders(t *testing.T, what string, r result, status int, limit, remaining string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.body)
	}
	h := r.header
	if h.Get("X-Ratelimit-Limit-Requests") != limit || h.Get("X-Ratelimit-Remaining-Requests") != remaining {
		t.Fatalf("%s: x-ratelimit-limit-requests %q remaining %q, want %s and %s (headers %v)", what,
			h.Get("X-Ratelimit-Limit-Requests"), h.Get("X-Ratelimit-Remaining-Requests"), limit, remaining, h)
	}
	if d, err := time.ParseDuration(h.Get("X-Ratelimit-Reset-Requests")); err != nil || d <= 0 || d > time.Minute {
		t.Fatalf("%s: x-ratelimit-reset-requests %q, want a duration like 12s", what, h.Get("X-Ratelimit-Reset-Requests"))
	}
}

func wantNoRateLimitHeaders(t *testing.T, what string, r result) {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("%s: status %d: %s", what, r.status, r.body)
	}
	for name := range r.header {
		if l := strings.ToLower(name); strings.HasPrefix(l, "x-ratelimit-") || strings.HasPrefix(l, "anthropic-ratelimit-") {
			t.Fatalf("%s: %s set although no limit applies: %v", what, name, r.header)
		}
	}
}

const messagesBody = `{"model":"qwen","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`

// runKeyWithRPM5 sends five answers of every kind for a 5 rpm key and
// checks each carries the figures as of its admission.
func runKeyWithRPM5(t *testing.T, e *env) {
	secret := e.newKey(keys.Key{Name: "five-per-minute", RPM: 5})
	r := e.do("POST", "/v1/chat/completions", secret, chatBody("qwen", false, ""))
	wantRequestHeaders(t, "chat answer", r, 200, "5", "4")

	r = e.do("POST", "/v1/chat/completions", secret, chatBody("qwen", true, ""))
	if !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") || !strings.Contains(r.body, "[DONE]") {
		t.Fatalf("not a complete stream: %v %s", r.header, r.body)
	}
	wantRequestHeaders(t, "streamed chat answer", r, 200, "5", "3")

	r = e.do("POST", "/v1/messages", "", messagesBody, "x-api-key", secret, "anthropic-version", "2023-06-01")
	if !strings.Contains(r.body, `"type":"message"`) {
		t.Fatalf("not an Anthropic message: %s", r.body)
	}
	wantRequestHeaders(t, "Anthropic /v1/messages answer", r, 200, "5", "2")
	wantAnthropicRequestHeaders(t, "Anthropic /v1/messages answer", r, "5", "2")

	// An error after admission carries them too: the backend fails.
	r = e.do("POST", "/v1/chat/completions", secret, chatBody("err-500", false, ""))
	wantRequestHeaders(t, "backend error after admission", r, http.StatusBadGateway, "5", "1")

	r = e.do("POST", "/v1/responses", secret, `{"model":"qwen","input":"hi"}`)
	wantRequestHeaders(t, "Responses API answer", r, 200, "5", "0")

	// The refusal has had them all along.
	r = e.do("POST", "/v1/chat/completions", secret, chatBody("qwen", false, ""))
	wantRequestHeaders(t, "refusal", r, http.StatusTooManyRequests, "5", "0")
	r = e.do("POST", "/v1/messages", "", messagesBody, "x-api-key", secret, "anthropic-version", "2023-06-01")
	if r.status != http.StatusTooManyRequests || !strings.Contains(r.body, `"type":"error"`) {
		t.Fatalf("Anthropic refusal: %d %s", r.status, r.body)
	}
	wantAnthropicRequestHeaders(t, "Anthropic refusal", r, "5", "0")
}

// wantAnthropicRequestHeaders checks the anthropic-ratelimit request trio
// of a Messages API answer: Anthropic's names, the reset as an RFC 3339 time.
func wantAnthropicRequestHeaders(t *testing.T, what string, r result, limit, remaining string) {
	t.Helper()
	h := r.header
	if h.Get("Anthropic-Ratelimit-Requests-Limit") != limit || h.Get("Anthropic-Ratelimit-Requests-Remaining") != remaining {
		t.Fatalf("%s: anthropic-ratelimit-requests-limit %q remaining %q, want %s and %s (headers %v)", what,
			h.Get("Anthropic-Ratelimit-Requests-Limit"), h.Get("Anthropic-Ratelimit-Requests-Remaining"), limit, remaining, h)
	}
	reset, err := time.Parse(time.RFC3339, h.Get("Anthropic-Ratelimit-Requests-Reset"))
	if err != nil || reset.Before(time.Now().Add(-2*time.Second)) || reset.After(time.Now().Add(time.Minute+2*time.Second)) {
		t.Fatalf("%s: anthropic-ratelimit-requests-reset %q is not an RFC 3339 time within the next minute", what, h.Get("Anthropic-Ratelimit-Requests-Reset"))
	}
}

func TestRateLimitHeaders_OnEveryAnswerOfALimitedKey(t *testing.T) {
	runKeyWithRPM5(t, startEnv(t))
}

func TestRateLimitHeaders_OnEveryAnswerOfALimitedKey_Redis(t *testing.T) {
	url, prefix := testenv.Redis(t)
	e := startEnv(t, func(c *config.Config) { c.Redis, c.RedisPrefix = url, prefix })
	r, ok := e.g.Admission().Limiter().(*limit.Redis)
	if !ok {
		t.Fatalf("limiter is %T, want Redis", e.g.Admission().Limiter())
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if ks, _ := r.Client().Keys(ctx, prefix+"*").Result(); len(ks) > 0 {
			r.Client().Del(ctx, ks...)
		}
	})
	runKeyWithRPM5(t, e)
}

func TestRateLimitHeaders_TokensTrioForATPMKey(t *testing.T) {
	e := startEnv(t)
	secret := e.newKey(keys.Key{Name: "tpm", TPM: 100_000})
	r := e.do("POST", "/v1/chat/completions", secret, chatBody("qwen", false, `,"max_tokens":1000`))
	if r.status != 200 || r.header.Get("X-Ratelimit-Limit-Tokens") != "100000" {
		t.Fatalf("status %d headers %v", r.status, r.header)
	}
	// About 1000 + body/4 tokens are reserved at admission.
	rem := r.header.Get("X-Ratelimit-Remaining-Tokens")
	if !strings.HasPrefix(rem, "98") {
		t.Fatalf("x-ratelimit-remaining-tokens %q, want about 98970", rem)
	}
	if d, err := time.ParseDuration(r.header.Get("X-Ratelimit-Reset-Tokens")); err != nil || d <= 0 || d > 2*time.Second {
		t.Fatalf("x-ratelimit-reset-tokens %q", r.header.Get("X-Ratelimit-Reset-Tokens"))
	}
	if r.header.Get("X-Ratelimit-Limit-Requests") != "" {
		t.Fatalf("requests headers without an RPM limit: %v", r.header)
	}
}

func TestRateLimitHeaders_NoneWithoutLimits(t *testing.T) {
	e := startEnv(t)
	for _, key := range []struct{ name, secret string }{
		{"key without limits", e.newKey(keys.Key{Name: "free"})},
		{"key with only a concurrency cap", e.newKey(keys.Key{Name: "conc", MaxConc: 4})},
		{"master key", testMaster},
	} {
		wantNoRateLimitHeaders(t, key.name+", chat", e.do("POST", "/v1/chat/completions", key.secret, chatBody("qwen", false, "")))
		wantNoRateLimitHeaders(t, key.name+", stream", e.do("POST", "/v1/chat/completions", key.secret, chatBody("qwen", true, "")))
		wantNoRateLimitHeaders(t, key.name+", messages", e.do("POST", "/v1/messages", "", messagesBody, "x-api-key", key.secret, "anthropic-version", "2023-06-01"))
	}
}
