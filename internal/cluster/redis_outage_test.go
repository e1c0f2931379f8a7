package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/admin"
	"llmgate/internal/store/postgres"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

// waves keeps sending waves of concurrent alias requests (each may cost
// the most the model allows) on one key over both replicas until stopped.
type waves struct {
	ok, refused atomic.Int64
	// refusedRuns counts waves in a row in which nothing was admitted.
	refusedRuns atomic.Int64
	stop        chan struct{}
	done        chan struct{}
}

func startWaves(t *testing.T, urls []string, secret string, perWave int) *waves {
	w := &waves{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			ok, refused := testenv.SendAliasWaves(t, urls, secret, 1, perWave)
			w.ok.Add(int64(ok))
			w.refused.Add(int64(refused))
			if ok == 0 {
				w.refusedRuns.Add(1)
				time.Sleep(50 * time.Millisecond) // the load's pace: refusals are cheap; keep the ledger small
			} else {
				w.refusedRuns.Store(0)
			}
		}
	}()
	return w
}

// finish stops the waves once n waves in a row were refused entirely (the
// budget is used up and stays so) and at least minRun has passed (costs
// settled while Redis was away may count twice for a second after it is
// back, refusing early), or after limit.
func (w *waves) finish(t *testing.T, n int64, minRun, limit time.Duration) (ok, refused int) {
	start := time.Now()
	testenv.Poll(limit, func() bool { return w.refusedRuns.Load() >= n && time.Since(start) >= minRun })
	close(w.stop)
	<-w.done
	return int(w.ok.Load()), int(w.refused.Load())
}

