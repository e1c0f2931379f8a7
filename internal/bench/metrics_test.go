package bench

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// runAgainst runs one cell per model against a TimedUpstream and returns the
// report plus the raw results kept by KeepRequests.
func runAgainst(t *testing.T, up *TimedUpstream, models []string, mutate func(*Options)) *Report {
	t.Helper()
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	targets, err := TargetsFromFlags(srv.URL+"/v1", "", models, "chat", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	o := Options{
		Targets: targets, Concurrencies: []int{3}, NumRequests: 9, Warmup: 0, Burstiness: 1,
		Workload:     Workload{InputLen: 8, OutputLen: 16, Seed: 1},
		Request:      RequestOptions{Timeout: 20 * time.Second},
		KeepRequests: true,
	}
	if mutate != nil {
		mutate(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestMetrics_TPOTUsesUsageTokensAndExcludesFirstToken(t *testing.T) {
	up := &TimedUpstream{T1: 20 * time.Millisecond, T2: 10 * time.Millisecond, Chunks: 5, TokensPerChunk: 3, PromptTokens: 42}
	rep := runAgainst(t, up, []string{"m"}, nil)
	c := rep.Results[0]
	if c.Completed != 9 || c.Failed != 0 {
		t.Fatalf("completed %d failed %d: %v", c.Completed, c.Failed, c.ErrorSamples)
	}
	if !strings.HasPrefix(c.Backend, "timed-upstream@127.0.0.1:") {
		t.Errorf("backend %q: want the server's owned_by and host", c.Backend)
	}
	if c.TotalOutputTokens != 9*15 || c.OutputTokensEstimated {
		t.Errorf("output tokens %d (estimated %v), want %d from usage", c.TotalOutputTokens, c.OutputTokensEstimated, 9*15)
	}
	if c.TotalInputTokens != 9*42 || c.InputTokensEstimated {
		t.Errorf("input tokens %d (estimated %v), want %d from usage", c.TotalInputTokens, c.InputTokensEstimated, 9*42)
	}
	// TPOT per request is (E2EL − TTFT) / (15 − 1); recompute it from the
	// per-request rows and compare with the summary.
	var sum float64
	for _, r := range rep.Requests {
		sum += (r.E2ELMs - r.TTFTMs) / 14
	}
	if want := sum / 9; !near(c.TPOT.Mean, want, 0.01) {
		t.Errorf("mean TPOT %.4f ms, recomputed %.4f ms", c.TPOT.Mean, want)
	}
	// Nominally 4 gaps of 10 ms over 14 tokens; the server's timers may run
	// late on a loaded machine, never early.
	if c.TPOT.Median < 40.0/14-0.2 || c.TPOT.Median > 40.0/14+5 {
		t.Errorf("median TPOT %.3f ms, nominal %.3f ms", c.TPOT.Median, 40.0/14)
	}
	// ITL is per chunk (one sample per gap), the per-token variant divides
	// each gap by the chunk's 3 tokens.
	if c.ITL.Count != 9*4 {
		t.Errorf("ITL samples %d, want one per chunk gap = %d", c.ITL.Count, 9*4)
	}
	if c.ITLPerToken.Count != 9*4*3 || !near(c.ITLPerToken.Mean, c.ITL.Mean/3, 0.01) {
		t.Errorf("per-token ITL count %d mean %.3f, want %d and %.3f", c.ITLPerToken.Count, c.ITLPerToken.Mean, 9*12, c.ITL.Mean/3)
	}
	if !c.ITLPerTokenEstimated {
		t.Error("per-token ITL without continuous usage must be labelled an estimate")
	}
	if c.RequestThroughput <= 0 || !near(c.OutputThroughput, float64(c.TotalOutputTokens)/c.Duration, 1e-6) ||
		!near(c.TotalTokenThroughput, float64(c.TotalInputTokens+c.TotalOutputTokens)/c.Duration, 1e-6) {
		t.Errorf("throughputs inconsistent: %+v", c)
	}
}

func TestMetrics_MissingUsageGivesLabelledEstimate(t *testing.T) {
	up := &TimedUpstream{T1: 5 * time.Millisecond, T2: 2 * time.Millisecond, Chunks: 5, TokensPerChunk: 3}
	rep := runAgainst(t, up, []string{"no-usage"}, nil)
	c := rep.Results[0]
	if c.Failed != 0 {
		t.Fatalf("failed: %v", c.ErrorSamples)
	}
	if !c.OutputTokensEstimated || !c.InputTokensEstimated {
		t.Error("counts without usage must be labelled estimates")
	}
	// 5 chunks of "tok tok tok " = 60 characters ≈ 15 tokens.
	if c.TotalOutputTokens != 9*15 {
		t.Errorf("estimated output tokens %d, want %d", c.TotalOutputTokens, 9*15)
	}
}

func TestMetrics_ErrorsAreCountedByKindAndNeverAveraged(t *testing.T) {
	up := &TimedUpstream{T1: 30 * time.Millisecond, T2: 5 * time.Millisecond, Chunks: 4}
	rep := runAgainst(t, up, []string{"flaky", "fail-500", "fail-cut", "fail-event", "fail-slow"}, func(o *Options) {
		o.Request.Timeout = 300 * time.Millisecond
	})
	want := map[string]string{"fail-500": "http_500", "fail-cut": ErrStreamCut, "fail-event": ErrErrorEvent, "fail-slow": ErrTimeout}
	for _, c := range rep.Results[1:] {
		if c.Completed != 0 || c.Failed != 9 || c.Errors[want[c.Model]] != 9 {
			t.Errorf("%s: completed %d failed %d errors %v, want 9 × %s", c.Model, c.Completed, c.Failed, c.Errors, want[c.Model])
		}
		if c.TTFT.Count != 0 || c.E2EL.Mean != 0 {
			t.Errorf("%s: failed requests leaked into latency: %+v", c.Model, c.TTFT)
		}
	}
	flaky := rep.Results[0]
	if flaky.Completed != 6 || flaky.Failed != 3 || flaky.Errors["http_500"] != 3 {
		t.Fatalf("flaky: completed %d failed %d errors %v, want 6/3", flaky.Completed, flaky.Failed, flaky.Errors)
	}
	// A failed request has no TTFT; were it averaged as 0 the minimum
	// would fall below the server's 30 ms first-chunk delay.
	if flaky.TTFT.Count != 6 || flaky.TTFT.Min < 29 {
		t.Errorf("flaky TTFT count %d min %.3f: failures averaged in", flaky.TTFT.Count, flaky.TTFT.Min)
	}
	var sum float64
	n := 0
	for _, r := range rep.Requests {
		if r.Target == "flaky" && r.OK {
			sum += r.TTFTMs
			n++
		}
	}
	if !near(flaky.TTFT.Mean, sum/float64(n), 0.01) {
		t.Errorf("flaky mean TTFT %.3f, mean over successes %.3f", flaky.TTFT.Mean, sum/float64(n))
	}
}

func TestMetrics_GoodputCountsRequestsMeetingEverySLO(t *testing.T) {
	up := &TimedUpstream{T1: 20 * time.Millisecond, T2: 5 * time.Millisecond, Chunks: 4}
	loose := runAgainst(t, up, []string{"m"}, func(o *Options) { o.Goodput = Goodput{TTFT: 10000, E2EL: 10000} }).Results[0]
	if loose.RequestGoodput == nil || !near(*loose.RequestGoodput, loose.RequestThroughput, 1e-9) {
		t.Errorf("loose SLO: goodput %v, want request throughput %.3f", loose.RequestGoodput, loose.RequestThroughput)
	}
	strict := runAgainst(t, up, []string{"m"}, func(o *Options) { o.Goodput = Goodput{TTFT: 1} }).Results[0]
	if strict.RequestGoodput == nil || *strict.RequestGoodput != 0 {
		t.Errorf("1 ms TTFT SLO against a 20 ms server: goodput %v, want 0", strict.RequestGoodput)
	}
	none := runAgainst(t, up, []string{"m"}, nil).Results[0]
	if none.RequestGoodput != nil {
		t.Error("goodput must be null when no SLO is given, as in vLLM")
	}
}

func TestParseGoodput_AcceptsVLLMSyntaxAndRejectsUnknownKeys(t *testing.T) {
	g, err := ParseGoodput([]string{"ttft:500", "tpot:50 e2el:9000"})
	if err != nil || g.TTFT != 500 || g.TPOT != 50 || g.E2EL != 9000 {
		t.Fatalf("got %+v, %v", g, err)
	}
	for _, bad := range []string{"itl:5", "ttft", "ttft:-1", "ttft:x"} {
		if _, err := ParseGoodput([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestStream_SSEUnderAnotherContentTypeIsReadAndPlainJSONIsNotStreamed(t *testing.T) {
	var plain atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/models") {
			http.NotFound(w, r)
			return
		}
		if plain.Load() {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":1}}`)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, `data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n"+
			`data: {"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}]}`+"\n\n"+
			`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	run := func() *CellResult {
		targets, _ := TargetsFromFlags(srv.URL+"/v1", "", []string{"m"}, "chat", func(string) string { return "" })
		rep, err := Run(t.Context(), Options{Targets: targets, Concurrencies: []int{1}, NumRequests: 2, Burstiness: 1,
			Workload: Workload{InputLen: 2, OutputLen: 2}, Request: RequestOptions{Timeout: 5 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Results[0]
	}
	if c := run(); c.Completed != 2 || c.TotalOutputTokens != 4 {
		t.Errorf("SSE as text/plain: %+v %v", c.Errors, c.ErrorSamples)
	}
	plain.Store(true)
	if c := run(); c.Errors[ErrNotStreamed] != 2 {
		t.Errorf("plain JSON answer: errors %v, want not_streamed", c.Errors)
	}
}
