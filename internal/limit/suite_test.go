package limit_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/limit"
	"llmgate/internal/testenv"
)

// The same cases run against Memory and Redis. They use the real clock, so
// refill assertions carry tolerances that hold on a loaded machine.

func req(scopes ...limit.Scope) limit.Request {
	r := limit.Request{N: len(scopes), Tokens: 10}
	copy(r.Scopes[:], scopes)
	return r
}

func runSuite(t *testing.T, newLimiter func(t *testing.T) limit.Limiter) {
	ctx := context.Background()
	t.Run("RPM_BurstAdmitsLimitThenRefuses", func(t *testing.T) {
		l := newLimiter(t)
		r := req(limit.Scope{ID: "key:a", RPM: 5})
		for i := 0; i < 5; i++ {
			_, d, err := l.Acquire(ctx, r)
			if err != nil || !d.Allowed {
				t.Fatalf("request %d refused: %+v %v", i+1, d, err)
			}
			if d.LimitRequests != 5 || d.RemainingRequests != int64(4-i) {
				t.Fatalf("request %d headers: limit %d remaining %d", i+1, d.LimitRequests, d.RemainingRequests)
			}
		}
		_, d, err := l.Acquire(ctx, r)
		if err != nil || d.Allowed {
			t.Fatalf("6th request admitted: %+v", d)
		}
		if d.Limit != limit.LimitRequests || d.Scope != "key:a" || d.RetryAfter <= 0 || d.RetryAfter > 12*time.Second {
			t.Fatalf("refusal = %+v, want requests limit with retry within 12s (one request per 12s at 5 RPM)", d)
		}
		if d.RemainingRequests != 0 || d.ResetRequests <= 0 || d.ResetRequests > time.Minute {
			t.Fatalf("headers on refusal: %+v", d)
		}
	})
	t.Run("RPM_RefillsContinuously", func(t *testing.T) {
		l := newLimiter(t)
		r := req(limit.Scope{ID: "key:refill", RPM: 600}) // 10 per second
		n := 0
		for ; n < 700; n++ {
			if _, d, _ := l.Acquire(ctx, r); !d.Allowed {
				break
			}
		}
		// The burst itself takes time; allow for what refilled meanwhile.
		if n < 600 || n > 620 {
			t.Fatalf("burst admitted %d, want 600 (+ refill during the burst)", n)
		}
		time.Sleep(300 * time.Millisecond) // the subject: time refills the bucket
		if _, d, _ := l.Acquire(ctx, r); !d.Allowed {
			t.Fatalf("no request admitted 300ms after exhausting a 10/s bucket: %+v", d)
		}
	})
	t.Run("TPM_ReservesEstimateAndSettlesActual", func(t *testing.T) {
		l := newLimiter(t)
		s := limit.Scope{ID: "key:tpm", TPM: 1000}
		r := req(s)
		r.Tokens = 600
		lease, d, _ := l.Acquire(ctx, r)
		if !d.Allowed || d.LimitTokens != 1000 || d.RemainingTokens < 399 || d.RemainingTokens > 401 {
			t.Fatalf("first: %+v", d)
		}
		if _, d, _ := l.Acquire(ctx, r); d.Allowed || d.Limit != limit.LimitTokens {
			t.Fatalf("second 600-token request admitted with ~400 left: %+v", d)
		}
		// The call used only 100 tokens: 500 come back.
		if err := l.Release(ctx, lease, 100, 0); err != nil {
			t.Fatal(err)
		}
		if _, d, _ := l.Acquire(ctx, r); !d.Allowed {
			t.Fatalf("after settling to actual usage the request should pass: %+v", d)
		}
	})
	t.Run("Concurrency_SlotsReturnOnRelease", func(t *testing.T) {
		l := newLimiter(t)
		r := req(limit.Scope{ID: "key:conc", MaxConc: 2})
		a, d1, _ := l.Acquire(ctx, r)
		_, d2, _ := l.Acquire(ctx, r)
		_, d3, _ := l.Acquire(ctx, r)
		if !d1.Allowed || !d2.Allowed || d3.Allowed || d3.Limit != limit.LimitConcurrency {
			t.Fatalf("2 slots: %v %v %+v", d1.Allowed, d2.Allowed, d3)
		}
		if err := l.Release(ctx, a, 10, 0); err != nil {
			t.Fatal(err)
		}
		if _, d, _ := l.Acquire(ctx, r); !d.Allowed {
			t.Fatalf("slot not returned: %+v", d)
		}
	})
	t.Run("AllOrNothing_ModelRefusalTakesNothingFromKey", func(t *testing.T) {
		l := newLimiter(t)
		key := limit.Scope{ID: "key:both", RPM: 3, MaxConc: 5}
		model := limit.Scope{ID: "model:both", RPM: 1}
		if _, d, _ := l.Acquire(ctx, req(key, model)); !d.Allowed {
			t.Fatal("first refused")
		}
		_, d, _ := l.Acquire(ctx, req(key, model))
		if d.Allowed || d.Scope != "model:both" || d.Limit != limit.LimitRequests {
			t.Fatalf("want model RPM refusal, got %+v", d)
		}
		// The refused request took nothing from the key: 2 of 3 remain.
		_, d, _ = l.Acquire(ctx, req(key))
		if !d.Allowed || d.RemainingRequests != 1 {
			t.Fatalf("key after refusal: %+v", d)
		}
	})
	t.Run("Headers_FiguresOfTheScopeWithLeastLeft", func(t *testing.T) {
		l := newLimiter(t)
		key := limit.Scope{ID: "key:hdr", RPM: 10, MaxConc: 5}
		model := limit.Scope{ID: "model:hdr", RPM: 3, TPM: 1000}
		_, d, err := l.Acquire(ctx, req(key, model))
		if err != nil || !d.Allowed {
			t.Fatalf("refused: %+v %v", d, err)
		}
		// Requests: the model's 3 (2 left) bind before the key's 10 (9 left).
		if d.LimitRequests != 3 || d.RemainingRequests != 2 || d.ResetRequests <= 0 || d.ResetRequests > 20*time.Second {
			t.Fatalf("requests figures %+v, want the model's 3 with 2 left, full again within 20s", d)
		}
		// Tokens: only the model has a TPM limit; 10 of 1000 reserved.
		if d.LimitTokens != 1000 || d.RemainingTokens < 989 || d.RemainingTokens > 991 || d.ResetTokens <= 0 || d.ResetTokens > time.Second {
			t.Fatalf("tokens figures %+v, want 1000 with 990 left", d)
		}
		// A key-only request shows the key's own figures: 10, 8 left.
		_, d, _ = l.Acquire(ctx, req(key))
		if !d.Allowed || d.LimitRequests != 10 || d.RemainingRequests != 8 || d.LimitTokens != 0 {
			t.Fatalf("key-only figures %+v", d)
		}
		// A scope without rates gives no figures.
		_, d, _ = l.Acquire(ctx, req(limit.Scope{ID: "key:hdr-conc", MaxConc: 1}))
		if !d.Allowed || d.LimitRequests != 0 || d.LimitTokens != 0 {
			t.Fatalf("concurrency-only scope reported rates: %+v", d)
		}
	})
	t.Run("Budget_RefusesReservationsBeyondBudget", func(t *testing.T) {
		l := newLimiter(t)
		s := limit.Scope{ID: "key:budget", BudgetNanos: 1000, BudgetWindow: "d2026-01-01", BudgetTTL: time.Hour}
		if err := l.SeedBudget(ctx, s.ID, s.BudgetWindow, 300, time.Hour); err != nil {
			t.Fatal(err)
		}
		// A second seed must not overwrite live counters (another replica's).
		_ = l.SeedBudget(ctx, s.ID, s.BudgetWindow, 0, time.Hour)
		r := req(s)
		r.CostNanos = 400
		a, d, _ := l.Acquire(ctx, r)
		if !d.Allowed {
			t.Fatalf("300+400 <= 1000 refused: %+v", d)
		}
		_, d, _ = l.Acquire(ctx, r)
		if d.Allowed || d.Limit != limit.LimitBudget || d.SpentNanos != 700 || d.BudgetNanos != 1000 {
			t.Fatalf("700+400 > 1000 admitted or wrong figures: %+v", d)
		}
		if err := l.Release(ctx, a, 0, 50); err != nil { // cost less than reserved
			t.Fatal(err)
		}
		if got, _ := l.Spent(ctx, s.ID, s.BudgetWindow); got != (limit.Spend{Settled: 350}) {
			t.Fatalf("spent = %+v, want 350 settled and nothing reserved after settling", got)
		}
		s.BudgetWindow = "d2026-01-02" // a new day starts from zero
		r = req(s)
		r.CostNanos = 900
		if _, d, _ := l.Acquire(ctx, r); !d.Allowed {
			t.Fatalf("new window refused: %+v", d)
		}
	})
	t.Run("Budget_SeedRaisesSettledSpendAndKeepsReservations", func(t *testing.T) {
		l := newLimiter(t)
		s := limit.Scope{ID: "key:seed", BudgetNanos: 2000, BudgetWindow: "all"}
		r := req(s)
		r.CostNanos = 400
		lease, d, _ := l.Acquire(ctx, r)
		if !d.Allowed {
			t.Fatalf("refused: %+v", d)
		}
		// The ledger knows 500 settled (another replica's, or from before a
		// Redis restart): it is larger than the counter's 0, so it wins.
		if err := l.SeedBudget(ctx, s.ID, s.BudgetWindow, 500, 0); err != nil {
			t.Fatal(err)
		}
		if got, _ := l.Spent(ctx, s.ID, s.BudgetWindow); got != (limit.Spend{Settled: 500, Reserved: 400}) {
			t.Fatalf("after seeding 500: %+v, want 500 settled + 400 reserved", got)
		}
		// A smaller figure (a ledger that has not caught up) changes nothing.
		if err := l.SeedBudget(ctx, s.ID, s.BudgetWindow, 100, 0); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx, lease, 10, 300); err != nil {
			t.Fatal(err)
		}
		if got, _ := l.Spent(ctx, s.ID, s.BudgetWindow); got != (limit.Spend{Settled: 800}) {
			t.Fatalf("after settling 300: %+v, want 800 settled", got)
		}
		// 800 + 1300 > 2000: refused, naming the spend.
		r.CostNanos = 1300
		if _, d, _ := l.Acquire(ctx, r); d.Allowed || d.Limit != limit.LimitBudget || d.SpentNanos != 800 {
			t.Fatalf("want a budget refusal at 800 spent: %+v", d)
		}
	})
	t.Run("Budget_SaturatesAtTheOverflowEdge", func(t *testing.T) {
		// Reservations and settled costs as large as an int64 holds: sums
		// stop at the largest value instead of wrapping to a negative
		// spend that admits everything.
		l := newLimiter(t)
		s := limit.Scope{ID: "key:edge", BudgetNanos: 1_000_000_000, BudgetWindow: "all"}
		r := req(s)
		r.CostNanos = 1
		lease, d, _ := l.Acquire(ctx, r)
		if !d.Allowed {
			t.Fatalf("refused: %+v", d)
		}
		if err := l.Release(ctx, lease, 10, 1); err != nil {
			t.Fatal(err)
		}
		r.CostNanos = math.MaxInt64 // 1 settled + MaxInt64 wrapped to MinInt64
		if _, d, err := l.Acquire(ctx, r); err != nil || d.Allowed || d.Limit != limit.LimitBudget {
			t.Fatalf("a reservation of MaxInt64 nano-USD on 1 settled: %+v %v, want a budget refusal", d, err)
		}
		r.CostNanos = 1
		for i := 0; i < 2; i++ { // settled costs of MaxInt64, twice: the counter stays at the top
			lease, d, err := l.Acquire(ctx, r)
			if err != nil || (i == 0 && !d.Allowed) {
				t.Fatalf("acquire %d: %+v %v", i, d, err)
			}
			if !d.Allowed {
				lease = limit.Lease{Scopes: r.Scopes, N: r.N}
			}
			if err := l.Release(ctx, lease, 10, math.MaxInt64); err != nil {
				t.Fatal(err)
			}
		}
		// A ledger figure seeded afterwards keeps the larger, saturated one.
		if err := l.SeedBudget(ctx, s.ID, s.BudgetWindow, 5, 0); err != nil {
			t.Fatal(err)
		}
		got, err := l.Spent(ctx, s.ID, s.BudgetWindow)
		if err != nil || got.Settled < s.BudgetNanos {
			t.Fatalf("spend after settling MaxInt64 twice: %+v %v, want it saturated, not wrapped", got, err)
		}
		if _, d, err := l.Acquire(ctx, r); err != nil || d.Allowed || d.Limit != limit.LimitBudget || d.SpentNanos < s.BudgetNanos {
			t.Fatalf("a 1-nano request after the counter saturated: %+v %v, want a budget refusal naming a saturated spend", d, err)
		}
	})
	t.Run("Concurrent_BurstNeverExceedsLimit", func(t *testing.T) {
		l := newLimiter(t)
		r := req(limit.Scope{ID: "key:race", RPM: 60, MaxConc: 1000, BudgetNanos: 10_000, BudgetWindow: "all"})
		r.CostNanos = 250 // budget fits 40
		var ok atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					rr := r
					if _, d, err := l.Acquire(ctx, rr); err == nil && d.Allowed {
						ok.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if n := ok.Load(); n != 40 {
			t.Fatalf("admitted %d of 160 in %v, want exactly 40 (the budget binds before the 60 RPM)", n, time.Since(start))
		}
	})
}

