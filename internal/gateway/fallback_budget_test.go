package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/limit"
	"llmgate/internal/usage"
)

// A free local model (price 0, a vLLM server) with a priced cloud model
// as its fallback: a request the cloud model served is paid for at the
// cloud model's prices, by the record's cost and by the key's budget, and
// the budget's reservation covers the fallback before anything is sent.

const fallbackInPrice, fallbackOutPrice = 3.0, 15.0 // cloud's, USD per 1M tokens

// fallbackGW starts a gateway where model local (free, on the local
// upstream) falls back to model cloud (priced, on the cloud upstream), and
// a key with the given budget; it returns the gateway, the key and its
// secret.
func fallbackGW(t *testing.T, limiterCfg string, local, cloud *faultUpstream, budget float64) (*faultGW, *keys.Key, string) {
	t.Helper()
	f := startFaultGW(t, limiterCfg+fmt.Sprintf(`backends:
  vllm: {url: %s/v1}
  api: {url: %s/v1}
models:
  local: {backend: vllm, fallbacks: [cloud]}
  cloud: {backend: api, input_price: %v, output_price: %v}
`, local.URL, cloud.URL, fallbackInPrice, fallbackOutPrice))
	ctx := context.Background()
	k, secret, err := CreateKey(ctx, f.g.Store, keys.Key{Name: "team", BudgetUSD: budget})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.g.Verifier.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	return f, k, secret
}

// postAs sends body to path as the key with secret.
func (f *faultGW) postAs(secret, path, body string) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+f.g.Addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// keySpent is the key's settled and reserved spend in the limiter.
func (f *faultGW) keySpent(k *keys.Key) limit.Spend {
	f.t.Helper()
	window, _ := f.g.acct.adm.Window(k.BudgetPeriod, time.Now())
	s, err := f.g.acct.lim.Spent(context.Background(), "key:"+k.ID, window)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// records flushes the ledger and returns the key's records.
func (f *faultGW) records(keyID string) []usage.Record {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.g.Ledger.Flush(ctx); err != nil {
		f.t.Fatal(err)
	}
	recs, err := f.g.Store.Recent(ctx, 1000)
	if err != nil {
		f.t.Fatal(err)
	}
	var mine []usage.Record
	for _, r := range recs {
		if r.KeyID == keyID {
			mine = append(mine, r)
		}
	}
	return mine
}

// TestFallbackBudget_ServedByTheFallbackIsPricedAtItsPrices: local's only
// deployment answers 500, cloud serves (5 prompt and 2 completion tokens,
// streamed or not). The record keeps the requested model and names
// cloud's backend; its cost is cloud's prices times the tokens, and the
// key's budget is charged exactly that. (Priced as the requested free
// model, the record cost $0 and the budget never ran out.)
func TestFallbackBudget_ServedByTheFallbackIsPricedAtItsPrices(t *testing.T) {
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		local := newUpstream(t, "local", status(http.StatusInternalServerError))
		cloud := newUpstream(t, "cloud", answer)
		f, k, secret := fallbackGW(t, limiterCfg, local, cloud, 10)
		const want = (5*fallbackInPrice + 2*fallbackOutPrice) / 1e6
		for i, stream := range []bool{false, true} {
			code, body := f.postAs(secret, "/v1/chat/completions",
				fmt.Sprintf(`{"model":"local","stream":%v,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`, stream))
			if code != http.StatusOK || !strings.Contains(body, "cloud") {
				t.Fatalf("stream=%v: %d %s; want cloud's answer", stream, code, body)
			}
			if s := f.keySpent(k); s.Settled != int64(i+1)*int64(math.Round(want*limit.NanosPerUSD)) || s.Reserved != 0 {
				t.Fatalf("stream=%v: key spend %+v, want %d requests at cloud's $%g settled and nothing reserved", stream, s, i+1, want)
			}
		}
		wantHits(t, map[*faultUpstream]int64{local: 2, cloud: 2})
		recs := f.records(k.ID)
		if len(recs) != 2 {
			t.Fatalf("%d records, want 2: %+v", len(recs), recs)
		}
		for _, r := range recs {
			if r.Model != "local" || r.Backend != "api" || r.Status != http.StatusOK || r.PromptTokens != 5 || r.CompletionTokens != 2 {
				t.Fatalf("record %+v: want model local served by backend api with 5+2 tokens", r)
			}
			if math.Abs(r.CostUSD-want) > 1e-12 {
				t.Fatalf("record cost $%g, want cloud's 5×$%g + 2×$%g per 1M = $%g", r.CostUSD, fallbackInPrice, fallbackOutPrice, want)
			}
		}
	})
}

