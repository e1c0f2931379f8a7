package admit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/admit"
	"llmgate/internal/apierror"
	"llmgate/internal/codec"
	"llmgate/internal/keys"
	"llmgate/internal/limit"
	"llmgate/internal/policy"
	"llmgate/internal/store/sqlite"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

var prices = map[string]admit.ModelPolicy{
	"qwen":    {InputPrice: 1, OutputPrice: 2}, // USD per 1M tokens
	"limited": {RPM: 2},
}

// chatRequest fills in the token figures of a chat body as the gateway
// decodes it (codec.Decode, no known context window).
func chatRequest(r policy.AdmitRequest, body string) policy.AdmitRequest {
	req, err := codec.Decode(codec.Chat, []byte(body))
	if err != nil {
		panic(err)
	}
	r.PromptTokens, r.OutputTokens = req.PromptEstimate(), req.MaxOutput(nil, 0)
	return r
}

func newAdmission() *admit.Admission {
	return admit.New(admit.Options{Limiter: limit.NewMemory(), Models: prices})
}

func ask(a *admit.Admission, k *keys.Key, model, body string) (policy.Ticket, *apierror.Error) {
	t, err := a.Admit(context.Background(), chatRequest(policy.AdmitRequest{Principal: keys.Principal{Key: k}, Model: model, Endpoint: "chat"}, body))
	if err != nil {
		var e *apierror.Error
		if !errors.As(err, &e) {
			panic(err)
		}
		return nil, e
	}
	return t, nil
}

func TestAdmit_KeyRPMRefusalHasOpenAIHeadersAndNamesTheLimit(t *testing.T) {
	a := newAdmission()
	k := &keys.Key{ID: "key_1", Name: "app", RPM: 2}
	for i := 0; i < 2; i++ {
		if _, e := ask(a, k, "qwen", `{"model":"qwen"}`); e != nil {
			t.Fatal(e)
		}
	}
	_, e := ask(a, k, "qwen", `{"model":"qwen"}`)
	if e == nil || e.Status != 429 || e.Code != "rate_limit_requests" {
		t.Fatalf("third request: %+v", e)
	}
	if !strings.Contains(e.Message, `key "app" (key_1)`) || !strings.Contains(e.Message, "2 requests per minute") {
		t.Fatalf("message does not name the key and limit: %s", e.Message)
	}
	h := e.Header
	if h.Get("Retry-After") == "" || h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != "0" ||
		h.Get("x-ratelimit-reset-requests") == "" {
		t.Fatalf("headers = %v", h)
	}
}

func TestAdmit_ModelLimitAppliesAcrossKeys(t *testing.T) {
	a := newAdmission()
	k1, k2 := &keys.Key{ID: "key_a"}, &keys.Key{ID: "key_b"}
	if _, e := ask(a, k1, "limited", `{}`); e != nil {
		t.Fatal(e)
	}
	if _, e := ask(a, k2, "limited", `{}`); e != nil {
		t.Fatal(e)
	}
	_, e := ask(a, k1, "limited", `{}`)
	if e == nil || !strings.Contains(e.Message, `model "limited"`) {
		t.Fatalf("want a refusal naming the model, got %+v", e)
	}
}

func TestAdmit_TPMReservesPromptAndMaxTokens(t *testing.T) {
	a := newAdmission()
	k := &keys.Key{ID: "key_t", TPM: 1000}
	// 40 bytes of body ~ 10 tokens + max_tokens 900 = ~910 reserved.
	body := `{"model":"qwen","max_tokens":900,"x":""}`
	tk, e := ask(a, k, "qwen", body)
	if e != nil {
		t.Fatal(e)
	}
	_, e = ask(a, k, "qwen", body)
	if e == nil || e.Code != "rate_limit_tokens" || e.Header.Get("x-ratelimit-limit-tokens") != "1000" {
		t.Fatalf("second reservation should not fit: %+v", e)
	}
	// The first call used 20 tokens in all: the rest returns to the bucket.
	tk.Done(&usage.Record{PromptTokens: 10, CompletionTokens: 10})
	if _, e := ask(a, k, "qwen", body); e != nil {
		t.Fatalf("after settling, the request should fit: %v", e)
	}
}

func TestAdmit_DonePricesTheRecord(t *testing.T) {
	a := newAdmission()
	for _, p := range []keys.Principal{{Master: true}, {Key: &keys.Key{ID: "key_free"}}, {Key: &keys.Key{ID: "key_lim", RPM: 100}}} {
		tk, err := a.Admit(context.Background(), chatRequest(policy.AdmitRequest{Principal: p, Model: "qwen"}, `{}`))
		if err != nil {
			t.Fatal(err)
		}
		rec := usage.Record{PromptTokens: 1000, CompletionTokens: 500}
		tk.Done(&rec)
		if math.Abs(rec.CostUSD-(1000*1+500*2)/1e6) > 1e-12 {
			t.Fatalf("%+v: cost = %g", p, rec.CostUSD)
		}
	}
}

