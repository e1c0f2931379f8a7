package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/admin"
	"llmgate/internal/store/postgres"
	"llmgate/internal/testenv"
)

// TestReplicas_HugeChoicesCannotOverspendASharedBudget is the n=2^31
// attack of issue 24 against two replicas sharing PostgreSQL and Redis
// (40 of 40 were admitted): 40 requests at once, spread over both, with
// "n": 2147483648 and a 30,000-token limit at $1,000 per million output
// tokens. Chat completions refuse the n; Messages and Responses reserve one
// choice; the key spends at most its budget plus one request.
func TestReplicas_HugeChoicesCannotOverspendASharedBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts two gateway processes")
	}
	const inPrice, outPrice, budget, prompt, limit = 1.0, 1000.0, 100.0, 10, 30000
	pg := testenv.Postgres(t)
	redisURL, prefix := testenv.Redis(t)
	up := testenv.NewGreedyUpstream(t, 30*time.Millisecond, prompt)
	bin := buildBinary(t)
	cfg := fmt.Sprintf("database: %q\nredis: %q\nredis_prefix: %q\nbackends:\n  up: {url: %q}\nmodels:\n  m: {backend: up, input_price: %v, output_price: %v}\n",
		pg, redisURL, prefix, up.URL+"/v1", inPrice, outPrice)
	a := startReplica(t, bin, "A", cfg)
	b := startReplica(t, bin, "B", cfg)
	ctx := context.Background()
	is, err := admin.NewClient(a.base, master).CreateKey(ctx, admin.KeySpec{Name: ptr("huge-n"), BudgetUSD: ptr(budget)})
	if err != nil {
		t.Fatal(err)
	}
	probe := `{"model":"m","n":2147483648,"max_tokens":30000,"messages":[{"role":"user","content":"hi"}]}`
	waitKnown(t, b, is.Secret, probe, nil) // a 400 once B knows the key: no record
	bodies := [][2]string{
		{"/v1/chat/completions", probe},
		{"/v1/messages", `{"model":"m","n":2147483648,"max_tokens":30000,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/responses", `{"model":"m","n":2147483648,"max_output_tokens":30000,"store":false,"input":"hi"}`},
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	counts := map[int]int{}
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := []string{a.base, b.base}[i%2]
			req, _ := http.NewRequest(http.MethodPost, base+bodies[i%3][0], strings.NewReader(bodies[i%3][1]))
			req.Header.Set("Authorization", "Bearer "+is.Secret)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			counts[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	a.stop(t)
	b.stop(t)
	st, err := postgres.Open(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	spent, n := testenv.KeySpend(t, st, is.Key.ID, counts[200]+counts[429])
	maxReq := (float64(prompt)*inPrice + limit*outPrice) / 1e6
	bound := budget + maxReq + 1e-9
	t.Logf("two replicas, $%.0f budget, 40 requests with n=2147483648 at once: answers %v, %d records; spent $%.2f (bound $%.2f)",
		budget, counts, n, spent, bound)
	if spent > bound {
		t.Fatalf("spent $%.2f across two replicas, more than the budget plus one request ($%.2f)", spent, bound)
	}
	if counts[200] == 0 || counts[400] != 14 || n != counts[200]+counts[429] {
		t.Fatalf("answers %v, %d records: want some admitted, the 14 chat requests refused with a 400, a record for the others", counts, n)
	}
}
