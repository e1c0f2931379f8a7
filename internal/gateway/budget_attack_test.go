package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/testenv"
)

// TestBudget_TokenLimitAliasesCannotOverspend: a key with a $1 budget sends
// waves of 20 concurrent requests whose output limits are given through two
// aliases in every order (one says 1 token, the other 2000) to a backend
// that generates as much as any alias allows. The reservation must use the
// largest alias, so the key spends at most its budget plus one request's
// maximum cost. (Reading only max_tokens, 20 requests in flight reserved 1
// token each and spent 20 times the budget.)
func TestBudget_TokenLimitAliasesCannotOverspend(t *testing.T) {
	const inPrice, outPrice, budget, prompt = 50.0, 50.0, 1.0, 10
	up := testenv.NewGreedyUpstream(t, 30*time.Millisecond, prompt)
	f := startFaultGW(t, fmt.Sprintf("backends:\n  up: {url: %s/v1}\nmodels:\n  m: {backend: up, input_price: %v, output_price: %v}\n", up.URL, inPrice, outPrice))
	ctx := context.Background()
	k, secret, err := CreateKey(ctx, f.g.Store, keys.Key{Name: "budget", BudgetUSD: budget})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.g.Verifier.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	ok, refused := testenv.SendAliasWaves(t, []string{"http://" + f.g.Addr}, secret, 3, 20)
	maxReq, bound := testenv.CostBound(budget, inPrice, outPrice, prompt)
	spent, n := testenv.KeySpend(t, f.g.Store, k.ID, ok+refused)
	t.Logf("$%.2f budget, 3 waves of 20 alias requests: %d admitted, %d refused; spent $%.4f (bound $%.4f = budget + one request's max $%.4f); backend held %d at once",
		budget, ok, refused, spent, bound, maxReq, up.MaxInFlight())
	if spent > bound {
		t.Fatalf("spent $%.4f, more than the budget plus one request ($%.4f)", spent, bound)
	}
	if ok == 0 || refused == 0 || n != ok+refused {
		t.Fatalf("%d admitted, %d refused, %d records: want some of each and one record per request", ok, refused, n)
	}
	if spent < budget-maxReq {
		t.Fatalf("spent $%.4f: the budget was not used (refusing too early)", spent)
	}
}