func TestAdmit_BudgetReservesAndSettles(t *testing.T) {
	a := newAdmission()
	// Each request reserves (body/4 + 100 output tokens): ~110 tokens,
	// at most $0.00022; the budget fits 4 reservations but not 5.
	k := &keys.Key{ID: "key_b", Name: "b", BudgetUSD: 0.001, BudgetPeriod: "daily"}
	body := `{"model":"qwen","max_tokens":100,"pad":""}`
	var tickets []policy.Ticket
	for {
		tk, e := ask(a, k, "qwen", body)
		if e != nil {
			if e.Code != "budget_exceeded" || !strings.Contains(e.Message, "daily") || e.Header.Get("Retry-After") == "" {
				t.Fatalf("refusal = %+v", e)
			}
			break
		}
		tickets = append(tickets, tk)
	}
	if len(tickets) != 4 {
		t.Fatalf("%d reservations admitted, want 4", len(tickets))
	}
	// The calls were cheap: settling frees the budget for more.
	for _, tk := range tickets {
		tk.Done(&usage.Record{PromptTokens: 5, CompletionTokens: 5})
	}
	if _, e := ask(a, k, "qwen", body); e != nil {
		t.Fatalf("after cheap calls settle, budget should admit: %v", e)
	}
}

func TestAdmit_SeedBudgetsFromLedger(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k := &keys.Key{ID: "key_s", Hash: keys.Hash("x"), BudgetUSD: 1, BudgetPeriod: "monthly", CreatedAt: time.Now()}
	if err := st.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := st.InsertUsage(ctx, []usage.Record{{ID: "r1", Time: time.Now(), KeyID: k.ID, Model: "qwen", Status: 200, CostUSD: 0.999}}); err != nil {
		t.Fatal(err)
	}
	a := newAdmission()
	if err := a.SeedBudgets(ctx, st, st); err != nil {
		t.Fatal(err)
	}
	// $0.999 of $1 is spent: a request reserving ~$0.002 must be refused.
	_, e := ask(a, k, "qwen", `{"max_tokens":1000}`)
	if e == nil || e.Code != "budget_exceeded" {
		t.Fatalf("seeded spend ignored: %+v", e)
	}
}

func TestAdmit_ConcurrencySlotReturnsOnDone(t *testing.T) {
	a := newAdmission()
	k := &keys.Key{ID: "key_c", MaxConc: 1}
	tk, e := ask(a, k, "qwen", `{}`)
	if e != nil {
		t.Fatal(e)
	}
	if _, e := ask(a, k, "qwen", `{}`); e == nil || e.Code != "rate_limit_concurrency" {
		t.Fatalf("second concurrent request: %+v", e)
	}
	tk.Done(&usage.Record{})
	if _, e := ask(a, k, "qwen", `{}`); e != nil {
		t.Fatalf("slot not returned: %v", e)
	}
}

// BenchmarkAdmit_KeyAndModelLimits is the admission cost on the hot path.
func BenchmarkAdmit_KeyAndModelLimits(b *testing.B) {
	a := admit.New(admit.Options{Limiter: limit.NewMemory(), Models: map[string]admit.ModelPolicy{"m": {RPM: 1 << 40, InputPrice: 1}}})
	k := &keys.Key{ID: "key_bench", RPM: 1 << 30, TPM: 1 << 30, MaxConc: 1 << 20, BudgetUSD: 1e9, BudgetPeriod: "daily"}
	req := chatRequest(policy.AdmitRequest{Principal: keys.Principal{Key: k}, Model: "m", Endpoint: "chat"},
		`{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":64}`)
	rec := usage.Record{PromptTokens: 10, CompletionTokens: 20}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		t, err := a.Admit(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		t.Done(&rec)
	}
}

