package router

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/fleet"
	"llmgate/internal/testenv"
)

// fakeEngine is an httptest engine whose /metrics say what the test sets.
type fakeEngine struct {
	srv *httptest.Server
	mu  sync.Mutex
	// waiting, running are reported; down answers 500.
	waiting, running int
	down             bool
	scrapes          int
	auth             string
}

func newFakeEngine(t *testing.T) *fakeEngine {
	e := &fakeEngine{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.scrapes++
		e.auth = r.Header.Get("Authorization")
		if e.down {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} %d\nvllm:num_requests_running{model_name=\"m\"} %d\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.1\n", e.waiting, e.running)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *fakeEngine) set(waiting, running int, down bool) {
	e.mu.Lock()
	e.waiting, e.running, e.down = waiting, running, down
	e.mu.Unlock()
}

// fleetTable builds a table over n fake vLLM engines (backends e0…)
// serving model m with the given balancing, scraped every 100ms.
func fleetTable(t *testing.T, n int, balancing string) (*Table, *fakeClock, []*fakeEngine) {
	t.Helper()
	var src strings.Builder
	src.WriteString("routing: {engine_metrics_interval: 100ms}\nbackends:\n")
	engines := make([]*fakeEngine, n)
	for i := range engines {
		engines[i] = newFakeEngine(t)
		// User information in the URL: a password that must never show.
		u := strings.Replace(engines[i].srv.URL, "http://", "http://ops:hunter2@", 1)
		fmt.Fprintf(&src, "  e%d: {url: %q, engine: vllm, api_key: sk-engine-secret}\n", i, u+"/v1")
	}
	src.WriteString("  cloud: {url: http://127.0.0.1:9}\nmodels:\n  m:\n    balancing: " + balancing + "\n    deployments:\n")
	for i := range engines {
		fmt.Fprintf(&src, "      - {backend: e%d}\n", i)
	}
	src.WriteString("  other: {backend: e0}\n  c: {backend: cloud, balancing: " + balancing + "}\n")
	cfg, err := config.Load(strings.NewReader(src.String()), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	tb := NewWithOptions(cfg, Options{Now: clk.Now, Backoff: time.Microsecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(tb.Close)
	return tb, clk, engines
}

// waitFor polls cond (a scrape happens on its own goroutine) for up to
// ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, cond, what)
}

// waitLoads waits until every deployment's reading shows the engines'
// current waiting figures.
func waitLoads(t *testing.T, r *Route, engines []*fakeEngine) {
	t.Helper()
	waitFor(t, "fresh engine readings", func() bool {
		for i, d := range r.Deployments {
			sn, ok := d.EngineLoad()
			engines[i].mu.Lock()
			want, down := engines[i].waiting, engines[i].down
			engines[i].mu.Unlock()
			if !ok || down || !sn.Fresh || sn.Waiting != float64(want) {
				return false
			}
		}
		return true
	})
}

// served runs one request through ForwardHint and returns the backend
// that served it.
func served(t *testing.T, tb *Table, r *Route, hint Hint) string {
	t.Helper()
	var got string
	if err := tb.ForwardHint(context.Background(), r, hint, func(ctx context.Context, d Deployment) (bool, error) {
		got = d.Backend.Name
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// session is an agent conversation: a system prompt of its own and a
// history that grows by one exchange per turn.
func sessionPrefix(s, turn int) []uint64 {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":"m","messages":[{"role":"system","content":"session %d:`, s)
	for i := range 600 {
		fmt.Fprintf(&b, " w%d", (i*7+s)%101)
	}
	b.WriteString(`"}`)
	for i := range turn {
		fmt.Fprintf(&b, `,{"role":"user","content":"turn %d of session %d: run the tests again and tell me what failed"}`, i, s)
	}
	b.WriteString(`]}`)
	return fleet.PrefixBlocks([]byte(b.String()), nil)
}

func TestCacheAware_EachTurnFollowsItsSessionsPrefix(t *testing.T) {
	tb, _, engines := fleetTable(t, 4, config.BalanceCacheAware)
	r, _ := tb.Route("m")
	waitLoads(t, r, engines)
	home := map[int]string{}
	for turn := range 4 {
		for s := range 8 {
			got := served(t, tb, r, Hint{Prefix: sessionPrefix(s, turn)})
			if turn == 0 {
				home[s] = got
				continue
			}
			if got != home[s] {
				t.Fatalf("session %d turn %d went to %s, its prefix is on %s", s, turn, got, home[s])
			}
		}
	}
	// Not every session on one replica: with every engine idle, new
	// sessions are spread by the tie-breaking rotation.
	seen := map[string]bool{}
	for _, b := range home {
		seen[b] = true
	}
	if len(seen) < 2 {
		t.Fatalf("8 new sessions all went to %v", home)
	}
	// The status pages show each engine's reading and the prefixes held.
	blocks := 0
	for _, dh := range tb.ModelHealth(r).Deployments {
		if dh.EngineLoad == nil || !dh.EngineLoad.Fresh || dh.EngineLoad.KVCacheUsage == nil || *dh.EngineLoad.KVCacheUsage != 0.1 {
			t.Fatalf("%s: engine load %+v", dh.Backend, dh.EngineLoad)
		}
		blocks += dh.PrefixBlocks
	}
	if want := len(sessionPrefix(0, 3)); blocks < 8*want {
		t.Fatalf("%d prefix blocks held in all, want at least 8 sessions × %d", blocks, want)
	}
	// The engine's credentials go with the scrape.
	engines[0].mu.Lock()
	defer engines[0].mu.Unlock()
	if engines[0].auth != "Bearer sk-engine-secret" {
		t.Fatalf("scrape sent Authorization %q", engines[0].auth)
	}
}

func TestCacheAware_OverloadedReplicaLosesItsSessionForAnother(t *testing.T) {
	tb, _, engines := fleetTable(t, 4, config.BalanceCacheAware)
	r, _ := tb.Route("m")
	waitLoads(t, r, engines)
	prefix := sessionPrefix(1, 2)
	home := served(t, tb, r, Hint{Prefix: prefix})
	hi := int(home[1] - '0')
	engines[hi].set(30, 8, false) // its engine's queue fills
	waitLoads(t, r, engines)
	spill := served(t, tb, r, Hint{Prefix: prefix})
	if spill == home {
		t.Fatalf("the next turn went to %s although its engine has 38 requests and the others none", spill)
	}
	// Once it drained, the session goes where its prefix is: home, or
	// where it spilled (which holds it now too), not to a third replica.
	engines[hi].set(0, 0, false)
	waitLoads(t, r, engines)
	for turn := 3; turn < 6; turn++ {
		if got := served(t, tb, r, Hint{Prefix: sessionPrefix(1, turn)}); got != home && got != spill {
			t.Fatalf("turn %d went to %s; its prefix is on %s and %s", turn, got, home, spill)
		}
	}
}

func TestLeastLoad_EngineMetricsThenInFlightWhenStale(t *testing.T) {
	tb, clk, engines := fleetTable(t, 2, config.BalanceLeastLoad)
	r, _ := tb.Route("m")
	engines[0].set(6, 4, false)
	engines[1].set(0, 1, false)
	waitLoads(t, r, engines)
	// The gateway has more requests in flight on e1 than on e0, but the
	// engines (which see other gateways' requests too) say e0 is busier.
	r.Deployments[1].s.be.inflight.Add(3)
	defer r.Deployments[1].s.be.inflight.Add(-3)
	if got := tb.order(r, nil, &Hint{}); got[0] != 1 {
		t.Fatalf("order %v; want e1, which its engine says is less loaded", got)
	}
	// Readings older than three intervals are not believed: the
	// requests in flight decide. (The fake clock moves; the scraper's
	// next reading will be stamped with the moved clock, so move it far.)
	engines[0].set(0, 0, true)
	engines[1].set(0, 0, true)
	clk.Advance(time.Hour)
	for _, d := range r.Deployments {
		if sn, _ := d.EngineLoad(); sn.Fresh {
			t.Fatalf("a reading an hour old is fresh: %+v", sn)
		}
	}
	if got := tb.order(r, nil, &Hint{}); got[0] != 0 {
		t.Fatalf("order %v; with stale readings want e0, with fewer requests in flight", got)
	}
}

func TestScraper_ReplicaThatStopsAnsweringMetricsIsBalancedOnInFlight(t *testing.T) {
	tb, clk, engines := fleetTable(t, 2, config.BalanceLeastLoad)
	r, _ := tb.Route("m")
	engines[0].set(0, 0, false)
	engines[1].set(5, 5, false)
	waitLoads(t, r, engines)
	engines[0].set(0, 0, true)
	waitFor(t, "a failed scrape", func() bool {
		sn, _ := r.Deployments[0].EngineLoad()
		return sn.Err != ""
	})
	sn, _ := r.Deployments[0].EngineLoad()
	if !strings.Contains(sn.Err, "answered 500") || strings.Contains(sn.Err, "sk-engine-secret") || strings.Contains(sn.Err, "hunter2") {
		t.Fatalf("scrape error %q", sn.Err)
	}
	// e1 keeps answering; e0's last reading ages out.
	clk.Advance(fleet.StaleAfter*100*time.Millisecond + time.Millisecond)
	waitFor(t, "e1 read at the moved clock", func() bool {
		s1, _ := r.Deployments[1].EngineLoad()
		s0, _ := r.Deployments[0].EngineLoad()
		return s1.Fresh && !s0.Fresh
	})
	r.Deployments[0].s.be.inflight.Add(12)
	defer r.Deployments[0].s.be.inflight.Add(-12)
	if got := tb.order(r, nil, &Hint{}); got[0] != 1 {
		t.Fatalf("order %v; e0 has 12 requests in flight and no metrics, e1 10 by its metrics", got)
	}
}

func TestScraper_OnePerEngineBackendNoneForCloudAndCarriedAcrossReload(t *testing.T) {
	tb, _, _ := fleetTable(t, 2, config.BalanceCacheAware)
	if tb.bstates["e0"].scraper.Load() == nil || tb.bstates["e1"].scraper.Load() == nil {
		t.Fatal("engine backends of a cache_aware model are not scraped")
	}
	if tb.bstates["cloud"].scraper.Load() != nil {
		t.Fatal("a backend that is no engine is scraped")
	}
	// Two models on e0 share one scraper (it is the backend's).
	r1, _ := tb.Route("m")
	r2, _ := tb.Route("other")
	if r1.Deployments[0].s.be.scraper.Load() != r2.Deployments[0].s.be.scraper.Load() {
		t.Fatal("two models on one engine have two scrapers")
	}
	cfgSrc := "backends:\n  e0: {url: http://127.0.0.1:9, engine: vllm}\nmodels:\n  m: {backend: e0}\n"
	cfg, err := config.Load(strings.NewReader(cfgSrc), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plain := New(cfg)
	if plain.bstates["e0"].scraper.Load() != nil {
		t.Fatal("an engine under least_outstanding is scraped")
	}
	waitCfg, err := config.Load(strings.NewReader(strings.Replace(cfgSrc, "{backend: e0}", "{deployments: [{backend: e0, queue_when_waiting: 4}]}", 1)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	asked := New(waitCfg)
	if asked.bstates["e0"].scraper.Load() == nil {
		t.Fatal("a deployment with queue_when_waiting does not have its engine scraped")
	}
	asked.Close()
	// A reload that makes the model cache_aware starts scraping the
	// carried-over backend; closing the old table leaves it to the new
	// one.
	cfg2, err := config.Load(strings.NewReader(strings.Replace(cfgSrc, "{backend: e0}", "{backend: e0, balancing: cache_aware}", 1)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	next := NewWithOptions(cfg2, Options{Previous: plain})
	sc := next.bstates["e0"].scraper.Load()
	if next.bstates["e0"] != plain.bstates["e0"] || sc == nil {
		t.Fatal("the reloaded table did not carry the backend over and scrape it")
	}
	plain.Close()
	if next.bstates["e0"].scraper.Load() != sc {
		t.Fatal("closing the old table dropped the new table's scraper")
	}
	next.Close()
}

func TestSession_PinsAConversationAndFailsOverWhenItsDeploymentIsDown(t *testing.T) {
	tb, _, _ := fleetTable(t, 3, config.BalanceSession)
	r, _ := tb.Route("m")
	home := map[string]string{}
	for s := range 12 {
		key := fmt.Sprintf("conv-%d", s)
		home[key] = served(t, tb, r, Hint{Session: key})
		for range 3 {
			if got := served(t, tb, r, Hint{Session: key}); got != home[key] {
				t.Fatalf("%s moved from %s to %s", key, home[key], got)
			}
		}
	}
	// Take one deployment out (its breaker opens after failures): its
	// sessions move, each to one other deployment and stay there; the
	// others' sessions do not move.
	var down string
	for _, b := range home {
		down = b
		break
	}
	for _, d := range r.Deployments {
		if d.Backend.Name == down {
			for range 10 {
				d.s.br.record(tb.opt.Now(), outcomeFailure, 0, "boom")
			}
		}
	}
	for key, b := range home {
		got := served(t, tb, r, Hint{Session: key})
		if b != down && got != b {
			t.Fatalf("%s moved from healthy %s to %s", key, b, got)
		}
		if b == down {
			if got == down {
				t.Fatalf("%s still sent to %s, which is down", key, down)
			}
			if again := served(t, tb, r, Hint{Session: key}); again != got {
				t.Fatalf("%s failed over to %s, then to %s", key, got, again)
			}
		}
	}
	// Without a session key, requests are balanced on load.
	if got := served(t, tb, r, Hint{}); got == down {
		t.Fatalf("a request without a session went to %s, which is down", down)
	}
}

func TestConfirmPrefix_EngineThatKeepsLessMakesTheRecordForgetSooner(t *testing.T) {
	tb, _, engines := fleetTable(t, 2, config.BalanceCacheAware)
	r, _ := tb.Route("m")
	waitLoads(t, r, engines)
	prefix := sessionPrefix(3, 2)
	var got Deployment
	for range 2 {
		if err := tb.ForwardHint(context.Background(), r, Hint{Prefix: prefix}, func(ctx context.Context, d Deployment) (bool, error) {
			got = d
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got.PrefixHeld() != len(prefix) {
		t.Fatalf("second request: predicted %d blocks held, want all %d", got.PrefixHeld(), len(prefix))
	}
	nominal := got.s.rec.Cap()
	got.ConfirmPrefix(len(prefix), 1000, 1000) // the engine agrees
	if got.s.rec.Cap() != nominal {
		t.Fatalf("a confirmed prediction changed the capacity: %d → %d", nominal, got.s.rec.Cap())
	}
	got.ConfirmPrefix(len(prefix), 10, 1000) // it had evicted the prefix
	if c := got.s.rec.Cap(); c != nominal*3/4 {
		t.Fatalf("capacity %d after a miss, want %d", c, nominal*3/4)
	}
	got.ConfirmPrefix(len(prefix), 1000, 1000)
	if c := got.s.rec.Cap(); c <= nominal*3/4 {
		t.Fatalf("capacity %d did not grow back after a hit", c)
	}
}

func TestHintWants_CoversFallbackModels(t *testing.T) {
	tb, _ := table(t, threeBackends+`models:
  plain: {backend: a, fallbacks: [cached, pinned]}
  cached: {balancing: cache_aware, deployments: [{backend: b}, {backend: c}]}
  pinned: {balancing: session, backend: c}
  alone: {backend: a}
`)
	for model, want := range map[string][2]bool{"plain": {true, true}, "cached": {true, false}, "pinned": {false, true}, "alone": {false, false}} {
		r, _ := tb.Route(model)
		if p, s := r.HintWants(); p != want[0] || s != want[1] {
			t.Errorf("%s: HintWants = %v, %v, want %v", model, p, s, want)
		}
	}
}

// A backend without an engine: preset behind an engine-aware model is not
// read until the gateway learns what it runs: at once when the table is
// built after that (Options.EngineKind), else when it learns it
// (EngineLearned). A server that said it is none of vLLM, SGLang or
// llama.cpp, a model that does not read engines, and a closed table are
// never read.
func TestEngineLearned_ReadsABackendWithoutPresetOnceItsEngineIsKnown(t *testing.T) {
	engines := []*fakeEngine{newFakeEngine(t), newFakeEngine(t), newFakeEngine(t)}
	engines[0].set(3, 1, false)
	engines[1].set(5, 2, false)
	src := fmt.Sprintf(`routing: {engine_metrics_interval: 100ms}
backends:
  a: {url: %q}
  b: {url: %q}
  c: {url: %q}
models:
  m:
    balancing: least_load
    deployments: [{backend: a}, {backend: b}]
  plain: {backend: c}
`, engines[0].srv.URL+"/v1", engines[1].srv.URL+"/v1", engines[2].srv.URL+"/v1")
	cfg, err := config.Load(strings.NewReader(src), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	learned := map[string]string{"b": "vllm"} // b was learned before the build
	tb := NewWithOptions(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		EngineKind: func(backend string) string { return learned[backend] }})
	t.Cleanup(tb.Close)
	r, _ := tb.Route("m")
	load := func(i int) (float64, bool) {
		sn, ok := r.Deployments[i].EngineLoad()
		return sn.Waiting, ok && sn.Fresh
	}
	waitFor(t, "b read from the start", func() bool { w, ok := load(1); return ok && w == 5 })
	if _, ok := r.Deployments[0].EngineLoad(); ok {
		t.Fatal("a is read before anything was learned of it")
	}
	tb.EngineLearned("a", "ollama") // not an engine with queue metrics
	tb.EngineLearned("c", "vllm")   // used by no engine-aware model
	if _, ok := r.Deployments[0].EngineLoad(); ok {
		t.Fatal("a is read after it said it is Ollama")
	}
	plain, _ := tb.Route("plain")
	if _, ok := plain.Deployments[0].EngineLoad(); ok {
		t.Fatal("c is read though no engine-aware model uses it")
	}
	tb.EngineLearned("a", "vllm")
	waitFor(t, "a read once learned", func() bool { w, ok := load(0); return ok && w == 3 })

	// A closed table starts nothing.
	tb2 := NewWithOptions(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	tb2.Close()
	tb2.EngineLearned("a", "vllm")
	r2, _ := tb2.Route("m")
	if _, ok := r2.Deployments[0].EngineLoad(); ok {
		t.Fatal("a closed table started reading an engine")
	}
}

// stateLeaser is a Leaser whose engine "a" is in the state set.
type stateLeaser struct {
	mu    sync.Mutex
	state string
}

func (l *stateLeaser) Manages(backend string) bool { return backend == "a" }
func (l *stateLeaser) Lease(context.Context, string, string) (func(error) error, error) {
	return func(err error) error { return err }, nil
}
func (l *stateLeaser) EngineState(backend string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state, l.state == "ready"
}
func (l *stateLeaser) set(s string) { l.mu.Lock(); l.state = s; l.mu.Unlock() }

func TestScraper_AManagedEngineIsReadOnlyWhileReady(t *testing.T) {
	// A local engine stopped by its idle timeout has nothing on its port:
	// its metrics are not asked for (no connection refused every
	// interval), and the reading says why it is missing.
	eng := newFakeEngine(t)
	eng.set(4, 1, false)
	src := fmt.Sprintf(`routing: {engine_metrics_interval: 100ms}
backends:
  a: {url: %q}
models:
  m:
    balancing: least_load
    deployments: [{backend: a}]
`, eng.srv.URL+"/v1")
	cfg, err := config.Load(strings.NewReader(src), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	leaser := &stateLeaser{state: "stopped"}
	tb := NewWithOptions(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Leaser: leaser,
		EngineKind: func(string) string { return "vllm" }})
	t.Cleanup(tb.Close)
	r, _ := tb.Route("m")
	waitFor(t, "the reading names the stopped engine", func() bool {
		sn, ok := r.Deployments[0].EngineLoad()
		return ok && strings.Contains(sn.Err, "engine stopped")
	})
	eng.mu.Lock()
	n := eng.scrapes
	eng.mu.Unlock()
	if n != 0 {
		t.Fatalf("a stopped engine's port was asked %d times for metrics", n)
	}
	leaser.set("ready")
	waitFor(t, "read once ready", func() bool {
		sn, ok := r.Deployments[0].EngineLoad()
		return ok && sn.Fresh && sn.Waiting == 4
	})
}