// TestFallbackBudget_ReservationCoversTheFallback: local serves for
// nothing, but every request to it may fall back to cloud and be charged
// there, so it reserves at cloud's prices. With $0.01 of budget, 100
// output tokens ($0.0015 at cloud's $15 per 1M) are admitted and local
// serves them free; 1000 ($0.015) are refused with a 429 budget_exceeded
// in OpenAI's error envelope, and no backend is asked. (Reserved at the
// free model's prices, both were admitted.)
func TestFallbackBudget_ReservationCoversTheFallback(t *testing.T) {
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		local := newUpstream(t, "local", answer)
		cloud := newUpstream(t, "cloud", answer)
		f, k, secret := fallbackGW(t, limiterCfg, local, cloud, 0.01)

		code, body := f.postAs(secret, "/v1/chat/completions", `{"model":"local","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
		if code != http.StatusOK || !strings.Contains(body, "from local") {
			t.Fatalf("%d %s; want local's answer", code, body)
		}
		if s := f.keySpent(k); s.Settled != 0 || s.Reserved != 0 {
			t.Fatalf("key spend %+v after local served, want none", s)
		}

		code, body = f.postAs(secret, "/v1/chat/completions", `{"model":"local","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`)
		if code != http.StatusTooManyRequests {
			t.Fatalf("%d %s; want a 429: the fallback's worst case exceeds the budget", code, body)
		}
		var env struct {
			Error struct {
				Code, Message string
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error.Code != "budget_exceeded" || !strings.Contains(env.Error.Message, "reserves up to $0.015") {
			t.Fatalf("refusal %s: want OpenAI's error envelope with code budget_exceeded naming the $0.015 reserved", body)
		}
		wantHits(t, map[*faultUpstream]int64{local: 1, cloud: 0})
		if s := f.keySpent(k); s.Settled != 0 || s.Reserved != 0 {
			t.Fatalf("key spend %+v after a refusal, want none", s)
		}
	})
}

// TestFallback_AKeyFallsBackOnlyToModelsItMayUse: a key whose allow-list
// names local but not cloud does not reach cloud by local failing (it
// gets local's failure, and cloud is never asked), nor is it reserved at
// cloud's prices; a key that may use both is served by cloud.
func TestFallback_AKeyFallsBackOnlyToModelsItMayUse(t *testing.T) {
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		local := newUpstream(t, "local", status(http.StatusInternalServerError))
		cloud := newUpstream(t, "cloud", answer)
		f, _, _ := fallbackGW(t, limiterCfg, local, cloud, 10)
		ctx := context.Background()
		_, localOnly, err := CreateKey(ctx, f.g.Store, keys.Key{Name: "local-only", Models: []string{"local"}, BudgetUSD: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		_, both, err := CreateKey(ctx, f.g.Store, keys.Key{Name: "both", Models: []string{"local", "cloud"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.g.Verifier.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		// 1000 output tokens at cloud's $15 per 1M would reserve $0.015,
		// over the $0.01 budget: only local's price (free) counts.
		code, body := f.postAs(localOnly, "/v1/chat/completions", `{"model":"local","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`)
		if code == http.StatusOK || code == http.StatusTooManyRequests || strings.Contains(body, "from cloud") {
			t.Fatalf("local-only key: %d %s; want local's failure (not cloud's answer, nor a budget refusal at cloud's prices)", code, body)
		}
		wantHits(t, map[*faultUpstream]int64{local: 1, cloud: 0})
		code, body = f.postAs(both, "/v1/chat/completions", `{"model":"local","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`)
		if code != http.StatusOK || !strings.Contains(body, "from cloud") {
			t.Fatalf("key allowed both: %d %s; want cloud's answer", code, body)
		}
		wantHits(t, map[*faultUpstream]int64{local: 2, cloud: 1})
	})
}
