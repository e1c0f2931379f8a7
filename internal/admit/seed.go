package admit

import (
	"context"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/limit"
	"llmgate/internal/usage"
)

// KeyLister lists keys (keys.Store satisfies it).
type KeyLister interface {
	ListKeys(ctx context.Context) ([]*keys.Key, error)
}

// BudgetSeeds reads from the ledger what every budgeted key has spent in
// its current budget window: one query per budget period in use.
func (a *Admission) BudgetSeeds(ctx context.Context, ks KeyLister, q usage.Querier) ([]limit.BudgetSeed, error) {
	list, err := ks.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	now := a.now()
	spent := map[string]map[string]float64{} // period -> key ID -> USD
	var out []limit.BudgetSeed
	for _, k := range list {
		if k.BudgetUSD <= 0 || k.Usable(now) != nil {
			continue
		}
		p := k.BudgetPeriod
		if spent[p] == nil {
			rows, err := q.Summary(ctx, usage.Filter{Since: keys.PeriodStart(p, now), Until: now.Add(time.Minute), GroupBy: []string{"key"}})
			if err != nil {
				return nil, err
			}
			spent[p] = map[string]float64{}
			for _, r := range rows {
				spent[p][r.KeyID] = r.CostUSD
			}
		}
		window, ttl := a.windows.get(p, now)
		out = append(out, limit.BudgetSeed{ScopeID: a.keyScope(k.ID), Window: window, Nanos: nanos(spent[p][k.ID]), TTL: ttl,
			BudgetNanos: nanos(k.BudgetUSD)})
	}
	return out, nil
}

// SeedBudgets gives the limiter the ledger's spend of every budgeted key
// in its current period (a fresh process, a new Redis, a budget added to a
// used key, records another replica settled). The larger of the counter's
// settled spend and the ledger's wins, so a counter that is missing or
// behind the ledger is corrected and one that is ahead (records not yet
// written) is kept; reservations in flight are kept either way.
func (a *Admission) SeedBudgets(ctx context.Context, ks KeyLister, q usage.Querier) error {
	seeds, err := a.BudgetSeeds(ctx, ks, q)
	if err != nil {
		return err
	}
	for _, s := range seeds {
		if err := a.lim.SeedBudget(ctx, s.ScopeID, s.Window, s.Nanos, s.TTL); err != nil {
			return err
		}
	}
	return nil
}

// KeySpend returns what the limiter counts against a key's budget in its
// current window: settled spend and reservations of requests in flight, in
// USD. The budget is enforced against their sum. The settled part can
// exceed the ledger's figure by records not written yet (the ledger writes
// in batches, and holds them in its spool while the database is away).
func (a *Admission) KeySpend(ctx context.Context, k *keys.Key) (settledUSD, reservedUSD float64, err error) {
	window, _ := a.windows.get(k.BudgetPeriod, a.now())
	sp, err := a.lim.Spent(ctx, a.keyScope(k.ID), window)
	if err != nil {
		return 0, 0, err
	}
	return float64(sp.Settled) / limit.NanosPerUSD, float64(sp.Reserved) / limit.NanosPerUSD, nil
}
