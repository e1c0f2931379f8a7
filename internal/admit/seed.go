package admit

import (
	"context"
	"log/slog"
	"time"

	"llmgate/internal/keys"
	"llmgate/internal/usage"
)

// KeyLister lists keys (keys.Store satisfies it).
type KeyLister interface {
	ListKeys(ctx context.Context) ([]*keys.Key, error)
}

// SeedBudgets loads, from the ledger, what every budgeted key has spent in
// its current period and gives it to the limiter for counters it does not
// have yet (a fresh process, a new Redis, a budget added to a used key).
// Counters that exist win: they also hold reservations in flight.
func (a *Admission) SeedBudgets(ctx context.Context, ks KeyLister, q usage.Querier) error {
	list, err := ks.ListKeys(ctx)
	if err != nil {
		return err
	}
	now := a.now()
	spent := map[string]map[string]float64{} // period -> key ID -> USD
	for _, k := range list {
		if k.BudgetUSD <= 0 || k.Usable(now) != nil {
			continue
		}
		p := k.BudgetPeriod
		if spent[p] == nil {
			rows, err := q.Summary(ctx, usage.Filter{Since: keys.PeriodStart(p, now), Until: now.Add(time.Minute), GroupBy: []string{"key"}})
			if err != nil {
				return err
			}
			spent[p] = map[string]float64{}
			for _, r := range rows {
				spent[p][r.KeyID] = r.CostUSD
			}
		}
		window, ttl := a.windows.get(p, now)
		if err := a.lim.SeedBudget(ctx, a.keyScope(k.ID), window, micros(spent[p][k.ID]), ttl); err != nil {
			return err
		}
	}
	return nil
}

// RunSeeder seeds budgets now and then every interval until ctx ends, so
// new periods and newly budgeted keys start from the ledger's figures.
func (a *Admission) RunSeeder(ctx context.Context, ks KeyLister, q usage.Querier, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := a.SeedBudgets(ctx, ks, q); err != nil && ctx.Err() == nil {
			log.Warn("budget seeding from the ledger failed; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
