package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/testenv"
)

// The budget holes a hostile key holder found (issue 24), each against
// both limiters: the in-memory one and Redis (a key prefix of its own per
// test). A $1 budget, prices that make every token count, 30 requests in
// flight at once against a backend that generates as much as the request
// allows: the key spends at most its budget plus one request's maximum
// cost.

// eachLimiter runs a test with the in-memory limiter and with Redis; the
// extra config lines select the limiter.
func eachLimiter(t *testing.T, run func(t *testing.T, limiterCfg string)) {
	t.Run("memory", func(t *testing.T) { run(t, "") })
	t.Run("redis", func(t *testing.T) {
		url, prefix := testenv.Redis(t)
		run(t, fmt.Sprintf("redis: %q\nredis_prefix: %q\n", url, prefix))
	})
}

// budgetGW starts a gateway in front of a greedy backend with model m at
// the given prices and a key with a budget, and returns it with the key's
// ID and secret.
func budgetGW(t *testing.T, limiterCfg string, up *testenv.GreedyUpstream, inPrice, outPrice, budget float64) (*faultGW, string, string) {
	t.Helper()
	f := startFaultGW(t, limiterCfg+fmt.Sprintf("backends:\n  up: {url: %s/v1}\nmodels:\n  m: {backend: up, input_price: %v, output_price: %v}\n",
		up.URL, inPrice, outPrice))
	ctx := context.Background()
	k, secret, err := CreateKey(ctx, f.g.Store, keys.Key{Name: "hostile", BudgetUSD: budget})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.g.Verifier.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	return f, k.ID, secret
}

// attackReq is one request of a wave.
type attackReq struct{ path, body string }

// sendAtOnce sends every request at the same time and counts the answers
// by status, keeping one body per status for messages.
func sendAtOnce(t *testing.T, addr, secret string, reqs []attackReq) (map[int]int, map[int]string) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	counts, bodies := map[int]int{}, map[int]string{}
	// A client of its own, whose idle connections are closed at the end:
	// a connection the transport dialled but never used would hold the
	// gateway's shutdown for 5 s (net/http waits that long for a new
	// connection's first request).
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	defer client.CloseIdleConnections()
	for _, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+r.path, strings.NewReader(r.body))
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			counts[resp.StatusCode]++
			bodies[resp.StatusCode] = string(b)
		}()
	}
	wg.Wait()
	return counts, bodies
}

// checkSpend waits for the ledger records of the admitted requests (a
// refusal costs nothing) and fails when the key spent more than budget +
// maxRequest.
func checkSpend(t *testing.T, f *faultGW, keyID string, counts map[int]int, budget, maxRequest float64, what string) {
	t.Helper()
	var spent float64
	n := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		recs, err := f.g.Store.Recent(context.Background(), 10_000)
		if err != nil {
			t.Fatal(err)
		}
		spent, n = 0, 0
		for _, r := range recs {
			if r.KeyID == keyID && r.Status == http.StatusOK {
				spent += r.CostUSD
				n++
			}
		}
		if n >= counts[200] || time.Now().After(deadline) {
			break
		}
	}
	bound := budget + maxRequest + 1e-9
	t.Logf("%s: answers %v; %d admitted spent $%.4f of a $%.2f budget (bound $%.4f = budget + one request's max $%.4f)",
		what, counts, n, spent, budget, bound, maxRequest)
	if spent > bound {
		t.Fatalf("%s: spent $%.4f, more than the budget plus one request ($%.4f)", what, spent, bound)
	}
	if n != counts[200] || counts[200] == 0 {
		t.Fatalf("%s: %d answered, %d records of them: want some admitted, each in the ledger", what, counts[200], n)
	}
}

