package limit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/limit"
	"llmgate/internal/testenv"
)

// ledgerStub plays the usage ledger: the spend of budget windows as the
// database has it.
type ledgerStub struct {
	mu      sync.Mutex
	seeds   map[[2]string]int64
	budgets map[[2]string]int64
	reads   int
	down    bool // the database does not answer
}

func (l *ledgerStub) setDown(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
}

// setBudget records a window's budget too, as the gateway's ledger reader
// does.
func (l *ledgerStub) setBudget(scope, window string, nanos, budget int64) {
	l.set(scope, window, nanos)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.budgets == nil {
		l.budgets = map[[2]string]int64{}
	}
	l.budgets[[2]string{scope, window}] = budget
}

func (l *ledgerStub) set(scope, window string, nanos int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seeds == nil {
		l.seeds = map[[2]string]int64{}
	}
	l.seeds[[2]string{scope, window}] = nanos
}

func (l *ledgerStub) read(context.Context) ([]limit.BudgetSeed, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	if l.down {
		return nil, errors.New("database unreachable")
	}
	var out []limit.BudgetSeed
	for k, v := range l.seeds {
		out = append(out, limit.BudgetSeed{ScopeID: k[0], Window: k[1], Nanos: v, BudgetNanos: l.budgets[k]})
	}
	return out, nil
}

// logBuffer collects a limiter's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// replica is one gateway's limiter on a Redis shared with others.
func replica(t *testing.T, url, prefix string, opt limit.RedisOptions, ledger *ledgerStub) (*limit.Redis, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	opt.Prefix = prefix
	opt.Logger = slog.New(slog.NewTextHandler(logs, nil))
	r, err := limit.NewRedis(context.Background(), url, opt)
	if err != nil {
		t.Fatal(err)
	}
	if ledger != nil {
		r.SetLedger(ledger.read)
	}
	t.Cleanup(func() { r.Close() })
	return r, logs
}

// dropPrefix deletes every key of a test: for the limiter, Redis restarted
// empty.
func dropPrefix(t *testing.T, r *limit.Redis, prefix string) {
	ctx := context.Background()
	keys, err := r.Client().Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		r.Client().Del(ctx, keys...)
	}
}

func cleanPrefix(t *testing.T, url, prefix string) {
	t.Cleanup(func() {
		r, err := limit.NewRedis(context.Background(), url, limit.RedisOptions{Prefix: prefix + "cleanup:"})
		if err == nil {
			dropPrefix(t, r, prefix)
			r.Close()
		}
	})
}

func budgetReq(s limit.Scope, cost int64) limit.Request {
	r := req(s)
	r.CostNanos = cost
	return r
}

func mustAcquire(t *testing.T, l limit.Limiter, r limit.Request) limit.Lease {
	t.Helper()
	lease, d, err := l.Acquire(context.Background(), r)
	if err != nil || !d.Allowed {
		t.Fatalf("refused: %+v %v", d, err)
	}
	return lease
}

