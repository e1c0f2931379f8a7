package limit

import (
	"context"
	"strconv"
	"sync"
	"time"

	"llmgate/internal/sat"
)

// fallback enforces this replica's share of every limit while Redis is
// unreachable, so that N replicas together stay near each limit instead of
// dropping all of them:
//
//   - RPM, TPM and concurrency limits are divided by the replica count n
//     (rounded up, so the sum exceeds a limit by less than n). Each rate
//     bucket starts from 1/n of the level this replica last saw in Redis,
//     less the most the other replicas took between two of its looks in
//     the last 10 s (they may have taken that much unseen just before Redis
//     went away), rather than full: an outage hands out no fresh minute.
//   - A budget's base is the larger of the shared spend this replica last
//     saw (settled and reserved, all replicas) and the ledger's last figure.
//     Other replicas may have admitted requests this one has not seen in
//     the moment before Redis went away; they are assumed to be at most what
//     the others held reserved in flight at this replica's operations over
//     the last 10 s (their peak), which is held back. Each replica may then
//     spend 1/n of what is left. A ledger figure read during the outage that
//     exceeds base plus this replica's own settled spend narrows that share
//     when 1/n of what it leaves is less, and never widens it: it includes
//     what the other replicas spent of their shares, and a replica that
//     divided what is left again on its own would take part of theirs.
//
// Requests already in flight when Redis went away are not counted against
// the local concurrency share; their reservations are in the base.
type fallback struct {
	r   *Redis
	n   int64
	mem *Memory

	mu      sync.Mutex
	budgets map[string]*fbBudget // spend key
	preset  map[string]bool      // scopes started from their snapshot
}

// fbBudget is one budget window as the fallback counts it.
type fbBudget struct {
	base              int64 // shared spend when the outage began (or the ledger's since)
	unseen            int64 // held back for others' admissions this replica did not see
	settled, reserved int64 // this replica's, since then
	// The last ledger figure read since that exceeded base + settled, and
	// this replica's settled spend since that read.
	ledger, since int64
	rebased       bool
}

// room is what this replica may still take of a budget of nanos on its
// 1/n share: its share of what was left when the outage began, or of what
// the ledger said was left since if that is less.
func (b *fbBudget) room(nanos, n int64) int64 {
	// Saturating: counters and costs may sit at the end of the int64 range.
	r := sat.Add(sat.Add(sat.Add(nanos, -b.base), -b.unseen)/n, -b.settled)
	if b.rebased {
		r = min(r, sat.Add(sat.Add(nanos, -b.ledger)/n, -b.since))
	}
	return sat.Add(r, -b.reserved)
}

// spentSettled is the window's settled spend as the fallback counts it.
func (b *fbBudget) spentSettled() int64 {
	s := sat.Add(b.base, b.settled)
	if b.rebased {
		s = max(s, sat.Add(b.ledger, b.since))
	}
	return s
}

func newFallback(r *Redis, n int64) *fallback {
	return &fallback{r: r, n: max(1, n), mem: NewMemory(), budgets: map[string]*fbBudget{}, preset: map[string]bool{}}
}

// share is a limit's 1/n, rounded up; 0 stays unlimited.
func share(limit, n int64) int64 {
	if limit <= 0 {
		return 0
	}
	return (limit + n - 1) / n
}

// scaled returns the request with its rate and concurrency limits divided
// and its budgets left out (the fallback counts them itself).
func (f *fallback) scaled(scopes *[MaxScopes]Scope, n int) [MaxScopes]Scope {
	out := *scopes
	for i := 0; i < n; i++ {
		s := &out[i]
		s.RPM, s.TPM, s.MaxConc = share(s.RPM, f.n), share(s.TPM, f.n), share(s.MaxConc, f.n)
		s.BudgetNanos = 0
	}
	return out
}

// budget returns a window's local count, starting it from what was last
// known; f.mu is held.
func (f *fallback) budget(key string, s *Scope) *fbBudget {
	if b := f.budgets[key]; b != nil {
		return b
	}
	b := &fbBudget{base: f.knownSpend(s.ID, s.BudgetWindow)}
	if sn, ok := f.r.snapshot(s.ID); ok && sn.hasSpent && sn.window == s.BudgetWindow && time.Since(sn.peakAt) <= peakWindow {
		b.unseen = sn.othersPeak
	}
	f.budgets[key] = b
	return b
}

// knownSpend is the larger of the shared spend last seen and the ledger's
// last figure.
func (f *fallback) knownSpend(scopeID, window string) int64 {
	var base int64
	if sn, ok := f.r.snapshot(scopeID); ok && sn.hasSpent && sn.window == window {
		base = sn.spent
	}
	return max(base, f.r.seeded(scopeID, window))
}