// TestBudget_HugeChoicesCannotOverspend: "n": 2147483648 with a
// 30,000-token limit at $1,000 per million output tokens is a $64 billion
// reservation, which overflowed to a negative cost that every budget
// admitted. Chat completions refuse n above the maximum with a 400 that
// says what to do; Messages and Responses, whose APIs have no n and whose
// backends never get one, reserve one choice ($30 each on a $100 budget).
func TestBudget_HugeChoicesCannotOverspend(t *testing.T) {
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		const inPrice, outPrice, budget, prompt, limit = 1.0, 1000.0, 100.0, 10, 30000
		up := testenv.NewGreedyUpstream(t, 30*time.Millisecond, prompt)
		f, keyID, secret := budgetGW(t, limiterCfg, up, inPrice, outPrice, budget)
		var reqs []attackReq
		for i := 0; i < 10; i++ {
			reqs = append(reqs,
				attackReq{"/v1/chat/completions", `{"model":"m","n":2147483648,"max_tokens":30000,"messages":[{"role":"user","content":"hi"}]}`},
				attackReq{"/v1/messages", `{"model":"m","n":2147483648,"max_tokens":30000,"messages":[{"role":"user","content":"hi"}]}`},
				attackReq{"/v1/responses", `{"model":"m","n":2147483648,"max_output_tokens":30000,"store":false,"input":"hi"}`})
		}
		counts, bodies := sendAtOnce(t, f.g.Addr, secret, reqs)
		maxReq := (float64(prompt)*inPrice + limit*outPrice) / 1e6
		checkSpend(t, f, keyID, counts, budget, maxReq, "n=2147483648")
		if counts[400] != 10 || !strings.Contains(bodies[400], `"invalid_n"`) || !strings.Contains(bodies[400], "send several requests") {
			t.Fatalf("chat with n=2147483648: %d 400s (%s), want 10 invalid_n", counts[400], bodies[400])
		}
	})
}

// TestBudget_PromptListReservesForEveryPrompt: a completions prompt of 100
// prompts (strings, or token-id lists) generates 100 completions; the
// reservation covered one, so one request spent 90 times the budget.
func TestBudget_PromptListReservesForEveryPrompt(t *testing.T) {
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		const inPrice, outPrice, budget, prompt, limit, prompts = 1.0, 100.0, 1.0, 10, 20, 100
		up := testenv.NewGreedyUpstream(t, 30*time.Millisecond, prompt)
		f, keyID, secret := budgetGW(t, limiterCfg, up, inPrice, outPrice, budget)
		texts := `[` + strings.TrimSuffix(strings.Repeat(`"tell me a story",`, prompts), ",") + `]`
		ids := `[` + strings.TrimSuffix(strings.Repeat(`[1,2,3,4,5,6,7,8,9,10],`, prompts), ",") + `]`
		var reqs []attackReq
		for i := 0; i < 15; i++ {
			reqs = append(reqs,
				attackReq{"/v1/completions", `{"model":"m","max_tokens":20,"prompt":` + texts + `}`},
				attackReq{"/v1/completions", `{"model":"m","max_tokens":20,"prompt":` + ids + `}`})
		}
		counts, _ := sendAtOnce(t, f.g.Addr, secret, reqs)
		maxReq := (float64(prompt*prompts)*inPrice + limit*prompts*outPrice) / 1e6
		checkSpend(t, f, keyID, counts, budget, maxReq, "100-prompt lists")
	})
}

// TestBudget_EmbeddingsInputListReservesEveryToken: an embeddings input of
// token-id lists costs one token an id ("1," is two bytes), for every
// element; counted as bytes/4 the reservation was half the cost.
func TestBudget_EmbeddingsInputListReservesEveryToken(t *testing.T) {
	t.Parallel()
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		const inPrice, budget, lists, perList = 1.0, 1.0, 100, 1000
		up := testenv.NewGreedyUpstream(t, 30*time.Millisecond, 0)
		f, keyID, secret := budgetGW(t, limiterCfg, up, inPrice, 0, budget)
		list := `[` + strings.TrimSuffix(strings.Repeat(`1,`, perList), ",") + `]`
		body := `{"model":"m","input":[` + strings.TrimSuffix(strings.Repeat(list+",", lists), ",") + `]}`
		reqs := make([]attackReq, 30)
		for i := range reqs {
			reqs[i] = attackReq{"/v1/embeddings", body}
		}
		counts, _ := sendAtOnce(t, f.g.Addr, secret, reqs)
		maxReq := float64(lists*perList) * inPrice / 1e6
		checkSpend(t, f, keyID, counts, budget, maxReq, "embeddings of 100 token-id lists")
	})
}

