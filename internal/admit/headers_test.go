package admit_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"llmgate/internal/admit"
	"llmgate/internal/apierror"
	"llmgate/internal/keys"
	"llmgate/internal/limit"
	"llmgate/internal/policy"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

var rateHeaderNames = []string{
	"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
}

// answerHeaders admits a request and returns the headers its answer gets.
func answerHeaders(t *testing.T, a *admit.Admission, p keys.Principal, model, body string) (http.Header, policy.Ticket) {
	t.Helper()
	tk, err := a.Admit(context.Background(), chatRequest(policy.AdmitRequest{Principal: p, Model: model, Endpoint: "chat"}, body))
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	h := http.Header{}
	if rt, ok := tk.(policy.RateLimitTicket); ok {
		rt.RateLimitHeaders(h)
	}
	return h, tk
}

// wantReset checks a reset value is a Go duration as OpenAI sends them
// ("1s", "6m0s", "17ms") within (0, max].
func wantReset(t *testing.T, h http.Header, name string, max time.Duration) {
	t.Helper()
	v := h.Get(name)
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > max {
		t.Fatalf("%s = %q, want a duration in (0, %v]", name, v, max)
	}
}

func wantNoRateHeaders(t *testing.T, h http.Header) {
	t.Helper()
	for _, n := range rateHeaderNames {
		if v, ok := h[http.CanonicalHeaderKey(n)]; ok {
			t.Fatalf("%s: %q set although no rate limit applies (all: %v)", n, v, h)
		}
	}
}

func runAdmittedHeaders(t *testing.T, lim limit.Limiter) {
	a := admit.New(admit.Options{Limiter: lim, Models: prices})
	k := &keys.Key{ID: "key_h_" + testenv.Unique(), RPM: 5, TPM: 10_000}
	body := `{"model":"qwen","max_tokens":100}` // 34 bytes: ~9 + 100 tokens reserved
	h, tk := answerHeaders(t, a, keys.Principal{Key: k}, "qwen", body)
	if h.Get("x-ratelimit-limit-requests") != "5" || h.Get("x-ratelimit-remaining-requests") != "4" {
		t.Fatalf("first answer: %v, want limit 5 remaining 4", h)
	}
	// One request of a full 5/min bucket comes back in 12s.
	wantReset(t, h, "x-ratelimit-reset-requests", 12*time.Second)
	if h.Get("x-ratelimit-limit-tokens") != "10000" {
		t.Fatalf("tokens limit: %v", h)
	}
	if rem, _ := strconv.Atoi(h.Get("x-ratelimit-remaining-tokens")); rem < 10_000-110 || rem > 10_000-108 {
		t.Fatalf("remaining tokens %q, want 10000 minus the ~109 reserved", h.Get("x-ratelimit-remaining-tokens"))
	}
	wantReset(t, h, "x-ratelimit-reset-tokens", time.Second)
	tk.Done(&usage.Record{PromptTokens: 9, CompletionTokens: 100})

	h, tk = answerHeaders(t, a, keys.Principal{Key: k}, "qwen", body)
	if h.Get("x-ratelimit-remaining-requests") != "3" {
		t.Fatalf("second answer: remaining %q, want 3", h.Get("x-ratelimit-remaining-requests"))
	}
	tk.Done(&usage.Record{})
	for i := 0; i < 3; i++ {
		_, tk = answerHeaders(t, a, keys.Principal{Key: k}, "qwen", body)
		tk.Done(&usage.Record{})
	}
	// The refusal carries the same headers, with nothing left.
	_, err := a.Admit(context.Background(), chatRequest(policy.AdmitRequest{Principal: keys.Principal{Key: k}, Model: "qwen", Endpoint: "chat"}, body))
	e := asAPIError(t, err)
	for _, n := range rateHeaderNames {
		if e.Header.Get(n) == "" {
			t.Fatalf("refusal lacks %s: %v", n, e.Header)
		}
	}
	if e.Header.Get("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("refusal: %v", e.Header)
	}
}

