package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/usage"
)

// LimitAliasBodies are chat bodies that set the output limit through two
// aliases in every order, each capping the answer at Big tokens for a
// backend with vLLM's rule (max_completion_tokens over max_tokens) or the
// opposite one, while another alias says 1.
var LimitAliasBodies = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":2000,"max_tokens":1}`,
	`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"max_completion_tokens":2000}`,
	`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2000,"max_completion_tokens":1}`,
	`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":1,"max_tokens":2000}`,
	`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"n_predict":2000}`,
}

// BigOutput is the largest output limit in LimitAliasBodies.
const BigOutput = 2000

// GreedyUpstream is an OpenAI-compatible backend that generates as much as
// any output-limit alias in the request allows (the worst case for a
// budget: vLLM takes max_completion_tokens, llama.cpp n_predict, others
// max_tokens), for every choice (n, best_of) of every prompt of a list, as
// vLLM does, holding each request for Delay so that many are in flight.
// Embeddings are billed for every input, token ids one token each.
type GreedyUpstream struct {
	*httptest.Server
	Delay        time.Duration
	PromptTokens int
	inflight     atomic.Int64
	maxInFlight  atomic.Int64
}

// NewGreedyUpstream starts one; it is closed when the test ends.
func NewGreedyUpstream(t testing.TB, delay time.Duration, promptTokens int) *GreedyUpstream {
	u := &GreedyUpstream{Delay: delay, PromptTokens: promptTokens}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *GreedyUpstream) serve(w http.ResponseWriter, r *http.Request) {
	n := u.inflight.Add(1)
	defer u.inflight.Add(-1)
	for m := u.maxInFlight.Load(); n > m && !u.maxInFlight.CompareAndSwap(m, n); m = u.maxInFlight.Load() {
	}
	raw, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(raw, &req)
	out := 16 // an engine's answer when nothing limits it is not what this tests
	for _, k := range []string{"max_tokens", "max_completion_tokens", "n_predict", "max_new_tokens"} {
		if v, ok := req[k].(float64); ok && int(v) > out {
			out = int(v)
		}
	}
	choices := 1
	for _, k := range []string{"n", "best_of"} {
		if v, ok := req[k].(float64); ok && v > float64(choices) {
			choices = int(min(v, 1<<40))
		}
	}
	time.Sleep(u.Delay)
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.HasSuffix(r.URL.Path, "/embeddings"):
		prompt := inputTokens(req["input"])
		fmt.Fprintf(w, `{"object":"list","model":"m","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"usage":{"prompt_tokens":%d,"total_tokens":%d}}`, prompt, prompt)
	case strings.HasSuffix(r.URL.Path, "/completions") && !strings.HasSuffix(r.URL.Path, "/chat/completions"):
		prompts := 1
		if l, ok := req["prompt"].([]any); ok && len(l) > 0 {
			if _, ids := l[0].(float64); !ids {
				prompts = len(l)
			}
		}
		gen := int64(out) * int64(choices) * int64(prompts)
		fmt.Fprintf(w, `{"id":"c1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"x","finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			u.PromptTokens*prompts, gen, int64(u.PromptTokens*prompts)+gen)
	default:
		gen := int64(out) * int64(choices)
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			u.PromptTokens, gen, int64(u.PromptTokens)+gen)
	}
}

// inputTokens counts an embeddings input as an engine would: token ids one
// each, text about four bytes a token, every element of a list.
func inputTokens(v any) int {
	switch x := v.(type) {
	case string:
		return max(1, len(x)/4)
	case float64:
		return 1
	case []any:
		n := 0
		for _, e := range x {
			n += inputTokens(e)
		}
		return n
	}
	return 1
}

// MaxInFlight is the most requests the upstream held at once.
func (u *GreedyUpstream) MaxInFlight() int64 { return u.maxInFlight.Load() }

// CostBound is what a key with budget may spend at most when every
// request's reservation covers its maximum: the budget plus one request's
// maximum cost (the request admitted last may cost up to its reservation
// beyond what was left).
func CostBound(budget, inputPrice, outputPrice float64, promptTokens int) (maxRequest, bound float64) {
	maxRequest = (float64(promptTokens)*inputPrice + float64(BigOutput)*outputPrice) / 1e6
	return maxRequest, budget + maxRequest + 1e-9*math.Max(1, budget)
}

// SendAliasWaves sends waves of concurrent LimitAliasBodies requests,
// spread over the gateways' base URLs (without /v1), and counts admitted
// (200) and refused (429) answers.
func SendAliasWaves(t testing.TB, urls []string, secret string, waves, perWave int) (ok, refused int) {
	for w := 0; w < waves; w++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := 0; i < perWave; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := LimitAliasBodies[(w*perWave+i)%len(LimitAliasBodies)]
				req, _ := http.NewRequest(http.MethodPost, urls[i%len(urls)]+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				defer mu.Unlock()
				switch resp.StatusCode {
				case 200:
					ok++
				case 429:
					refused++
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}()
		}
		wg.Wait()
	}
	return ok, refused
}

// KeySpend waits (up to 10 s) for n ledger records of a key and returns
// their cost and count.
func KeySpend(t testing.TB, q usage.Querier, keyID string, n int) (float64, int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		rows, err := q.Summary(context.Background(), usage.Filter{KeyID: keyID, GroupBy: []string{"key"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 1 && rows[0].Requests >= int64(n) || time.Now().After(deadline) {
			if len(rows) != 1 {
				t.Fatalf("no ledger records for %s", keyID)
			}
			return rows[0].CostUSD, int(rows[0].Requests)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