// TestCountTokens_CountsAgainstTheKeyRPM: a count generates and bills
// nothing, but it is a request like any other for the key's rate.
func TestCountTokens_CountsAgainstTheKeyRPM(t *testing.T) {
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		up := testenv.NewGreedyUpstream(t, 0, 10)
		f := startFaultGW(t, limiterCfg+fmt.Sprintf("backends:\n  up: {url: %s/v1}\nmodels:\n  m: {backend: up, input_price: 1, output_price: 1}\n", up.URL))
		ctx := context.Background()
		_, secret, err := CreateKey(ctx, f.g.Store, keys.Key{Name: "counter", RPM: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.g.Verifier.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		body := `{"model":"m","messages":[{"role":"user","content":"count me"}]}`
		var got []int
		for i := 0; i < 5; i++ {
			req, _ := http.NewRequest(http.MethodPost, "http://"+f.g.Addr+"/v1/messages/count_tokens", strings.NewReader(body))
			req.Header.Set("x-api-key", secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got = append(got, resp.StatusCode)
			if resp.StatusCode == 429 && !strings.Contains(string(b), `"rate_limit_error"`) {
				t.Fatalf("a refused count is not in Anthropic's envelope: %s", b)
			}
		}
		if fmt.Sprint(got) != "[200 200 200 429 429]" {
			t.Fatalf("five counts on a key with rpm 3: %v, want three answered and then 429", got)
		}
	})
}

// spacedNoUsage is a backend that reports no usage and spaces its JSON as
// Python's json.dumps does ("content": "..."), generating 4 characters (one
// token by the estimate) for every token max_tokens allows, streamed or not.
func spacedNoUsage(t *testing.T) *faultUpstream {
	return newUpstream(t, "spaced", func(u *faultUpstream, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		var req struct {
			MaxTokens int  `json:"max_tokens"`
			Stream    bool `json:"stream"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &req)
		time.Sleep(30 * time.Millisecond) // keep the wave in flight together
		text := strings.Repeat("abcd", req.MaxTokens)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": %q}, "finish_reason": "length"}]}`, text)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < len(text); i += 40 {
			fmt.Fprintf(w, "data: {\"id\": \"x\", \"object\": \"chat.completion.chunk\", \"choices\": [{\"index\": 0, \"delta\": {\"content\": %q}}]}\n\n", text[i:min(i+40, len(text))])
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
}

// TestBudget_SpacedJSONWithoutUsageUsesUpTheBudget: a backend that sends
// no usage and spaces its JSON was recorded with completion_tokens=0 and
// cost $0, so its key never ran out of budget. Two waves of 30 requests at
// once: the first uses the budget up (by the estimate), the second is
// refused, and the spend stays within the budget plus one request.
func TestBudget_SpacedJSONWithoutUsageUsesUpTheBudget(t *testing.T) {
	t.Parallel()
	eachLimiter(t, func(t *testing.T, limiterCfg string) {
		const inPrice, outPrice, budget, limit = 1.0, 1000.0, 1.0, 100
		up := spacedNoUsage(t)
		f := startFaultGW(t, limiterCfg+fmt.Sprintf("backends:\n  up: {url: %s/v1}\nmodels:\n  m: {backend: up, input_price: %v, output_price: %v}\n",
			up.URL, inPrice, outPrice))
		ctx := context.Background()
		k, secret, err := CreateKey(ctx, f.g.Store, keys.Key{Name: "spaced", BudgetUSD: budget})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.g.Verifier.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		wave := func() map[int]int {
			var reqs []attackReq
			for i := 0; i < 15; i++ {
				reqs = append(reqs,
					attackReq{"/v1/chat/completions", `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`},
					attackReq{"/v1/chat/completions", `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`})
			}
			counts, _ := sendAtOnce(t, f.g.Addr, secret, reqs)
			return counts
		}
		first := wave()
		maxReq := (50*inPrice + limit*outPrice) / 1e6 // a prompt of well under 50 tokens
		checkSpend(t, f, k.ID, first, budget, maxReq, "first wave")
		second := wave()
		all := map[int]int{200: first[200] + second[200], 429: first[429] + second[429]}
		checkSpend(t, f, k.ID, all, budget, maxReq, "both waves")
		var spent float64
		recs, _ := f.g.Store.Recent(ctx, 10_000)
		for _, r := range recs {
			if r.KeyID == k.ID && r.Status == http.StatusOK {
				spent += r.CostUSD
				if !r.Estimated || r.CompletionTokens < limit*9/10 {
					t.Fatalf("record %+v: want an estimate of about %d completion tokens", r, limit)
				}
			}
		}
		if spent < budget-maxReq || second[200] > 1 {
			t.Fatalf("spent $%.4f of $%.2f, the second wave had %d admitted: the answers without usage were not billed", spent, budget, second[200])
		}
	})
}
