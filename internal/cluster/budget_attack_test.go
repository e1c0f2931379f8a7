package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"llmgate/internal/admin"
	"llmgate/internal/store/postgres"
	"llmgate/internal/testenv"
)

// TestReplicas_TokenLimitAliasesCannotOverspendASharedBudget is the
// alias attack against two replicas sharing PostgreSQL and Redis: a $1
// budget, waves of 20 concurrent requests spread over both replicas, output
// limits given as two aliases in every order (1 and 2000), a backend that
// generates as much as any alias allows. Spend stays within the budget plus
// one request's maximum cost.
func TestReplicas_TokenLimitAliasesCannotOverspendASharedBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts two gateway processes")
	}
	const inPrice, outPrice, budget, prompt = 50.0, 50.0, 1.0, 10
	pg := testenv.Postgres(t)
	redisURL, prefix := testenv.Redis(t)
	up := testenv.NewGreedyUpstream(t, 30*time.Millisecond, prompt)
	bin := buildBinary(t)
	cfg := fmt.Sprintf("database: %q\nredis: %q\nredis_prefix: %q\nbackends:\n  up: {url: %q}\nmodels:\n  m: {backend: up, input_price: %v, output_price: %v}\n",
		pg, redisURL, prefix, up.URL+"/v1", inPrice, outPrice)
	a := startReplica(t, bin, "A", cfg)
	b := startReplica(t, bin, "B", cfg)
	ctx := context.Background()
	is, err := admin.NewClient(a.base, master).CreateKey(ctx, admin.KeySpec{Name: ptr("alias-budget"), BudgetUSD: ptr(budget)})
	if err != nil {
		t.Fatal(err)
	}
	waitKnown(t, b, is.Secret, testenv.LimitAliasBodies[0], nil)
	ok, refused := testenv.SendAliasWaves(t, []string{a.base, b.base}, is.Secret, 3, 20)
	a.stop(t)
	b.stop(t)
	st, err := postgres.Open(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	spent, n := testenv.KeySpend(t, st, is.Key.ID, ok+refused+1) // +1: the probe that waited for B
	maxReq, bound := testenv.CostBound(budget, inPrice, outPrice, prompt)
	t.Logf("two replicas, $%.2f budget, 3 waves of 20 alias requests: %d admitted, %d refused; spent $%.4f (bound $%.4f); backend held %d at once",
		budget, ok, refused, spent, bound, up.MaxInFlight())
	if spent > bound {
		t.Fatalf("spent $%.4f across two replicas, more than the budget plus one request ($%.4f)", spent, bound)
	}
	if ok == 0 || refused == 0 || n != ok+refused+1 {
		t.Fatalf("%d admitted, %d refused, %d records: want some of each and one record per request", ok, refused, n)
	}
	if spent < budget-maxReq {
		t.Fatalf("spent $%.4f: the shared budget was not used (refusing too early)", spent)
	}
}