// acquire admits on the local shares; the caller holds r's gate shared.
func (f *fallback) acquire(r *Redis, req Request) (Lease, Decision) {
	scaled := Request{Scopes: f.scaled(&req.Scopes, req.N), N: req.N, Tokens: req.Tokens}
	var keys [MaxScopes]string
	f.mu.Lock()
	for i := 0; i < req.N; i++ {
		s, ss := &req.Scopes[i], &scaled.Scopes[i]
		if !f.preset[s.ID] {
			f.preset[s.ID] = true
			if sn, ok := r.snapshot(s.ID); ok {
				rl, tl := sn.rl, sn.tl
				if time.Since(sn.reqPeakAt) <= peakWindow {
					rl -= sn.reqPeak
				}
				if time.Since(sn.tokPeakAt) <= peakWindow {
					tl -= sn.tokPeak
				}
				f.mem.preset(s.ID, ss.RPM, ss.TPM, max(0, rl)/float64(f.n), tl/float64(f.n), sn.at)
			}
		}
		if s.BudgetNanos == 0 {
			continue
		}
		keys[i] = r.spendKey(s.ID, s.BudgetWindow)
		b := f.budget(keys[i], s)
		if req.CostNanos > b.room(s.BudgetNanos, f.n) {
			spent := sat.Add(b.spentSettled(), b.reserved)
			f.mu.Unlock()
			return Lease{}, Decision{Scope: s.ID, Limit: LimitBudget, BudgetNanos: s.BudgetNanos, SpentNanos: spent}
		}
	}
	f.reserveLocked(&req, &keys, req.CostNanos)
	f.mu.Unlock()
	_, d, _ := f.mem.Acquire(context.Background(), scaled)
	if !d.Allowed {
		f.mu.Lock()
		f.reserveLocked(&req, &keys, -req.CostNanos)
		f.mu.Unlock()
		return Lease{}, d
	}
	r.reserve(&req, req.CostNanos)
	l := Lease{Scopes: req.Scopes, N: req.N, Tokens: req.Tokens, CostNanos: req.CostNanos, fb: f, gen: r.gen}
	var concKeys []string
	for i := 0; i < req.N; i++ {
		if s := &req.Scopes[i]; s.MaxConc > 0 {
			_, ck, _ := r.keys(s)
			concKeys = append(concKeys, ck)
		}
	}
	if len(concKeys) > 0 {
		// Known to the renewer, so that a recovery puts the slot into the
		// shared set and the release takes it out again.
		l.member = r.replica + ":" + strconv.FormatUint(r.seq.Add(1), 36)
		r.mu.Lock()
		r.active[l.member] = concKeys
		r.mu.Unlock()
	}
	return l, d
}

func (f *fallback) reserveLocked(req *Request, keys *[MaxScopes]string, cost int64) {
	for i := 0; i < req.N; i++ {
		if keys[i] != "" {
			f.budgets[keys[i]].reserved = sat.Add(f.budgets[keys[i]].reserved, cost)
		}
	}
}

// release returns a fallback lease's local slots and settles its budgets.
func (f *fallback) release(l *Lease, actualTokens, actualCost int64) {
	_ = f.mem.Release(context.Background(), Lease{Scopes: f.scaled(&l.Scopes, l.N), N: l.N, Tokens: l.Tokens}, actualTokens, 0)
	f.mu.Lock()
	for i := 0; i < l.N; i++ {
		if s := &l.Scopes[i]; s.BudgetNanos > 0 {
			if b := f.budgets[f.r.spendKey(s.ID, s.BudgetWindow)]; b != nil {
				b.reserved -= l.CostNanos
				b.settled = sat.Add(b.settled, actualCost)
				b.since = sat.Add(b.since, actualCost)
			}
		}
	}
	f.mu.Unlock()
}

// room is what this replica may still spend of a budget window on its
// local share.
func (f *fallback) room(key string, s BudgetSeed) int64 {
	if s.BudgetNanos <= 0 {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.budget(key, &Scope{ID: s.ScopeID, BudgetWindow: s.Window, BudgetNanos: s.BudgetNanos})
	return max(0, b.room(s.BudgetNanos, f.n))
}

// share is one replica's whole share of a budget window as this replica
// counts it: what another replica on its local share may spend.
func (f *fallback) share(key string, s BudgetSeed) int64 {
	if s.BudgetNanos <= 0 {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.budget(key, &Scope{ID: s.ScopeID, BudgetWindow: s.Window, BudgetNanos: s.BudgetNanos})
	return max(0, sat.Add(sat.Add(s.BudgetNanos, -b.base), -b.unseen)/f.n)
}

// seed takes a ledger figure read during the outage: the larger of it and
// what the fallback counts as settled wins, and it may narrow this
// replica's share (see fallback).
func (f *fallback) seed(key string, nanos int64) {
	f.mu.Lock()
	if b := f.budgets[key]; b != nil && nanos > b.spentSettled() {
		b.ledger, b.since, b.rebased = nanos, 0, true
	}
	f.mu.Unlock()
}

// spent is a window's spend as the fallback counts it.
func (f *fallback) spent(r *Redis, key, scopeID, window string) Spend {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.budgets[key]; b != nil {
		return Spend{Settled: b.spentSettled(), Reserved: b.reserved}
	}
	return Spend{Settled: f.knownSpend(scopeID, window)}
}
