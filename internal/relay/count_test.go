package relay_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"llmgate/internal/config"
	"llmgate/internal/engineinfo"
	"llmgate/internal/relay"
	"llmgate/internal/router"
)

// engineCounts is what each engine of a fleet has been asked so far.
func engineCounts(engines []*contextEngine) (tokenizes, generations []int) {
	for _, e := range engines {
		tokenizes = append(tokenizes, int(e.tokenizes.Load()))
		e.mu.Lock()
		generations = append(generations, len(e.bodies))
		e.mu.Unlock()
	}
	return tokenizes, generations
}

// TestCount_TheTokenizerOfTheDeploymentThatServes: under each engine-aware
// balancing, a request whose output limit may not fit is counted by the
// tokenizer of the deployment the router then sends it to — its pick is
// made once, before the admission, and Forward keeps to it — not by a
// deployment chosen otherwise.
func TestCount_TheTokenizerOfTheDeploymentThatServes(t *testing.T) {
	for _, balancing := range []string{config.BalanceCacheAware, config.BalanceLeastLoad, config.BalanceSession} {
		t.Run(balancing, func(t *testing.T) {
			engines := make([]*contextEngine, 3)
			var src strings.Builder
			src.WriteString("backends:\n")
			for i := range engines {
				engines[i] = newContextEngine(t, "vllm", 300)
				fmt.Fprintf(&src, "  r%d: {url: %s/v1}\n", i, engines[i].URL)
			}
			fmt.Fprintf(&src, "models:\n  m: {context_window: 1000, balancing: %s, deployments: [{backend: r0}, {backend: r1}, {backend: r2}]}\n", balancing)
			srv, _, _ := fitRelay(t, src.String())
			served := map[int]bool{}
			for i := range 30 {
				tok0, gen0 := engineCounts(engines)
				body := fmt.Sprintf(`{"model":"m","max_tokens":32000,"user":"conversation %d","messages":[{"role":"user","content":"question %d"}]}`, i, i)
				status, h, answer := post(t, srv.URL+"/v1/chat/completions", body)
				if status != 200 || !strings.HasPrefix(h.Get(relay.OutputLimitHeader), "32000->700") {
					t.Fatalf("request %d: %d %q %s", i, status, h.Get(relay.OutputLimitHeader), answer)
				}
				tok, gen := engineCounts(engines)
				counted, generated := -1, -1
				for k := range engines {
					if tok[k]-tok0[k] == 1 {
						counted = k
					}
					if gen[k]-gen0[k] == 1 {
						generated = k
					}
				}
				if counted < 0 || generated < 0 || counted != generated {
					t.Fatalf("request %d: tokenizer calls %v -> %v, generations %v -> %v: want one count, at the deployment that served", i, tok0, tok, gen0, gen)
				}
				served[generated] = true
			}
			if len(served) < 2 {
				t.Fatalf("30 requests with distinct prompts and sessions all went to r%v: the test shows nothing", served)
			}
		})
	}
}

// TestCount_ARetryElsewhereIsCountedAndFittedThere: the deployment picked
// (and counted at) fails before answering; the retry goes to one whose
// engine counts the prompt longer, and the output limit is fitted again
// there, by that engine's tokenizer.
func TestCount_ARetryElsewhereIsCountedAndFittedThere(t *testing.T) {
	first, second := newContextEngine(t, "vllm", 300), newContextEngine(t, "vllm", 600)
	first.fail.Store(true)
	srv, adm, _ := fitRelay(t, fmt.Sprintf(`routing: {retry_backoff: 1ms}
backends:
  first: {url: %s/v1}
  second: {url: %s/v1}
models:
  m: {context_window: 1000, deployments: [{backend: first, priority: 0}, {backend: second, priority: 1}]}
`, first.URL, second.URL))
	// A prompt long enough that no cheap bound says it fits either context.
	body := `{"model":"m","max_tokens":32000,"messages":[{"role":"user","content":"` + strings.Repeat("hi ", 500) + `"}]}`
	status, h, answer := post(t, srv.URL+"/v1/chat/completions", body)
	if status != 200 {
		t.Fatalf("%d %s", status, answer)
	}
	if a, b := first.tokenizes.Load(), second.tokenizes.Load(); a != 1 || b != 1 {
		t.Fatalf("tokenizer calls: first %d, second %d; want one each", a, b)
	}
	if got := second.last()["max_tokens"]; got != float64(400) {
		t.Errorf("the serving deployment got max_tokens %v, want 400 (its context less its engine's count)", got)
	}
	if got := h.Get(relay.OutputLimitHeader); !strings.HasPrefix(got, "700->400") {
		t.Errorf("%s: %q, want the second fit (700->400)", relay.OutputLimitHeader, got)
	}
	if reqs := adm.Requests(); len(reqs) != 1 || reqs[0].OutputTokens != 700 {
		t.Errorf("admissions %+v, want one, of the first fit's 700", reqs)
	}
}

// TestCount_ARetryOnALocalEngineIsFittedThereOnceItRuns: the retry of a
// request counted at another deployment lands on a local engine; once the
// engine is acquired the request is fitted again, by that engine's count.
func TestCount_ARetryOnALocalEngineIsFittedThereOnceItRuns(t *testing.T) {
	first, local := newContextEngine(t, "vllm", 300), newContextEngine(t, "vllm", 600)
	first.fail.Store(true)
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf(`routing: {retry_backoff: 1ms}
backends:
  first: {url: %s/v1}
  local: {url: %s/v1}
models:
  m: {context_window: 1000, deployments: [{backend: first, priority: 0}, {backend: local, priority: 1}]}
`, first.URL, local.URL)), "count.yaml")
	if err != nil {
		t.Fatal(err)
	}
	engine := &fakeLeaser{backends: []string{"local"}}
	table := router.NewWithOptions(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Leaser: engine})
	t.Cleanup(table.Close)
	acquired := func() int { leases, _ := engine.taken(); return len(leases) }
	rl := relay.New(relay.Options{Ledger: &recLedger{}, Engines: engineinfo.New(engineinfo.Options{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(serveRelay(rl, table, "retry"))
	t.Cleanup(srv.Close)

	body := `{"model":"m","max_tokens":32000,"messages":[{"role":"user","content":"` + strings.Repeat("hi ", 500) + `"}]}`
	status, h, answer := post(t, srv.URL+"/v1/chat/completions", body)
	if status != 200 || acquired() != 1 {
		t.Fatalf("%d (engine acquired %d times) %s", status, acquired(), answer)
	}
	if got := local.last()["max_tokens"]; got != float64(400) {
		t.Errorf("the local engine got max_tokens %v, want 400 (its context less its own count)", got)
	}
	if got := h.Get(relay.OutputLimitHeader); !strings.HasPrefix(got, "700->400") {
		t.Errorf("%s: %q, want the second fit (700->400)", relay.OutputLimitHeader, got)
	}
}
