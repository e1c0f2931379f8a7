package limit

import (
	"context"
	"sync"
	"time"

	"llmgate/internal/sat"
)

// Memory is the in-process limiter. Counters live in this process only, so
// with several replicas each enforces its own limits; use Redis there.
type Memory struct {
	scopes sync.Map // scope ID -> *memScope
	now    func() int64
}

type memScope struct {
	mu                 sync.Mutex
	reqInit, tokInit   bool
	reqLevel, tokLevel float64
	reqLast, tokLast   int64
	reqLimit, tokLimit int64 // limits the levels were computed with
	conc               int64
	window             string
	settled, reserved  int64 // nano-USD in window
}

var _ Limiter = (*Memory)(nil)

// NewMemory returns an in-memory limiter.
func NewMemory() *Memory {
	return &Memory{now: func() int64 { return time.Now().UnixNano() }}
}

// NewMemoryClock returns an in-memory limiter reading time from now (Unix
// nanoseconds), for tests.
func NewMemoryClock(now func() int64) *Memory { return &Memory{now: now} }

func (m *Memory) get(id string) *memScope {
	if v, ok := m.scopes.Load(id); ok {
		return v.(*memScope)
	}
	v, _ := m.scopes.LoadOrStore(id, &memScope{})
	return v.(*memScope)
}

// Acquire implements Limiter.
func (m *Memory) Acquire(_ context.Context, req Request) (Lease, Decision, error) {
	now := m.now()
	var st [MaxScopes]*memScope
	// Scopes are always locked in request order (key, then model), so two
	// requests never wait on each other in opposite orders.
	for i := 0; i < req.N; i++ {
		st[i] = m.get(req.Scopes[i].ID)
		st[i].mu.Lock()
	}
	defer func() {
		for i := 0; i < req.N; i++ {
			st[i].mu.Unlock()
		}
	}()
	d := Decision{Allowed: true}
	var rl, tl [MaxScopes]float64
	for i := 0; i < req.N; i++ {
		s, x := &req.Scopes[i], st[i]
		if s.RPM > 0 {
			if !x.reqInit {
				x.reqInit, x.reqLevel, x.reqLast, x.reqLimit = true, float64(s.RPM), now, s.RPM
			}
			rl[i] = refill(x.reqLevel+raised(x.reqLimit, s.RPM), x.reqLast, now, s.RPM)
		}
		if s.TPM > 0 {
			if !x.tokInit {
				x.tokInit, x.tokLevel, x.tokLast, x.tokLimit = true, float64(s.TPM), now, s.TPM
			}
			tl[i] = refill(x.tokLevel+raised(x.tokLimit, s.TPM), x.tokLast, now, s.TPM)
		}
		if s.BudgetNanos > 0 && x.window != s.BudgetWindow {
			x.window, x.settled, x.reserved = s.BudgetWindow, 0, 0
		}
		switch {
		case s.MaxConc > 0 && x.conc >= s.MaxConc:
			d.Allowed, d.Limit, d.RetryAfter = false, LimitConcurrency, time.Second
		case s.RPM > 0 && rl[i] < 1:
			d.Allowed, d.Limit, d.RetryAfter = false, LimitRequests, wait(rl[i], 1, s.RPM)
		case s.TPM > 0 && tl[i] < float64(min(req.Tokens, s.TPM)):
			d.Allowed, d.Limit, d.RetryAfter = false, LimitTokens, wait(tl[i], float64(min(req.Tokens, s.TPM)), s.TPM)
		case s.BudgetNanos > 0 && sat.Add(sat.Add(x.settled, x.reserved), req.CostNanos) > s.BudgetNanos:
			d.Allowed, d.Limit, d.BudgetNanos, d.SpentNanos = false, LimitBudget, s.BudgetNanos, sat.Add(x.settled, x.reserved)
		}
		if !d.Allowed {
			d.Scope = s.ID
			fillHeaders(&d, &req, i+1, &rl, &tl)
			return Lease{}, d, nil
		}
	}
	for i := 0; i < req.N; i++ {
		s, x := &req.Scopes[i], st[i]
		if s.RPM > 0 {
			rl[i]--
			x.reqLevel, x.reqLast, x.reqLimit = rl[i], now, s.RPM
		}
		if s.TPM > 0 {
			tl[i] -= float64(req.Tokens)
			x.tokLevel, x.tokLast, x.tokLimit = tl[i], now, s.TPM
		}
		if s.MaxConc > 0 {
			x.conc++
		}
		if s.BudgetNanos > 0 {
			x.reserved = sat.Add(x.reserved, req.CostNanos)
		}
	}
	fillHeaders(&d, &req, req.N, &rl, &tl)
	return Lease{Scopes: req.Scopes, N: req.N, Tokens: req.Tokens, CostNanos: req.CostNanos}, d, nil
}

