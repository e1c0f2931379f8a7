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

// RateSeeds reads from the ledger what every rate-limited key and model
// used since since (a minute ago), second by second, for the limiter to
// rebuild its RPM and TPM buckets after Redis lost them. A key's scope
// counts its requests on every model; a model's counts every key's but the
// master key's, which no limit applies to: both the requests asking for it
// and those it served as a fallback, as admission charged them.
func (a *Admission) RateSeeds(ctx context.Context, ks KeyLister, q usage.RateReader, since time.Time) ([]limit.RateSeed, error) {
	uses, err := q.UseSince(ctx, since)
	if err != nil {
		return nil, err
	}
	if len(uses) == 0 {
		return nil, nil
	}
	list, err := ks.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	limited := map[string]*keys.Key{}
	for _, k := range list {
		if k.RPM > 0 || k.TPM > 0 {
			limited[k.ID] = k
		}
	}
	seeds := map[string]*limit.RateSeed{}
	add := func(scope string, rpm, tpm int64, u usage.SecondUse) {
		s := seeds[scope]
		if s == nil {
			s = &limit.RateSeed{ScopeID: scope, RPM: rpm, TPM: tpm}
			seeds[scope] = s
		}
		s.Uses = append(s.Uses, limit.Use{At: time.Unix(u.Second+1, 0), Requests: u.Requests, Tokens: u.Tokens})
	}
	for _, u := range uses {
		if k := limited[u.KeyID]; k != nil {
			add(a.keyScope(k.ID), int64(k.RPM), int64(k.TPM), u)
		}
		if u.KeyID == "master" {
			continue
		}
		// The requested model's limits took the request at admission,
		// and the fallback's that made the last attempt took it too
		// (AdmitFallback). No model is named "".
		for _, name := range [2]string{u.Model, u.ServedModel} {
			if m := a.models[name]; m != nil && (m.policy.RPM > 0 || m.policy.TPM > 0) {
				add(m.scope, m.policy.RPM, m.policy.TPM, u)
			}
		}
	}
	out := make([]limit.RateSeed, 0, len(seeds))
	for _, s := range seeds {
		out = append(out, *s)
	}
	return out, nil
}