// TestAdmit_KeySpendEqualsTheLedgersSpend: what the limiter counts as
// settled for a key and what the ledger sums for it are the same number,
// also for prices with fractions of a micro-dollar per token (a counter in
// micro-USD rounded every request up and drifted from the ledger).
func TestAdmit_KeySpendEqualsTheLedgersSpend(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k := &keys.Key{ID: "key_eq", Hash: keys.Hash("eq"), BudgetUSD: 100, BudgetPeriod: "daily", CreatedAt: time.Now()}
	if err := st.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	a := admit.New(admit.Options{Limiter: limit.NewMemory(), Models: map[string]admit.ModelPolicy{
		"cheap": {InputPrice: 0.15, OutputPrice: 0.6, CachedInputPrice: 0.075}}})
	var recs []usage.Record
	for i := 0; i < 500; i++ {
		tk, err := a.Admit(ctx, chatRequest(policy.AdmitRequest{Principal: keys.Principal{Key: k}, Model: "cheap", Endpoint: "chat"}, `{"max_tokens":50}`))
		if err != nil {
			t.Fatal(err)
		}
		rec := usage.Record{ID: fmt.Sprintf("r%d", i), Time: time.Now(), KeyID: k.ID, Model: "cheap", Status: 200,
			PromptTokens: 7 + i%13, CachedTokens: i % 5, CompletionTokens: 3 + i%29}
		tk.Done(&rec)
		recs = append(recs, rec)
	}
	if err := st.InsertUsage(ctx, recs); err != nil {
		t.Fatal(err)
	}
	rows, err := st.Summary(ctx, usage.Filter{KeyID: k.ID, GroupBy: []string{"key"}})
	if err != nil || len(rows) != 1 {
		t.Fatalf("ledger: %v %v", rows, err)
	}
	settled, reserved, err := a.KeySpend(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("500 requests at $0.15/$0.60 per 1M: ledger $%.9f, limiter settled $%.9f, reserved $%.9f", rows[0].CostUSD, settled, reserved)
	if reserved != 0 || math.Abs(settled-rows[0].CostUSD) > 500*0.5e-9 {
		t.Fatalf("limiter settled $%.12f, reserved $%.12f; ledger $%.12f: they must agree within half a nano-dollar per request",
			settled, reserved, rows[0].CostUSD)
	}
}

// TestPrecheck_RepeatsAKeysRefusalUntilItsRetryAfter: a key just refused
// for its rate is refused again before its next body is read, without
// asking the limiter, until the Retry-After has passed.
func TestPrecheck_RepeatsAKeysRefusalUntilItsRetryAfter(t *testing.T) {
	now := time.Now()
	a := admit.New(admit.Options{Limiter: limit.NewMemory(), Models: prices, Now: func() time.Time { return now }})
	k := &keys.Key{ID: "key_pre", RPM: 1}
	p := keys.Principal{Key: k}
	if err := a.Precheck(p); err != nil {
		t.Fatalf("a key never refused: %v", err)
	}
	if _, e := ask(a, k, "qwen", `{"model":"qwen"}`); e != nil {
		t.Fatalf("first request: %v", e)
	}
	if _, e := ask(a, k, "qwen", `{"model":"qwen"}`); e == nil || e.Code != "rate_limit_requests" {
		t.Fatalf("second request within the minute: %v, want rate_limit_requests", e)
	}
	err := a.Precheck(p)
	var e *apierror.Error
	if !errors.As(err, &e) || e.Code != "rate_limit_requests" || e.Header.Get("Retry-After") == "" {
		t.Fatalf("precheck right after the refusal: %v", err)
	}
	if other := a.Precheck(keys.Principal{Key: &keys.Key{ID: "key_other", RPM: 1}}); other != nil {
		t.Fatalf("another key: %v", other)
	}
	if master := a.Precheck(keys.Principal{Master: true}); master != nil {
		t.Fatalf("master: %v", master)
	}
	now = now.Add(6 * time.Second) // past maxPrecheck: the limiter decides again
	if err := a.Precheck(p); err != nil {
		t.Fatalf("precheck after the refusal's time: %v", err)
	}
}

// TestAdmit_ReservationSaturatesAtTheOverflowEdge: an output bound of 2^31
// choices of 30,000 tokens at $1,000 per million tokens is $64 billion,
// beyond an int64 of nano-USD; converted as it was, it wrapped to a
// negative reservation that every budget admitted. Saturated, it is
// refused by a $1 budget, with both limiters.
func TestAdmit_ReservationSaturatesAtTheOverflowEdge(t *testing.T) {
	for name, lim := range map[string]func(t *testing.T) limit.Limiter{
		"memory": func(*testing.T) limit.Limiter { return limit.NewMemory() },
		"redis":  newTestRedis,
	} {
		t.Run(name, func(t *testing.T) {
			a := admit.New(admit.Options{Limiter: lim(t), Models: map[string]admit.ModelPolicy{"m": {InputPrice: 1, OutputPrice: 1000}}})
			k := &keys.Key{ID: "key_edge_" + name, BudgetUSD: 1}
			for _, out := range []int64{30000 * (1 << 31), math.MaxInt64, math.MaxInt64 - 1} {
				_, err := a.Admit(context.Background(), policy.AdmitRequest{Principal: keys.Principal{Key: k}, Model: "m", Endpoint: "chat",
					PromptTokens: math.MaxInt64, OutputTokens: out})
				var e *apierror.Error
				if !errors.As(err, &e) || e.Code != "budget_exceeded" {
					t.Fatalf("output bound %d: %v, want a budget refusal", out, err)
				}
			}
			// A request that fits is still admitted.
			tk, err := a.Admit(context.Background(), policy.AdmitRequest{Principal: keys.Principal{Key: k}, Model: "m", Endpoint: "chat",
				PromptTokens: 10, OutputTokens: 100})
			if err != nil {
				t.Fatalf("a $0.10 request on a $1 budget: %v", err)
			}
			tk.Done(&usage.Record{PromptTokens: 10, CompletionTokens: 100})
		})
	}
}

func newTestRedis(t *testing.T) limit.Limiter {
	url, prefix := testenv.Redis(t)
	r, err := limit.NewRedis(context.Background(), url, limit.RedisOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