// limiterLines are a replica's log lines about Redis and its limits.
func limiterLines(r *replica) string {
	var out []string
	for _, l := range strings.Split(r.Log.String(), "\n") {
		if strings.Contains(l, "redis") || strings.Contains(l, "limit") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// ledgerSpend is a key's spend in the ledger so far.
func ledgerSpend(t *testing.T, q usage.Querier, keyID string) float64 {
	rows, err := q.Summary(context.Background(), usage.Filter{KeyID: keyID, GroupBy: []string{"key"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		return 0
	}
	return rows[0].CostUSD
}

func waitSpend(t *testing.T, q usage.Querier, keyID string, atLeast float64) {
	testenv.Eventually(t, 20*time.Second, func() bool { return ledgerSpend(t, q, keyID) >= atLeast },
		fmt.Sprintf("key %s reaches $%.2f of spend", keyID, atLeast))
}

// gauge reads one unlabelled gauge from a replica's /metrics.
func gauge(r *replica, name string) string {
	resp, err := http.Get(r.base + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

func waitGauge(t *testing.T, reps []*replica, name, want string) {
	deadline := time.Now().Add(15 * time.Second)
	for _, r := range reps {
		if _, ok := testenv.Poll(time.Until(deadline), func() bool { return gauge(r, name) == want }); !ok {
			t.Fatalf("replica %s: %s = %q, want %s\n%s", r.name, name, gauge(r, name), want, r.Log.String())
		}
	}
}

// TestReplicas_BudgetAndRPMHoldThroughARedisRestartAndARedisOutage runs two
// gateway processes on PostgreSQL and a Redis server of the test's own,
// with a backend that generates as much as any output-limit alias allows
// (every request costs up to its reservation). (a) Redis is restarted
// empty mid-load; (b) Redis is stopped mid-load and later started again.
// Spend stays within the bound docs/operations.md promises in both (what
// requests in flight cost beyond their reservations, on top of the
// budget), and RPM within the limit (plus its refill) plus the replica
// count.
func TestReplicas_BudgetAndRPMHoldThroughARedisRestartAndARedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts two gateway processes and a Redis server")
	}
	const inPrice, outPrice, prompt, budget, perWave = 50.0, 50.0, 10, 3.0, 8
	pg := testenv.Postgres(t)
	srv := testenv.NewRedisServer(t)
	up := testenv.NewGreedyUpstream(t, 100*time.Millisecond, prompt)
	bin := buildBinary(t)
	cfg := fmt.Sprintf("database: %q\nredis: %q\nbackends:\n  up: {url: %q}\nmodels:\n  m: {backend: up, input_price: %v, output_price: %v}\n",
		pg, srv.URL(), up.URL+"/v1", inPrice, outPrice)
	a := startReplica(t, bin, "A", cfg)
	b := startReplica(t, bin, "B", cfg)
	reps, urls := []*replica{a, b}, []string{a.base, b.base}
	ctx := context.Background()
	adm := admin.NewClient(a.base, master)
	st, err := postgres.Open(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	maxReq, _ := testenv.CostBound(budget, inPrice, outPrice, prompt)
	// Through a restart or an outage of Redis, replicas that lose it
	// together spend at most the budget plus what the requests in flight
	// when it ran out cost beyond their reservations (docs/operations.md,
	// "Limits of this design"). A request reserves its output in full and
	// its prompt at bytes/4 ("hi": nothing), so it may cost at most the
	// upstream's prompt tokens more; the load holds at most perWave of
	// them in flight.
	overrun := perWave * prompt * inPrice / 1e6
	bound := budget + overrun + 1e-9*budget
	waitGauge(t, reps, "llmgate_limiter_replicas", "2")
	newKey := func(name string, spec admin.KeySpec) *admin.Issued {
		spec.Name = ptr(name)
		is, err := adm.CreateKey(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		waitKnown(t, b, is.Secret, testenv.LimitAliasBodies[0], nil) // one probe request
		return is
	}

	// (a) Redis restarted empty mid-load: without re-seeding, the counters
	// would start again from $0 and the key could spend its budget twice.
	ka := newKey("restart", admin.KeySpec{BudgetUSD: ptr(budget)})
	load := startWaves(t, urls, ka.Secret, perWave)
	waitSpend(t, st, ka.Key.ID, budget/3)
	atRestart := ledgerSpend(t, st, ka.Key.ID)
	srv.Restart()
	ok, refused := load.finish(t, 3, 3*time.Second, 30*time.Second)
	spent, n := testenv.KeySpend(t, st, ka.Key.ID, ok+refused+1)
	t.Logf("(a) Redis restarted empty at $%.4f spent: %d admitted, %d refused; spent $%.4f of $%.2f (bound $%.4f = budget + %d prompts of %d tokens in flight)",
		atRestart, ok, refused, spent, budget, bound, perWave, prompt)
	if spent > bound {
		t.Fatalf("(a) spent $%.4f after a Redis restart, more than the budget plus what requests in flight may cost beyond their reservations ($%.4f)\nA:\n%s\nB:\n%s", spent, bound, limiterLines(a), limiterLines(b))
	}
	if spent < budget-maxReq || n != ok+refused+1 {
		t.Fatalf("(a) spent $%.4f in %d records for %d answers: the budget must be used and every request recorded", spent, n, ok+refused+1)
	}
	waitGauge(t, reps, "llmgate_limiter_redis_shared", "1")

	// (b) Redis stopped mid-load: each replica enforces its share.
	kb := newKey("outage-budget", admin.KeySpec{BudgetUSD: ptr(budget)})
	const rpm = 30
	kc := newKey("outage-rpm", admin.KeySpec{RPM: ptr(rpm)})
	rpmStart := time.Now()
	rpmOK, rpmRefused := 1, 0 // the probe of newKey was admitted
	var rpmMu sync.Mutex
	rpmBurst := func(n int) {
		for _, r := range burst(t, reps, kc.Secret, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`, n, 1) {
			rpmMu.Lock()
			switch r.status {
			case 200:
				rpmOK++
			case 429:
				rpmRefused++
			default:
				t.Errorf("RPM key: status %d %s", r.status, r.body)
			}
			rpmMu.Unlock()
		}
	}
	rpmBurst(16)
	load = startWaves(t, urls, kb.Secret, perWave)
	waitSpend(t, st, kb.Key.ID, budget/3)
	atStop := ledgerSpend(t, st, kb.Key.ID)
	srv.Kill()
	stopped := time.Now()
	rpmBurst(40)
	ok, refused = load.finish(t, 3, 0, 30*time.Second)
	rpmBurst(20)
	rpmElapsed := time.Since(rpmStart)
	outage := time.Since(stopped)
	spent, n = testenv.KeySpend(t, st, kb.Key.ID, ok+refused+1)
	t.Logf("(b) Redis stopped at $%.4f spent: %d admitted, %d refused during %v; spent $%.4f of $%.2f (bound $%.4f)",
		atStop, ok, refused, outage.Round(time.Millisecond), spent, budget, bound)
	if spent > bound {
		t.Fatalf("(b) spent $%.4f with Redis stopped, more than the budget plus what requests in flight may cost beyond their reservations ($%.4f)\nA:\n%s\nB:\n%s", spent, bound, limiterLines(a), limiterLines(b))
	}
	if spent < budget/2 || n != ok+refused+1 {
		t.Fatalf("(b) spent $%.4f in %d records for %d answers", spent, n, ok+refused+1)
	}
	// A bucket of RPM refilling at RPM/60 per second admits at most RPM +
	// RPM*T/60 in T; the local shares, rounded up, may add one per replica.
	rpmBound := rpm + int(float64(rpm)*rpmElapsed.Seconds()/60+0.999) + len(reps)
	t.Logf("(b) RPM %d across the stop: %d admitted, %d refused in %v (bound %d = limit + refill + %d replicas)",
		rpm, rpmOK, rpmRefused, rpmElapsed.Round(time.Millisecond), rpmBound, len(reps))
	if rpmOK > rpmBound || rpmRefused == 0 {
		t.Fatalf("(b) RPM %d: %d admitted (bound %d), %d refused", rpm, rpmOK, rpmBound, rpmRefused)
	}
	for _, r := range reps {
		if !strings.Contains(r.Log.String(), "enforces its own share of every limit") {
			t.Fatalf("replica %s did not log its fall-back to local shares:\n%s", r.name, r.Log.String())
		}
	}

	// Redis returns (empty): the counters are corrected from the ledger, so
	// the exhausted budget stays exhausted and 'keys show' agrees.
	srv.Start()
	waitGauge(t, reps, "llmgate_limiter_redis_shared", "1")
	again, refusedAgain := testenv.SendAliasWaves(t, urls, kb.Secret, 1, perWave)
	if again != 0 {
		t.Fatalf("after Redis came back empty, %d requests were admitted on an exhausted budget", again)
	}
	// Costs settled while Redis was away count on top of the ledger until it
	// has surely written them (a second); then 'keys show' and the ledger
	// agree.
	ledger := ledgerSpend(t, st, kb.Key.ID)
	var shown *admin.Key
	// Checked below: the wait gives up quietly.
	testenv.Poll(10*time.Second, func() bool {
		shown, err = admin.NewClient(b.base, master).GetKey(ctx, kb.Key.ID)
		if err != nil || shown.SpentUSD == nil || shown.ReservedUSD == nil {
			t.Fatalf("keys show: %+v %v", shown, err)
		}
		if *shown.SpentUSD < ledger-1e-9 {
			t.Fatalf("keys show $%.6f spent, less than the ledger's $%.6f", *shown.SpentUSD, ledger)
		}
		return *shown.SpentUSD < ledger+1e-6 && *shown.ReservedUSD == 0
	})
	t.Logf("after recovery: %d of %d refused; keys show: spent $%.6f, reserved $%.6f; ledger $%.6f", refusedAgain, perWave, *shown.SpentUSD, *shown.ReservedUSD, ledger)
	if *shown.SpentUSD > ledger+1e-6 || *shown.ReservedUSD != 0 {
		t.Fatalf("keys show $%.6f spent, $%.6f reserved 10s after recovery; the ledger has $%.6f", *shown.SpentUSD, *shown.ReservedUSD, ledger)
	}
	for _, r := range reps {
		if !strings.Contains(r.Log.String(), "shared limits restored after redis restarted") {
			t.Fatalf("replica %s did not log its return to the shared counters:\n%s", r.name, r.Log.String())
		}
	}
}