func TestLimiter_Memory(t *testing.T) {
	runSuite(t, func(t *testing.T) limit.Limiter { return limit.NewMemory() })
}

func TestLimiter_Redis(t *testing.T) {
	testenv.Redis(t)
	runSuite(t, func(t *testing.T) limit.Limiter { return newRedis(t, time.Minute) })
}

func newRedis(t testing.TB, lease time.Duration) *limit.Redis {
	url, prefix := testenv.Redis(t)
	l, err := limit.NewRedis(context.Background(), url, limit.RedisOptions{Prefix: prefix, LeaseTTL: lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := l.Client().Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			l.Client().Del(ctx, keys...)
		}
		l.Close()
	})
	return l
}

func TestRedis_DeadReplicaLeasesExpire(t *testing.T) {
	url, prefix := testenv.Redis(t)
	dead, err := limit.NewRedis(context.Background(), url, limit.RedisOptions{Prefix: prefix, LeaseTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	live, err := limit.NewRedis(context.Background(), url, limit.RedisOptions{Prefix: prefix, LeaseTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	r := req(limit.Scope{ID: "key:lease", MaxConc: 1})
	if _, d, _ := dead.Acquire(context.Background(), r); !d.Allowed {
		t.Fatal("first slot refused")
	}
	dead.Close() // the replica dies holding its slot: no release, no renewal
	if _, d, _ := live.Acquire(context.Background(), r); d.Allowed {
		t.Fatal("slot free while the lease is still valid")
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		_, d, _ := live.Acquire(context.Background(), r)
		return d.Allowed
	}, "dead replica's slot freed with a 600ms lease")
}

func TestRedis_LiveLeasesAreRenewed(t *testing.T) {
	l := newRedis(t, 600*time.Millisecond)
	r := req(limit.Scope{ID: "key:renew", MaxConc: 1})
	if _, d, _ := l.Acquire(context.Background(), r); !d.Allowed {
		t.Fatal("refused")
	}
	time.Sleep(1500 * time.Millisecond) // the subject: 2.5 lease lifetimes pass while the replica lives
	if _, d, _ := l.Acquire(context.Background(), r); d.Allowed {
		t.Fatal("a held slot expired although its replica is alive and renewing")
	}
}

func runRaise(t *testing.T, l limit.Limiter) {
	ctx := context.Background()
	s := limit.Scope{ID: "key:raise", RPM: 2}
	for i := 0; i < 2; i++ {
		_, _, _ = l.Acquire(ctx, req(s))
	}
	if _, d, _ := l.Acquire(ctx, req(s)); d.Allowed {
		t.Fatal("bucket of 2 admitted a third request")
	}
	s.RPM = 10 // the operator raises the limit: 8 more at once
	n := 0
	for i := 0; i < 12; i++ {
		if _, d, _ := l.Acquire(ctx, req(s)); d.Allowed {
			n++
		}
	}
	if n < 8 || n > 9 {
		t.Fatalf("after raising 2 -> 10 RPM, %d admitted at once, want 8 (+1 refill)", n)
	}
}

func TestLimiter_RaisedLimitAppliesAtOnce(t *testing.T) {
	t.Run("Memory", func(t *testing.T) { runRaise(t, limit.NewMemory()) })
	t.Run("Redis", func(t *testing.T) { runRaise(t, newRedis(t, time.Minute)) })
}