// fillHeaders sets the x-ratelimit figures: for requests and for tokens
// separately, those of the scope with the least left (the one that binds
// first: the key's or the model's), so a client pacing itself by them
// slows down before either limit refuses it. A refused request's own
// scope has the least left of the limit that refused it. Only the first n
// scopes were read.
func fillHeaders(d *Decision, req *Request, n int, rl, tl *[MaxScopes]float64) {
	ri, ti := -1, -1
	for i := 0; i < n; i++ {
		s := &req.Scopes[i]
		if s.RPM > 0 && (ri < 0 || rl[i] < rl[ri]) {
			ri = i
		}
		if s.TPM > 0 && (ti < 0 || tl[i] < tl[ti]) {
			ti = i
		}
	}
	if ri >= 0 {
		rpm := req.Scopes[ri].RPM
		d.LimitRequests, d.RemainingRequests = rpm, max(0, int64(rl[ri]))
		d.ResetRequests = wait(rl[ri], float64(rpm), rpm)
	}
	if ti >= 0 {
		tpm := req.Scopes[ti].TPM
		d.LimitTokens, d.RemainingTokens = tpm, max(0, int64(tl[ti]))
		d.ResetTokens = wait(tl[ti], float64(tpm), tpm)
	}
}

// Release implements Limiter.
func (m *Memory) Release(_ context.Context, l Lease, actualTokens, actualCostNanos int64) error {
	for i := 0; i < l.N; i++ {
		s := &l.Scopes[i]
		if s.MaxConc == 0 && s.TPM == 0 && s.BudgetNanos == 0 {
			continue
		}
		x := m.get(s.ID)
		x.mu.Lock()
		if s.MaxConc > 0 && x.conc > 0 {
			x.conc--
		}
		if s.TPM > 0 && x.tokInit {
			x.tokLevel = min(x.tokLevel-float64(actualTokens)+float64(l.Tokens), float64(s.TPM))
		}
		if s.BudgetNanos > 0 && x.window == s.BudgetWindow {
			x.reserved = max(0, x.reserved-l.CostNanos)
			x.settled = sat.Add(x.settled, actualCostNanos)
		}
		x.mu.Unlock()
	}
	return nil
}

// SeedBudget implements Limiter.
func (m *Memory) SeedBudget(_ context.Context, scopeID, window string, nanos int64, _ time.Duration) error {
	x := m.get(scopeID)
	x.mu.Lock()
	if x.window != window {
		x.window, x.settled, x.reserved = window, nanos, 0
	} else {
		x.settled = max(x.settled, nanos)
	}
	x.mu.Unlock()
	return nil
}

// Spent implements Limiter.
func (m *Memory) Spent(_ context.Context, scopeID, window string) (Spend, error) {
	x := m.get(scopeID)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.window != window {
		return Spend{}, nil
	}
	return Spend{Settled: x.settled, Reserved: x.reserved}, nil
}

// preset starts a scope's buckets at the given levels as of at (Unix ns)
// instead of full, unless the scope is already in use: the local fallback
// begins from its share of what the shared buckets had left.
func (m *Memory) preset(id string, rpm, tpm int64, reqLevel, tokLevel float64, at int64) {
	x := m.get(id)
	x.mu.Lock()
	defer x.mu.Unlock()
	if rpm > 0 && !x.reqInit {
		x.reqInit, x.reqLevel, x.reqLast, x.reqLimit = true, min(reqLevel, float64(rpm)), at, rpm
	}
	if tpm > 0 && !x.tokInit {
		x.tokInit, x.tokLevel, x.tokLast, x.tokLimit = true, min(tokLevel, float64(tpm)), at, tpm
	}
}

// Close implements Limiter.
func (m *Memory) Close() error { return nil }