func TestAdmit_AdmittedAnswersCarryRateLimitHeaders(t *testing.T) {
	t.Run("Memory", func(t *testing.T) { runAdmittedHeaders(t, limit.NewMemory()) })
	t.Run("Redis", func(t *testing.T) {
		url, prefix := testenv.Redis(t)
		r, err := limit.NewRedis(context.Background(), url, limit.RedisOptions{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx := context.Background()
			if ks, _ := r.Client().Keys(ctx, prefix+"*").Result(); len(ks) > 0 {
				r.Client().Del(ctx, ks...)
			}
			r.Close()
		})
		runAdmittedHeaders(t, r)
	})
}

func TestAdmit_NoRateLimitHeadersWithoutRateLimits(t *testing.T) {
	a := newAdmission()
	for name, p := range map[string]keys.Principal{
		"master":                      {Master: true},
		"unlimited key":               {Key: &keys.Key{ID: "key_free"}},
		"concurrency and budget only": {Key: &keys.Key{ID: "key_cb", MaxConc: 3, BudgetUSD: 5}},
	} {
		t.Run(name, func(t *testing.T) {
			h, tk := answerHeaders(t, a, p, "qwen", `{}`)
			wantNoRateHeaders(t, h)
			tk.Done(&usage.Record{})
		})
	}
	// The master key is exempt even on a rate-limited model.
	h, tk := answerHeaders(t, a, keys.Principal{Master: true}, "limited", `{}`)
	wantNoRateHeaders(t, h)
	tk.Done(&usage.Record{})
}

func TestAdmit_RateLimitHeadersShowTheLimitThatBindsFirst(t *testing.T) {
	a := newAdmission() // model "limited": 2 RPM across keys
	unlimited := keys.Principal{Key: &keys.Key{ID: "key_u"}}
	h, _ := answerHeaders(t, a, unlimited, "limited", `{}`)
	if h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != "1" {
		t.Fatalf("model limit on an unlimited key: %v", h)
	}
	if h.Get("x-ratelimit-limit-tokens") != "" {
		t.Fatalf("tokens headers without a TPM limit: %v", h)
	}
	// A key with 100 RPM on the 2 RPM model: the model binds first.
	roomy := keys.Principal{Key: &keys.Key{ID: "key_r", RPM: 100, TPM: 50_000}}
	h, _ = answerHeaders(t, a, roomy, "limited", `{}`)
	if h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("want the model's 2 RPM with 0 left, got %v", h)
	}
	// Tokens come from the only scope with a TPM limit, the key's.
	if h.Get("x-ratelimit-limit-tokens") != "50000" {
		t.Fatalf("want the key's 50000 TPM, got %v", h)
	}
	// On a model without limits the key's own figures show.
	h, _ = answerHeaders(t, a, roomy, "qwen", `{}`)
	if h.Get("x-ratelimit-limit-requests") != "100" || h.Get("x-ratelimit-remaining-requests") != "98" {
		t.Fatalf("key limits: %v", h)
	}
}

func asAPIError(t *testing.T, err error) *apierror.Error {
	t.Helper()
	var e *apierror.Error
	if !errors.As(err, &e) {
		t.Fatalf("want an *apierror.Error refusal, got %v", err)
	}
	return e
}

// BenchmarkAdmit_RateLimitHeaders is what the headers add to an answer.
func BenchmarkAdmit_RateLimitHeaders(b *testing.B) {
	a := admit.New(admit.Options{Limiter: limit.NewMemory()})
	k := &keys.Key{ID: "key_bench_h", RPM: 1 << 30, TPM: 1 << 30}
	tk, err := a.Admit(context.Background(), chatRequest(policy.AdmitRequest{Principal: keys.Principal{Key: k}, Model: "m"}, `{}`))
	if err != nil {
		b.Fatal(err)
	}
	rt := tk.(policy.RateLimitTicket)
	h := make(http.Header, 8)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		rt.RateLimitHeaders(h)
	}
}