func TestRedis_RestartEmptyReseedsFromLedgerAndKeepsReservationsInFlight(t *testing.T) {
	url, prefix := testenv.Redis(t)
	cleanPrefix(t, url, prefix)
	ledger := &ledgerStub{}
	opt := limit.RedisOptions{Heartbeat: 200 * time.Millisecond}
	a, logs := replica(t, url, prefix, opt, ledger)
	b, _ := replica(t, url, prefix, opt, ledger)
	testenv.Eventually(t, 3*time.Second, func() bool { return a.Replicas() == 2 && b.Replicas() == 2 }, "both replicas counted")
	ctx := context.Background()
	s := limit.Scope{ID: "key:restart", BudgetNanos: 10_000, BudgetWindow: "all"}

	// 3000 settled (and in the ledger); A and B each hold 1000 in flight.
	if err := a.Release(ctx, mustAcquire(t, a, budgetReq(s, 3000)), 0, 3000); err != nil {
		t.Fatal(err)
	}
	ledger.set(s.ID, s.BudgetWindow, 3000)
	inA := mustAcquire(t, a, budgetReq(s, 1000))
	inB := mustAcquire(t, b, budgetReq(s, 1000))

	dropPrefix(t, a, prefix) // Redis restarts empty
	// A request notices at once (or the next heartbeat does); the replicas
	// return to the shared counters once both have re-seeded.
	_, _, _ = a.Acquire(ctx, req(limit.Scope{ID: "key:poke"}))
	took := testenv.Eventually(t, 5*time.Second, func() bool {
		got, err := a.Spent(ctx, s.ID, s.BudgetWindow)
		return a.Shared() && b.Shared() && err == nil && got == limit.Spend{Settled: 3000, Reserved: 2000}
	}, "both replicas back on re-seeded counters")
	// A's 6000 would pass on counters started from zero; on re-seeded ones
	// 3000 + 1000 + 1000 + 6000 > 10000.
	_, d, err := a.Acquire(ctx, budgetReq(s, 6000))
	if err != nil || d.Allowed || d.Limit != limit.LimitBudget || d.SpentNanos != 5000 {
		t.Fatalf("after the restart: %+v %v, want a budget refusal at 5000 spent (ledger 3000 + 2000 in flight)", d, err)
	}
	small := mustAcquire(t, b, budgetReq(s, 10))
	// Requests admitted before the restart settle normally afterwards.
	for _, l := range []struct {
		r     *limit.Redis
		lease limit.Lease
	}{{a, inA}, {b, inB}, {b, small}} {
		if err := l.r.Release(ctx, l.lease, 0, 800); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := a.Spent(ctx, s.ID, s.BudgetWindow); got != (limit.Spend{Settled: 5400}) {
		t.Fatalf("after settling: %+v, want 3000 + 3*800 settled, nothing reserved", got)
	}
	if n := logs.count("shared limits restored after redis restarted or lost its data"); n != 1 {
		t.Fatalf("%d restart lines on A, want 1:\n%s", n, logs)
	}
	// A counter ahead of the ledger (records not yet written) keeps its
	// figure: the larger wins.
	if err := a.SeedBudget(ctx, s.ID, s.BudgetWindow, 3000, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Spent(ctx, s.ID, s.BudgetWindow); got.Settled != 5400 {
		t.Fatalf("a smaller ledger figure lowered the counter: %+v", got)
	}
	t.Logf("Redis emptied: both replicas re-seeded and back on shared counters after %v", took.Round(time.Millisecond))
}

func TestRedis_IdleReplicaReseedsWithinAHeartbeatOfARestart(t *testing.T) {
	url, prefix := testenv.Redis(t)
	cleanPrefix(t, url, prefix)
	ledger := &ledgerStub{}
	ledger.set("key:idle", "all", 7000)
	a, _ := replica(t, url, prefix, limit.RedisOptions{Heartbeat: 100 * time.Millisecond}, ledger)
	ctx := context.Background()
	if err := a.SeedBudget(ctx, "key:idle", "all", 7000, 0); err != nil {
		t.Fatal(err)
	}
	dropPrefix(t, a, prefix)
	took := testenv.Eventually(t, 3*time.Second, func() bool {
		s, err := a.Client().HGet(ctx, prefix+"spend:key:idle:all", "s").Result()
		return err == nil && s == "7000" && a.Shared()
	}, "counter re-seeded without any request")
	t.Logf("an idle replica re-seeded the emptied counters after %v (heartbeat 100ms)", took.Round(time.Millisecond))
}

func TestRedis_RestartFromAnOldSnapshotIsNoticedByRunID(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	ledger := &ledgerStub{}
	a, logs := replica(t, srv.URL(), "t:", limit.RedisOptions{Heartbeat: 100 * time.Millisecond}, ledger)
	ctx := context.Background()
	s := limit.Scope{ID: "key:snap", BudgetNanos: 1_000_000, BudgetWindow: "all"}
	if err := a.Release(ctx, mustAcquire(t, a, budgetReq(s, 100)), 0, 100); err != nil {
		t.Fatal(err)
	}
	if err := a.Client().Save(ctx).Err(); err != nil { // the snapshot holds 100
		t.Fatal(err)
	}
	if err := a.Release(ctx, mustAcquire(t, a, budgetReq(s, 900)), 0, 900); err != nil {
		t.Fatal(err)
	}
	ledger.set(s.ID, s.BudgetWindow, 1000)
	srv.Restart() // loads the snapshot: the epoch marker is back, the counter old
	testenv.Eventually(t, 5*time.Second, func() bool {
		got, err := a.Spent(ctx, s.ID, s.BudgetWindow)
		return a.Shared() && err == nil && got.Settled == 1000
	}, "counter corrected to the ledger after a restart from a snapshot")
	// Noticed by the heartbeat, or by the probe if a heartbeat fell into
	// the restart.
	if logs.count("shared limits restored after redis restarted (new run_id)") != 1 {
		t.Fatalf("want one line saying Redis restarted:\n%s", logs)
	}
}

func TestRedis_UnreachableFallsBackToLocalSharesAndRecoversFromTheLedger(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	ledger := &ledgerStub{}
	opt := limit.RedisOptions{Heartbeat: 100 * time.Millisecond}
	a, logs := replica(t, srv.URL(), "t:", opt, ledger)
	b, _ := replica(t, srv.URL(), "t:", opt, ledger)
	testenv.Eventually(t, 3*time.Second, func() bool { return a.Replicas() == 2 && b.Replicas() == 2 }, "both replicas counted")
	ctx := context.Background()
	rpm := limit.Scope{ID: "key:rpm", RPM: 20}
	bud := limit.Scope{ID: "key:budget", BudgetNanos: 10_000, BudgetWindow: "all"}
	for i := 0; i < 10; i++ { // 10 of the 20 used
		mustAcquire(t, a, req(rpm))
	}
	if err := a.Release(ctx, mustAcquire(t, a, budgetReq(bud, 1100)), 0, 1100); err != nil {
		t.Fatal(err)
	}
	ledger.set(bud.ID, bud.BudgetWindow, 1100)

	srv.Freeze() // no answers, connections open: a hung server or a partition
	// A's share: half of the 10 requests left (plus what refills meanwhile).
	n := 0
	for i := 0; i < 20; i++ {
		if _, d, err := a.Acquire(ctx, req(rpm)); err == nil && d.Allowed {
			n++
		}
	}
	if a.Shared() || n < 5 || n > 6 {
		t.Fatalf("unreachable Redis: shared=%v, %d of 20 admitted locally, want 5 (half of the 10 left) + at most 1 refilled", a.Shared(), n)
	}
	// Budget share: (10000 - 1100) / 2 = 4450, so four requests of 1000.
	var leases []limit.Lease
	for i := 0; i < 4; i++ {
		leases = append(leases, mustAcquire(t, a, budgetReq(bud, 1000)))
	}
	_, d, _ := a.Acquire(ctx, budgetReq(bud, 1000))
	if d.Allowed || d.Limit != limit.LimitBudget || d.SpentNanos != 5100 {
		t.Fatalf("fifth request on a 4450 share: %+v, want a budget refusal at 5100 (1100 + 4000)", d)
	}
	for _, l := range leases {
		if err := a.Release(ctx, l, 0, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if c := logs.count("enforces its own share"); c != 1 {
		t.Fatalf("%d fall-back lines, want 1:\n%s", c, logs)
	}

	srv.Thaw() // Redis kept its data
	took := testenv.Eventually(t, 5*time.Second, a.Shared, "recovery")
	// The ledger may not have A's 4000 yet: they count on top of it.
	got, err := a.Spent(ctx, bud.ID, bud.BudgetWindow)
	if err != nil || got != (limit.Spend{Settled: 5100}) {
		t.Fatalf("after recovery: %+v %v, want 1100 + the 4000 A settled while Redis was away", got, err)
	}
	// Once the ledger has them, they count once: no double counting stays.
	ledger.set(bud.ID, bud.BudgetWindow, 5100)
	held := testenv.Eventually(t, 5*time.Second, func() bool {
		got, err := a.Spent(ctx, bud.ID, bud.BudgetWindow)
		if err != nil || got.Settled < 5100 {
			t.Fatalf("spend fell below what was settled: %+v %v", got, err)
		}
		v, _ := a.Client().HGetAll(ctx, "t:spend:"+bud.ID+":"+bud.BudgetWindow).Result()
		return len(v) == 1 && v["s"] == "5100"
	}, "A's outage costs counted once, from the ledger")
	if got, _ := a.Spent(ctx, bud.ID, bud.BudgetWindow); got != (limit.Spend{Settled: 5100}) {
		t.Fatalf("after the ledger caught up: %+v, want 5100", got)
	}
	if c := logs.count("redis reachable again"); c != 1 {
		t.Fatalf("%d recovery lines, want 1:\n%s", c, logs)
	}
	t.Logf("frozen Redis: %d of 20 admitted on A's share of RPM 20; budget share used 4000; recovered %v after the thaw; outage costs handed to the ledger after %v more",
		n, took.Round(time.Millisecond), held.Round(time.Millisecond))
}

func TestRedis_FailOpenAdmitsWithoutLimitsWhileUnreachable(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	ledger := &ledgerStub{}
	a, logs := replica(t, srv.URL(), "t:", limit.RedisOptions{Heartbeat: 100 * time.Millisecond, FailOpen: true}, ledger)
	s := limit.Scope{ID: "key:open", RPM: 1, BudgetNanos: 5000, BudgetWindow: "all"}
	mustAcquire(t, a, budgetReq(s, 10))
	ledger.set(s.ID, s.BudgetWindow, 4000)
	srv.Kill()
	_, _, err := a.Acquire(context.Background(), budgetReq(s, 10))
	if !errors.Is(err, limit.ErrUnavailable) {
		t.Fatalf("fail open: err = %v, want ErrUnavailable (the caller admits without limits)", err)
	}
	if logs.count("OFF on this replica") != 1 {
		t.Fatalf("want one line saying limits are off:\n%s", logs)
	}
	srv.Start() // empty
	testenv.Eventually(t, 5*time.Second, a.Shared, "recovery")
	got, err := a.Spent(context.Background(), s.ID, s.BudgetWindow)
	if err != nil || got.Settled != 4000 {
		t.Fatalf("after recovery: %+v %v, want the ledger's 4000", got, err)
	}
}

func TestRedis_StartsOnLocalSharesWhenRedisIsDownAndJoinsWhenItAnswers(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	srv.Kill()
	a, logs := replica(t, srv.URL(), "t:", limit.RedisOptions{Heartbeat: 100 * time.Millisecond, Replicas: 2}, nil)
	if a.Shared() || logs.count("redis unreachable at start") != 1 {
		t.Fatalf("shared=%v; logs:\n%s", a.Shared(), logs)
	}
	s := limit.Scope{ID: "key:start", RPM: 4}
	n := 0
	for i := 0; i < 4; i++ {
		if _, d, _ := a.Acquire(context.Background(), req(s)); d.Allowed {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("admitted %d of 4 at RPM 4 with 2 replicas configured, want 2", n)
	}
	srv.Start()
	testenv.Eventually(t, 5*time.Second, a.Shared, "join")
	// Joined without the other configured replica, which may be spending
	// its local share of 2: the shared bucket leaves it out (4 - 2 used
	// here - 2), while a scope nobody used is served from Redis.
	if _, d, err := a.Acquire(context.Background(), req(s)); err != nil || d.Allowed {
		t.Fatalf("admitted (%+v, %v) beyond what is left with the other replica's share held", d, err)
	}
	fresh := limit.Scope{ID: "key:start-fresh", RPM: 4}
	mustAcquire(t, a, req(fresh))
	if n, err := a.Client().Exists(context.Background(), "t:rate:"+fresh.ID).Result(); err != nil || n != 1 {
		t.Fatalf("the fresh scope's bucket is not in Redis (%d, %v): not served from the shared counters", n, err)
	}
}

// TestRedis_ComesBackOnlyWithTheOthersAndReservesItsLocalShareMeanwhile:
// after Redis restarted, a replica that knows of another one puts its part
// into the counters - including what it may still spend on its local share
// - and stays on that share until the other has announced itself too
// (here it never does: the wait ends after three heartbeats, and the
// other's share stays reserved for it).
func TestRedis_ComesBackOnlyWithTheOthersAndReservesItsLocalShareMeanwhile(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	ledger := &ledgerStub{}
	a, logs := replica(t, srv.URL(), "t:", limit.RedisOptions{Heartbeat: 200 * time.Millisecond, Replicas: 2}, ledger)
	ctx := context.Background()
	s := limit.Scope{ID: "key:wait", BudgetNanos: 10_000, BudgetWindow: "all"}
	if err := a.Release(ctx, mustAcquire(t, a, budgetReq(s, 1000)), 0, 1000); err != nil {
		t.Fatal(err)
	}
	ledger.setBudget(s.ID, s.BudgetWindow, 1000, 10_000)
	srv.Restart()
	restarted := time.Now()
	key := "t:spend:" + s.ID + ":" + s.BudgetWindow
	reserved := func() (string, bool) {
		h, _ := a.Client().HGetAll(ctx, key).Result()
		for f, v := range h {
			if strings.HasPrefix(f, "r:") {
				return v, true
			}
		}
		return "", false
	}
	// Its share of what is left: (10000 - 1000) / 2.
	testenv.Eventually(t, 3*time.Second, func() bool {
		v, ok := reserved()
		if ok && v != "4500" {
			t.Fatalf("reserved %s while on the local share, want 4500", v)
		}
		return ok
	}, "the local share reserved in the re-seeded counter")
	if a.Shared() {
		t.Fatal("back on the shared counters before the other replica announced itself")
	}
	testenv.Eventually(t, 3*time.Second, a.Shared, "back on the shared counters after the wait")
	waited := time.Since(restarted)
	if waited < 500*time.Millisecond {
		t.Fatalf("back after %v, want at least three heartbeats (600ms) of waiting for the other replica", waited)
	}
	// Nothing in flight: what stays reserved is the missing replica's
	// share, which it may be spending locally.
	if v, ok := reserved(); !ok || v != "4500" {
		t.Fatalf("reserved %q after returning without the other replica, want its share of 4500", v)
	}
	if logs.count("1 other replica(s) not back on the shared counters") != 1 {
		t.Fatalf("want one line saying the other replica's share stays reserved:\n%s", logs)
	}
	t.Logf("waited %v for a replica that never came back; this replica's local share was reserved meanwhile, and the other's after", waited.Round(time.Millisecond))

	// A replica silent for forgetAfter (a minute) is forgotten: once that
	// has passed, the next heartbeat drops the share held for it, and the
	// whole budget left is this replica's to spend.
	if _, d, err := a.Acquire(ctx, budgetReq(s, 9000)); err != nil || d.Allowed {
		t.Fatalf("9000 admitted (%+v, %v) while the other replica's 4500 is held", d, err)
	}
	limit.ForgetHeldSharesNow(a)
	testenv.Eventually(t, 3*time.Second, func() bool {
		v, ok := reserved()
		return !ok || v == "0"
	}, "the missing replica's share released after it was forgotten")
	if err := a.Release(ctx, mustAcquire(t, a, budgetReq(s, 9000)), 0, 9000); err != nil {
		t.Fatalf("the 9000 left after the share was released: %v", err)
	}
	if !a.Shared() {
		t.Fatal("left the shared counters when the held share was released")
	}
}

// TestRedis_RateBucketsLeaveOutTheShareOfAReplicaThatIsNotBack: after
// Redis restarted, a replica that stops waiting for the other (which may be
// spending its local share of the RPM meanwhile) rebuilds the shared bucket
// without that share: of RPM 6 over 2 replicas, 3 are left, not 6.
func TestRedis_RateBucketsLeaveOutTheShareOfAReplicaThatIsNotBack(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	a, logs := replica(t, srv.URL(), "t:", limit.RedisOptions{Heartbeat: 100 * time.Millisecond, Replicas: 2}, &ledgerStub{})
	ctx := context.Background()
	s := limit.Scope{ID: "key:rate-hold", RPM: 6}
	if err := a.Release(ctx, mustAcquire(t, a, req(s)), 0, 0); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	testenv.Eventually(t, 5*time.Second, func() bool {
		return logs.count("1 other replica(s) not back on the shared counters") == 1 && a.Shared()
	}, "back on the shared counters without the other replica")
	n := 0
	for range 6 {
		if _, d, err := a.Acquire(ctx, req(s)); err == nil && d.Allowed {
			n++
		}
	}
	// 6 less the missing replica's share of 3, less the request this
	// replica made before the restart (in its own count of the last
	// minute, as the ledger stub has none).
	if n != 2 {
		t.Fatalf("admitted %d of 6 on the shared bucket, want 2 (RPM 6, the other replica's share of 3 left out, 1 used)", n)
	}
}

// TestRedis_AReplicaBackAfterTheWaitKeepsTheOthersShareReserved: after
// Redis restarted, replica B cannot rejoin (it cannot read the ledger) and
// spends its local share; A stops waiting for it after three heartbeats
// and returns to the re-seeded counters. Those counters know nothing of
// what B spends locally, so A keeps B's share reserved in them until B is
// back: together the two spend no more than the budget.
func TestRedis_AReplicaBackAfterTheWaitKeepsTheOthersShareReserved(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	const budget, settled, cost = 10_000, 1000, 1000
	s := limit.Scope{ID: "key:twice", BudgetNanos: budget, BudgetWindow: "all"}
	ledgerA, ledgerB := &ledgerStub{}, &ledgerStub{}
	for _, l := range []*ledgerStub{ledgerA, ledgerB} {
		l.setBudget(s.ID, s.BudgetWindow, settled, budget)
	}
	opt := limit.RedisOptions{Heartbeat: 100 * time.Millisecond, Replicas: 2}
	a, logsA := replica(t, srv.URL(), "t:", opt, ledgerA)
	b, logsB := replica(t, srv.URL(), "t:", opt, ledgerB)
	ctx := context.Background()
	for _, r := range []*limit.Redis{a, b} {
		if err := r.SeedBudget(ctx, s.ID, s.BudgetWindow, settled, 0); err != nil {
			t.Fatal(err)
		}
	}

	ledgerB.setDown(true) // B's database reads fail from now on
	srv.Restart()         // empty
	poke := req(limit.Scope{ID: "key:poke"})
	_, _, _ = b.Acquire(ctx, poke) // B notices the restart and cannot re-seed
	if b.Shared() {
		t.Fatal("B is back on the shared counters without reading the ledger")
	}
	_, _, _ = a.Acquire(ctx, poke) // A re-seeds and waits for B
	waited := testenv.Eventually(t, 5*time.Second, a.Shared, "A back on the shared counters after waiting three heartbeats for B")
	if b.Shared() {
		t.Fatal("B rejoined although its ledger reads fail")
	}

	// A spends what the shared counters allow; B its local share,
	// (10000 - 1000) / 2 = 4500: four requests of 1000.
	spend := func(r *limit.Redis) int {
		n := 0
		for ; n < budget/cost; n++ {
			l, d, err := r.Acquire(ctx, budgetReq(s, cost))
			if err != nil || !d.Allowed {
				break
			}
			if err := r.Release(ctx, l, 0, cost); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	nA := spend(a)
	nB := spend(b)
	total := settled + cost*(nA+nB)
	t.Logf("A back after %v; then A admitted %d, B %d on its local share: %d spent of %d",
		waited.Round(time.Millisecond), nA, nB, total, budget)
	if nB != 4 {
		t.Fatalf("B admitted %d on its local share of 4500, want 4", nB)
	}
	if total > budget {
		t.Fatalf("%d spent of a budget of %d: A spent from the re-seeded counters the share B spent locally\nA:\n%s\nB:\n%s", total, budget, logsA, logsB)
	}

	// B's database answers, with every record written: B rejoins, and A
	// drops what it held for B, so the spend counts once.
	for _, l := range []*ledgerStub{ledgerA, ledgerB} {
		l.set(s.ID, s.BudgetWindow, int64(total))
	}
	ledgerB.setDown(false)
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, err := a.Spent(ctx, s.ID, s.BudgetWindow)
		return b.Shared() && err == nil && got == limit.Spend{Settled: int64(total)}
	}, "B back, and the counter at the ledger's figure with nothing reserved")
}

// TestRedis_ALedgerFigureReadDuringAnOutageNeverWidensTheLocalShare: with
// Redis away, each of two replicas may spend half of what was left. A
// ledger figure read meanwhile by one of them (the budgets are re-seeded
// every minute) includes what the other spent; dividing what is left by
// two again would hand the replica that spent more part of the other's
// share. The figure may narrow a share, never widen it.
func TestRedis_ALedgerFigureReadDuringAnOutageNeverWidensTheLocalShare(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	const budget, settled, cost = 10_000, 1000, 1000
	s := limit.Scope{ID: "key:rebase", BudgetNanos: budget, BudgetWindow: "all"}
	opt := limit.RedisOptions{Heartbeat: 100 * time.Millisecond, Replicas: 2}
	a, _ := replica(t, srv.URL(), "t:", opt, nil)
	b, _ := replica(t, srv.URL(), "t:", opt, nil)
	ctx := context.Background()
	for _, r := range []*limit.Redis{a, b} {
		if err := r.SeedBudget(ctx, s.ID, s.BudgetWindow, settled, 0); err != nil {
			t.Fatal(err)
		}
	}
	srv.Kill()
	spend := func(r *limit.Redis, most int) int {
		n := 0
		for ; n < most; n++ {
			l, d, err := r.Acquire(ctx, budgetReq(s, cost))
			if err != nil || !d.Allowed {
				break
			}
			if err := r.Release(ctx, l, 0, cost); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	// Shares of (10000 - 1000) / 2 = 4500: A uses 4000 of its, B 1000.
	if n := spend(a, 4); n != 4 || a.Shared() {
		t.Fatalf("A admitted %d of 4 (shared=%v)", n, a.Shared())
	}
	if n := spend(b, 1); n != 1 || b.Shared() {
		t.Fatalf("B admitted %d of 1 (shared=%v)", n, b.Shared())
	}
	// A reads the ledger: 1000 + 4000 + 1000.
	if err := a.SeedBudget(ctx, s.ID, s.BudgetWindow, settled+5*cost, 0); err != nil {
		t.Fatal(err)
	}
	nA, nB := spend(a, budget/cost), spend(b, budget/cost)
	total := settled + cost*(5+nA+nB)
	t.Logf("after the ledger figure: A admitted %d more, B %d more: %d spent of %d", nA, nB, total, budget)
	if nB != 3 {
		t.Fatalf("B admitted %d more on what was left of its share (3500), want 3", nB)
	}
	if total > budget {
		t.Fatalf("%d spent of a budget of %d: the ledger figure widened A's share", total, budget)
	}
	if got, err := a.Spent(ctx, s.ID, s.BudgetWindow); err != nil || got != (limit.Spend{Settled: settled + 5*cost}) {
		t.Fatalf("A's view of the spend: %+v %v, want the ledger's %d", got, err, settled+5*cost)
	}
}

// A client that leaves while its limiter script runs does not strand its
// reservation: the scripts run apart from the request's context, so the
// acquire's reply is read and the release still reaches Redis.
func TestRedis_ACancelledRequestLeavesNoReservation(t *testing.T) {
	l := newRedis(t, time.Minute)
	s := limit.Scope{ID: "key:gone", BudgetNanos: 10_000, BudgetWindow: "all", MaxConc: 1}
	r := req(s)
	r.CostNanos = 4000
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	lease, d, err := l.Acquire(gone, r)
	if err != nil || !d.Allowed {
		t.Fatalf("acquire with a done context: allowed %v, err %v", d.Allowed, err)
	}
	if err := l.Release(gone, lease, 10, 1000); err != nil {
		t.Fatalf("release with a done context: %v", err)
	}
	got, err := l.Spent(context.Background(), s.ID, s.BudgetWindow)
	if err != nil || got != (limit.Spend{Settled: 1000}) {
		t.Fatalf("spend after the request = %+v (%v); want settled 1000, nothing reserved", got, err)
	}
	if _, d, _ := l.Acquire(context.Background(), r); !d.Allowed {
		t.Fatal("the concurrency slot of the cancelled request was not given back")
	}
}

// A Redis URL the client cannot use is named in the error without its
// password.
func TestRedis_BadURLErrorHidesThePassword(t *testing.T) {
	_, err := limit.NewRedis(context.Background(), "redis://:s3cret@127.0.0.1:6379/x/y", limit.RedisOptions{})
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "redis://:xxxxx@127.0.0.1:6379/x/y") {
		t.Fatalf("err = %v, want the URL named with its password hidden", err)
	}
}

// ratesStub plays the ledger's last minute of rate-limited scopes.
type ratesStub struct {
	mu    sync.Mutex
	seeds []limit.RateSeed
	reads int
}

func (r *ratesStub) set(seeds ...limit.RateSeed) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seeds = seeds
}

func (r *ratesStub) read(context.Context, time.Time) ([]limit.RateSeed, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	return append([]limit.RateSeed(nil), r.seeds...), nil
}

// After Redis restarted empty, the RPM bucket is rebuilt from the ledger's
// last minute and from this replica's requests in flight (which the
// ledger does not have yet): a key that used its minute gets no fresh one.
// The finished requests were served by a replica that has left since, so
// only the ledger knows them.
func TestRedis_RestartEmptyRebuildsRateBucketsFromTheLedgerAndRequestsInFlight(t *testing.T) {
	url, prefix := testenv.Redis(t)
	cleanPrefix(t, url, prefix)
	opt := limit.RedisOptions{Heartbeat: 200 * time.Millisecond, Replicas: 1}
	a, _ := replica(t, url, prefix, opt, &ledgerStub{})
	gone, _ := replica(t, url, prefix, opt, &ledgerStub{})
	rates := &ratesStub{}
	a.SetRates(rates.read)
	ctx := context.Background()
	s := limit.Scope{ID: "key:rpm60", RPM: 60}
	for i := 0; i < 40; i++ { // finished: in the ledger
		if err := gone.Release(ctx, mustAcquire(t, gone, req(s)), 10, 0); err != nil {
			t.Fatal(err)
		}
	}
	gone.Close()
	var inFlight []limit.Lease
	for i := 0; i < 20; i++ { // admitted, not finished: not in the ledger
		inFlight = append(inFlight, mustAcquire(t, a, req(s)))
	}
	rates.set(limit.RateSeed{ScopeID: s.ID, RPM: 60, Uses: []limit.Use{{At: time.Now(), Requests: 40, Tokens: 400}}})

	dropPrefix(t, a, prefix) // Redis restarts empty
	start := time.Now()
	n := 0
	for i := 0; i < 30; i++ {
		if _, d, err := a.Acquire(ctx, req(s)); err == nil && d.Allowed {
			n++
		}
	}
	refilled := int(time.Since(start).Seconds()) + 1
	if n > refilled+1 {
		t.Fatalf("%d of 30 admitted right after the restart, want at most %d: 40 finished + 20 in flight used the minute", n, refilled+1)
	}
	if rates.reads == 0 {
		t.Fatal("the resync did not read the ledger's last minute")
	}
	for _, l := range inFlight {
		if err := a.Release(ctx, l, 10, 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("after a restart, %d of 30 admitted on an RPM 60 key that had used its minute", n)
}

// A resync lowers a bucket to the ledger's figure but never raises one:
// a bucket Redis kept, emptier than the ledger says, stays as it is.
func TestRedis_ResyncNeverRaisesARateBucket(t *testing.T) {
	url, prefix := testenv.Redis(t)
	cleanPrefix(t, url, prefix)
	a, _ := replica(t, url, prefix, limit.RedisOptions{Heartbeat: 200 * time.Millisecond}, &ledgerStub{})
	rates := &ratesStub{}
	a.SetRates(rates.read)
	ctx := context.Background()
	s := limit.Scope{ID: "key:rpm10", RPM: 10}
	for i := 0; i < 10; i++ {
		mustAcquire(t, a, req(s))
	}
	// The ledger has only 2 of them (the rest not written yet).
	rates.set(limit.RateSeed{ScopeID: s.ID, RPM: 10, Uses: []limit.Use{{At: time.Now(), Requests: 2}}})
	// Only the epoch marker goes: a resync runs, the bucket stays.
	if err := a.Client().Del(ctx, prefix+"epoch").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Second, func() bool {
		_, _, _ = a.Acquire(ctx, req(limit.Scope{ID: "key:poke"}))
		rates.mu.Lock()
		defer rates.mu.Unlock()
		return rates.reads > 0 && a.Shared()
	}, "a resync that read the ledger")
	if _, d, _ := a.Acquire(ctx, req(s)); d.Allowed {
		t.Fatalf("admitted on a bucket Redis kept empty: the resync raised it to the ledger's figure (%+v)", d)
	}
}
