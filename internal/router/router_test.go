package router

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/provider"
)

// fakeClock is a settable clock for breaker tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// table builds a routing table from YAML with a fake clock and no backoff
// to speak of. Backends point at a closed port: attempts here are fakes.
func table(t testing.TB, src string) (*Table, *fakeClock) {
	t.Helper()
	cfg, err := config.Load(strings.NewReader(src), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	tb := NewWithOptions(cfg, Options{Now: clk.Now, Backoff: time.Microsecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(tb.Close)
	return tb, clk
}

const threeBackends = `
backends:
  a: {url: http://127.0.0.1:9}
  b: {url: http://127.0.0.1:9}
  c: {url: http://127.0.0.1:9}
`

var (
	err502 = apierror.New(http.StatusBadGateway, apierror.KindUpstream, "backend_error", "boom")
	err504 = apierror.New(http.StatusGatewayTimeout, apierror.KindTimeout, "backend_timeout", "slow")
	err400 = apierror.New(http.StatusBadRequest, apierror.KindInvalidRequest, "backend_rejected_request", "context too long")
)

func err429(retryAfter string) error {
	e := apierror.New(http.StatusTooManyRequests, apierror.KindRateLimit, "backend_rate_limited", "slow down")
	if retryAfter != "" {
		e.Header = http.Header{"Retry-After": {retryAfter}}
	}
	return e
}

// script answers attempts per backend name and records the order.
type script struct {
	mu    sync.Mutex
	calls []string
	by    map[string]func() (bool, error)
}

func (s *script) attempt(ctx context.Context, d Deployment) (bool, error) {
	s.mu.Lock()
	s.calls = append(s.calls, d.Backend.Name)
	f := s.by[d.Backend.Name]
	s.mu.Unlock()
	if f == nil {
		return true, nil
	}
	return f()
}

func fails(err error) func() (bool, error) { return func() (bool, error) { return false, err } }

func forward(t *testing.T, tb *Table, model string, s *script) error {
	t.Helper()
	r, err := tb.Route(model)
	if err != nil {
		t.Fatal(err)
	}
	return tb.Forward(context.Background(), r, s.attempt)
}

func TestForward_FailsOverByPriorityThenFallbacksInOrder(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m:
    deployments:
      - {backend: b, priority: 1}
      - {backend: a, priority: 0}
    fallbacks: [f1, f2]
  f1: {backend: c}
  f2: {backend: a, upstream_model: other}
`)
	s := &script{by: map[string]func() (bool, error){"a": fails(err502), "b": fails(err504), "c": fails(err429(""))}}
	// f2 shares backend a but is another deployment (upstream "other"):
	// it has its own breaker and succeeds.
	s.by["a"] = func() (bool, error) {
		if len(s.calls) == 4 {
			return true, nil
		}
		return false, err502
	}
	if err := forward(t, tb, "m", s); err != nil {
		t.Fatalf("err = %v", err)
	}
	if got := strings.Join(s.calls, ","); got != "a,b,c,a" {
		t.Fatalf("attempt order %s, want a,b,c,a (priority 0, priority 1, fallback f1, fallback f2)", got)
	}
}

func TestForward_AllFailedKeepsLastStatusAndListsAttempts(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m:
    deployments: [{backend: a}, {backend: b}]
`)
	s := &script{by: map[string]func() (bool, error){"a": fails(err502), "b": fails(err429("7"))}}
	err := forward(t, tb, "m", s)
	e := apierror.From(err)
	if len(s.calls) != 2 {
		t.Fatalf("calls %v, want both deployments once", s.calls)
	}
	last := s.calls[1]
	if last == "b" && (e.Status != 429 || e.Header.Get("Retry-After") != "7") {
		t.Fatalf("last failure was the 429 but the client gets %d Retry-After=%q", e.Status, e.Header.Get("Retry-After"))
	}
	if !strings.Contains(e.Message, "all 2 attempts failed") {
		t.Fatalf("message %q does not list the attempts", e.Message)
	}
}

func TestForward_NeverRetriesRequestErrorsOrAfterCommit(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m:
    deployments: [{backend: a}, {backend: b}]
    balancing: lowest_latency
`)
	for name, f := range map[string]func() (bool, error){
		"4xx caused by the request": fails(err400),
		"failure after first byte":  func() (bool, error) { return true, err502 },
	} {
		t.Run(name, func(t *testing.T) {
			s := &script{by: map[string]func() (bool, error){"a": f, "b": f}}
			if err := forward(t, tb, "m", s); err == nil {
				t.Fatal("want the error back")
			}
			if len(s.calls) != 1 {
				t.Fatalf("attempts %v, want exactly one", s.calls)
			}
		})
	}
}

func TestForward_ClientGoneStopsRetrying(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m: {deployments: [{backend: a}, {backend: b}]}
`)
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := tb.Route("m")
	n := 0
	err := tb.Forward(ctx, r, func(ctx context.Context, d Deployment) (bool, error) {
		n++
		cancel()
		return false, apierror.New(499, apierror.KindClientClosed, "client_closed", "client closed the request")
	})
	if n != 1 || apierror.From(err).Status != 499 {
		t.Fatalf("attempts %d, err %v; want one attempt and 499", n, err)
	}
	d := r.Deployments[0]
	if st := d.s.br.status(time.Now()); st.Consecutive != 0 {
		t.Fatalf("a client leaving counted against the deployment: %+v", st)
	}
}

func TestBreaker_OpensAfterConsecutiveFailuresThenHalfOpenProbeClosesIt(t *testing.T) {
	tb, clk := table(t, threeBackends+"models:\n  m: {backend: a}\n")
	s := &script{by: map[string]func() (bool, error){"a": fails(err502)}}
	for i := 0; i < 5; i++ {
		_ = forward(t, tb, "m", s)
	}
	s.calls = nil
	err := forward(t, tb, "m", s)
	e := apierror.From(err)
	if len(s.calls) != 0 || e.Status != 503 || e.Code != "no_healthy_deployment" {
		t.Fatalf("after 5 failures: calls %v, err %v; want the open breaker to answer 503 without calling", s.calls, err)
	}
	if ra := e.Header.Get("Retry-After"); ra != "5" {
		t.Fatalf("Retry-After %q, want 5 (the first open period)", ra)
	}
	clk.Advance(5 * time.Second)
	// Half-open: exactly one probe at a time.
	r, _ := tb.Route("m")
	probeIn := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- tb.Forward(context.Background(), r, func(context.Context, Deployment) (bool, error) {
			close(probeIn)
			<-release
			return true, nil
		})
	}()
	<-probeIn
	if err := forward(t, tb, "m", &script{}); apierror.From(err).Status != 503 {
		t.Fatalf("a second request during the probe got %v, want 503", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h := tb.ModelHealth(r); h.Deployments[0].Status != "healthy" {
		t.Fatalf("after a good probe the status is %q, want healthy", h.Deployments[0].Status)
	}
}

func TestBreaker_PenaltyDoublesOnFailedProbesAndDecays(t *testing.T) {
	tb, clk := table(t, threeBackends+"models:\n  m: {backend: a}\n")
	r, _ := tb.Route("m")
	br := r.Deployments[0].s.br
	bad := &script{by: map[string]func() (bool, error){"a": fails(err502)}}
	openFor := func() time.Duration { return br.status(clk.Now()).OpenFor }
	for i := 0; i < 5; i++ {
		_ = forward(t, tb, "m", bad)
	}
	if got := openFor(); got != 5*time.Second {
		t.Fatalf("first open period %v, want 5s", got)
	}
	clk.Advance(5 * time.Second)
	_ = forward(t, tb, "m", bad) // failed probe
	if got := openFor(); got != 10*time.Second {
		t.Fatalf("after a failed probe open for %v, want 10s", got)
	}
	clk.Advance(10 * time.Second)
	_ = forward(t, tb, "m", bad)
	if got := openFor(); got != 20*time.Second {
		t.Fatalf("after a second failed probe open for %v, want 20s", got)
	}
	// A long quiet period forgives the penalty: one doubling per minute.
	clk.Advance(20 * time.Second)
	if err := forward(t, tb, "m", &script{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Minute)
	for i := 0; i < 5; i++ {
		_ = forward(t, tb, "m", bad)
	}
	if got := openFor(); got != 5*time.Second {
		t.Fatalf("after the penalty decayed the open period is %v, want 5s again", got)
	}
}

func TestBreaker_TimeoutsCountHalfAndRateLimitsOnlyRest(t *testing.T) {
	tb, _ := table(t, threeBackends+"models:\n  m: {backend: a}\n")
	r, _ := tb.Route("m")
	slow := &script{by: map[string]func() (bool, error){"a": fails(err504)}}
	for i := 0; i < 9; i++ {
		_ = forward(t, tb, "m", slow)
	}
	if st := tb.ModelHealth(r).Deployments[0].Status; st != "healthy" {
		t.Fatalf("9 time-outs: status %q, want still healthy (a time-out counts half)", st)
	}
	_ = forward(t, tb, "m", slow)
	if st := tb.ModelHealth(r).Deployments[0].Status; st != StateOpen {
		t.Fatalf("10 time-outs: status %q, want open", st)
	}

	tb2, clk2 := table(t, threeBackends+"models:\n  m: {backend: a}\n")
	limited := &script{by: map[string]func() (bool, error){"a": fails(err429("3"))}}
	_ = forward(t, tb2, "m", limited)
	r2, _ := tb2.Route("m")
	h := tb2.ModelHealth(r2).Deployments[0]
	if h.Status != "rate_limited" || h.Breaker.State != StateClosed || h.RetryInS != 3 {
		t.Fatalf("after 429 Retry-After 3: %+v; want rate_limited for 3s with the breaker closed", h)
	}
	ok := &script{}
	if err := forward(t, tb2, "m", ok); apierror.From(err).Status != 429 || len(ok.calls) != 0 {
		t.Fatalf("during Retry-After the deployment was called (%v) or err %v", ok.calls, err)
	}
	clk2.Advance(3 * time.Second)
	if err := forward(t, tb2, "m", ok); err != nil || len(ok.calls) != 1 {
		t.Fatalf("after Retry-After: err %v calls %v", err, ok.calls)
	}
}

func TestBreaker_OpensOnFailureRateWithoutAStreak(t *testing.T) {
	tb, _ := table(t, threeBackends+"models:\n  m: {backend: a}\n")
	r, _ := tb.Route("m")
	n := 0
	flaky := &script{by: map[string]func() (bool, error){"a": func() (bool, error) {
		n++
		if n%2 == 0 {
			return false, err502
		}
		return true, nil
	}}}
	for i := 0; i < 9; i++ {
		_ = forward(t, tb, "m", flaky)
	}
	if st := tb.ModelHealth(r).Deployments[0].Status; st != "healthy" {
		t.Fatalf("below the minimum volume: %q", st)
	}
	for i := 0; i < 3; i++ {
		_ = forward(t, tb, "m", flaky)
	}
	if st := tb.ModelHealth(r).Deployments[0].Status; st != StateOpen {
		t.Fatalf("half of 12 requests failed without a streak: status %q, want open", st)
	}
}

func TestForward_AllDeploymentsOpenTriesFallback(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m: {backend: a, fallbacks: [f]}
  f: {backend: b}
`)
	bad := &script{by: map[string]func() (bool, error){"a": fails(err502)}}
	for i := 0; i < 5; i++ {
		_ = forward(t, tb, "m", bad)
	}
	s := &script{}
	if err := forward(t, tb, "m", s); err != nil || strings.Join(s.calls, ",") != "b" {
		t.Fatalf("with m's only deployment open: calls %v err %v; want the fallback alone", s.calls, err)
	}
}

func TestOrder_Strategies(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  lo: {deployments: [{backend: a}, {backend: b}, {backend: c}]}
  wr:
    balancing: weighted_random
    deployments: [{backend: a, weight: 3}, {backend: b, weight: 1}]
  ll:
    balancing: lowest_latency
    deployments: [{backend: a}, {backend: b}]
`)
	lo, _ := tb.Route("lo")
	lo.Deployments[0].s.outstanding.Store(4)
	lo.Deployments[1].s.outstanding.Store(1)
	lo.Deployments[2].s.outstanding.Store(2)
	if got := tb.order(lo, nil, &Hint{}); got[0] != 1 || got[1] != 2 || got[2] != 0 {
		t.Fatalf("least outstanding order %v, want [1 2 0]", got)
	}
	wr, _ := tb.Route("wr")
	first := map[int]int{}
	const n = 20000
	for i := 0; i < n; i++ {
		first[tb.order(wr, nil, &Hint{})[0]]++
	}
	if share := float64(first[0]) / n; share < 0.72 || share > 0.78 {
		t.Fatalf("weight 3:1 gave the heavier deployment %.3f of first picks, want about 0.75", share)
	}
	ll, _ := tb.Route("ll")
	ll.Deployments[0].ObserveLatency(50 * time.Millisecond)
	ll.Deployments[1].ObserveLatency(10 * time.Millisecond)
	first = map[int]int{}
	for i := 0; i < 2000; i++ {
		first[tb.order(ll, nil, &Hint{})[0]]++
	}
	if share := float64(first[1]) / 2000; share < 0.9 {
		t.Fatalf("lowest latency picked the faster deployment first %.3f of the time, want >= 0.9", share)
	}
}

func TestForward_SingleDeploymentAllocatesNothing(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  one: {backend: a}
  two: {deployments: [{backend: a}, {backend: b}]}
`)
	ctx := context.Background()
	ok := func(context.Context, Deployment) (bool, error) { return true, nil }
	for _, m := range []string{"one", "two"} {
		r, _ := tb.Route(m)
		allocs := testing.AllocsPerRun(1000, func() { _ = tb.Forward(ctx, r, ok) })
		if allocs != 0 {
			t.Errorf("Forward on %q allocates %.1f times per request, want 0", m, allocs)
		}
	}
}

func TestRetryAfter_SecondsAndDates(t *testing.T) {
	if d := retryAfter(http.Header{"Retry-After": {"2.5"}}); d != 2500*time.Millisecond {
		t.Fatalf("seconds: %v", d)
	}
	at := time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat)
	if d := retryAfter(http.Header{"Retry-After": {at}}); d < 8*time.Second || d > 11*time.Second {
		t.Fatalf("date: %v", d)
	}
	if d := retryAfter(http.Header{"Retry-After": {"soon"}}); d != 0 {
		t.Fatalf("garbage: %v", d)
	}
}

func TestNewWithOptions_ReloadKeepsUnchangedBackendsAndTheirBreakers(t *testing.T) {
	src := threeBackends + "models:\n  m: {deployments: [{backend: a}, {backend: b, priority: 1}]}\n"
	t1, clk := table(t, src)
	r1, _ := t1.Route("m")
	bad := &script{by: map[string]func() (bool, error){"a": fails(err502)}}
	for i := 0; i < 5; i++ {
		_ = forward(t, t1, "m", bad)
	}
	// b changes (a time-out), a moves down two lines but is unchanged.
	src2 := "\n\nbackends:\n  a: {url: http://127.0.0.1:9}\n  b: {url: http://127.0.0.1:9, timeout: 5s}\n  c: {url: http://127.0.0.1:9}\nmodels:\n  m: {deployments: [{backend: a}, {backend: b, priority: 1}]}\n"
	cfg, err := config.Load(strings.NewReader(src2), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t2 := NewWithOptions(cfg, Options{Now: clk.Now, Previous: t1})
	defer t2.Close()
	t1.Close()
	if t2.Backend("a") != t1.Backend("a") || t2.Backend("b") == t1.Backend("b") {
		t.Fatal("want backend a carried over and backend b rebuilt")
	}
	r2, _ := t2.Route("m")
	if h := t2.ModelHealth(r2).Deployments[0]; h.Backend != "a" || h.Status != StateOpen {
		t.Fatalf("the open breaker of a was lost in the reload: %+v", h)
	}
	if r1.Deployments[1].s == r2.Deployments[1].s {
		t.Fatal("b's state was kept although its settings changed")
	}
}

func TestBreaker_YAMLSettingsTakeEffect(t *testing.T) {
	tb, clk := table(t, threeBackends+"models:\n  m: {backend: a}\nrouting:\n  circuit_breaker:\n    consecutive_failures: 2\n    open_for: 30s\n")
	s := &script{by: map[string]func() (bool, error){"a": fails(err502)}}
	for i := 0; i < 2; i++ {
		_ = forward(t, tb, "m", s)
	}
	s.calls = nil
	e := apierror.From(forward(t, tb, "m", s))
	if len(s.calls) != 0 || e.Status != 503 || e.Header.Get("Retry-After") != "30" {
		t.Fatalf("after 2 failures with consecutive_failures: 2 and open_for: 30s: calls %v, %d, Retry-After %q", s.calls, e.Status, e.Header.Get("Retry-After"))
	}
	clk.Advance(29 * time.Second)
	if e := apierror.From(forward(t, tb, "m", s)); e.Status != 503 {
		t.Fatalf("still open at 29s: got %d", e.Status)
	}

	off, _ := table(t, threeBackends+"models:\n  m: {backend: a}\nrouting:\n  circuit_breaker: {enabled: false}\n")
	s = &script{by: map[string]func() (bool, error){"a": fails(err502)}}
	for i := 0; i < 30; i++ {
		_ = forward(t, off, "m", s)
	}
	if len(s.calls) != 30 {
		t.Fatalf("breaker disabled: %d of 30 requests reached the backend, want all", len(s.calls))
	}
}

func TestNotFoundFor_MessageIsPunctuatedSentences(t *testing.T) {
	tb, _ := table(t, threeBackends+"models:\n  qwen: {backend: a}\n  llama: {backend: b}\n")
	cases := []struct {
		model   string
		allowed func(string) bool
		want    string
	}{
		{"qwne", nil, `model "qwne" is not served by this gateway; did you mean "qwen"? Available models: llama, qwen`},
		{"mistral-large", nil, `model "mistral-large" is not served by this gateway; available models: llama, qwen`},
		{"", nil, `the request has no "model" field; available models: llama, qwen`},
		{"gpt-4", func(string) bool { return false }, `model "gpt-4" is not served by this gateway; this API key may use none of the models served here: ask the gateway admin to widen its model list`},
	}
	for _, c := range cases {
		err := tb.NotFoundFor(c.model, c.allowed)
		var e *apierror.Error
		if !errors.As(err, &e) || e.Message != c.want {
			t.Errorf("NotFoundFor(%q):\n got  %v\n want %s", c.model, err, c.want)
		}
	}
}

// OnHealthy runs after every passed health check, in the check's own
// sequence, and says when the backend comes back from down (two failed
// checks): the gateway asks the engine about itself again there.
func TestHealthCheck_OnHealthyRunsAfterEachPassAndSaysRecovered(t *testing.T) {
	var mu sync.Mutex
	healthy := true
	srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ok := healthy
		mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	cfg, err := config.Load(strings.NewReader(`
backends:
  e: {url: http://`+ln.Addr().String()+`/v1, health_check: {interval: 5ms}}
models:
  m: {backend: e}
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan bool, 1000)
	tb := NewWithOptions(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnHealthy: func(ctx context.Context, b *provider.Backend, recovered bool) {
			if b.Name != "e" || ctx.Err() != nil {
				t.Errorf("OnHealthy(%s), ctx %v", b.Name, ctx.Err())
			}
			calls <- recovered
		}})
	defer tb.Close()
	if <-calls {
		t.Fatal("the first pass says recovered")
	}
	mu.Lock()
	healthy = false
	mu.Unlock()
	r, _ := tb.Route("m")
	for { // down after two failed checks
		if _, ok := tb.Pick(r, &Hint{}); !ok {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for len(calls) > 0 { // passes before the failures
		if <-calls {
			t.Fatal("a pass before the failures says recovered")
		}
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	if !<-calls {
		t.Fatal("the first pass after being down does not say recovered")
	}
	if <-calls {
		t.Fatal("the pass after that says recovered too")
	}
}

// A fallback model is entered through the gate once, before its first
// deployment is tried: a refusal skips it for the next fallback, and is
// the client's error when nothing else was tried; breakers never see it.
func TestForward_FallbackGateSkipsARefusingFallback(t *testing.T) {
	tb, _ := table(t, threeBackends+`
models:
  m:
    deployments: [{backend: a}]
    fallbacks: [f1, f2]
  f1:
    deployments: [{backend: b}, {backend: c}]
  f2: {backend: c, upstream_model: other}
`)
	refusal := apierror.New(http.StatusTooManyRequests, apierror.KindRateLimit, "rate_limit_requests", "f1 is at its rpm")
	var asked []string
	gate := func(refuse string) FallbackGate {
		return func(ctx context.Context, r *Route) error {
			asked = append(asked, r.Model)
			if r.Model == refuse {
				return refusal
			}
			return nil
		}
	}
	r, err := tb.Route("m")
	if err != nil {
		t.Fatal(err)
	}
	// f1 refuses: its two deployments are never tried; f2 serves.
	s := &script{by: map[string]func() (bool, error){"a": fails(err502)}}
	if err := tb.Forward(WithFallbacks(context.Background(), Fallbacks{Gate: gate("f1")}), r, s.attempt); err != nil {
		t.Fatalf("err = %v, want f2 to serve", err)
	}
	if got := strings.Join(s.calls, ","); got != "a,c" || strings.Join(asked, ",") != "f1,f2" {
		t.Fatalf("attempts %s, gate asked %v; want a then f2's c, the gate asked for f1 then f2", got, asked)
	}
	// f1 admits: asked once for its two deployments.
	asked, s = nil, &script{by: map[string]func() (bool, error){"a": fails(err502), "b": fails(err502)}}
	if err := tb.Forward(WithFallbacks(context.Background(), Fallbacks{Gate: gate("")}), r, s.attempt); err != nil {
		t.Fatalf("err = %v, want f1's c to serve", err)
	}
	if strings.Join(asked, ",") != "f1" {
		t.Fatalf("gate asked %v, want f1 once", asked)
	}
	// Only fallbacks that refuse, after m's one attempt: the client gets
	// the last refusal in the list of attempts.
	asked, s = nil, &script{by: map[string]func() (bool, error){"a": fails(err502)}}
	all := func(ctx context.Context, r *Route) error { asked = append(asked, r.Model); return refusal }
	e := apierror.From(tb.Forward(WithFallbacks(context.Background(), Fallbacks{Gate: all}), r, s.attempt))
	if e.Status != http.StatusTooManyRequests || !strings.Contains(e.Message, "f1 is at its rpm") || !strings.Contains(e.Message, "a: backend_error") {
		t.Fatalf("every fallback refused: %d %q; want the 429 refusal after a's attempt", e.Status, e.Message)
	}
}
