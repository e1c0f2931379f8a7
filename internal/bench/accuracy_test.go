package bench

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"sort"
	"testing"
	"time"
)

// accuracyCase runs one closed-loop cell against a TimedUpstream and
// compares every chunk timestamp with the server's own record of when it
// wrote that chunk.
type accuracyReport struct {
	chunkErrs []float64 // client stamp − server write, ms, every chunk
	ttftErrs  []float64 // measured TTFT − (first write − request bytes read), ms
	itlErrs   []float64 // measured ITL − server's gap between writes, ms
	dispatch  []float64 // client send − intended send, ms
	transit   []float64 // server receive − client send, ms
	result    *CellResult
}

func runAccuracy(t *testing.T, up *TimedUpstream, cell Cell, requests int) accuracyReport {
	t.Helper()
	up.Record = true
	srv := httptest.NewUnstartedServer(up)
	srv.Listener = ArrivalListener{srv.Listener}
	srv.Config.ConnContext = ArrivalConnContext
	srv.Start()
	defer srv.Close()
	tg := Target{BaseURL: srv.URL + "/v1", Model: "m"}
	if err := tg.Normalize(func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	prompts := make([]Prompt, requests)
	bodies := make([][]byte, requests)
	for i := range prompts {
		prompts[i] = Prompt{Text: "hi", InputTokens: 1, MaxTokens: up.Chunks}
		bodies[i], _ = buildBody(&tg, &prompts[i], &RequestOptions{}, up.Chunks)
	}
	plan := &cellPlan{bodies: bodies, prompts: prompts, numRequests: requests, warmup: cell.conns(requests), burstiness: math.Inf(1)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := runCell(ctx, &tg, cell, plan, &RequestOptions{Timeout: time.Minute}, "llmgate-bench-0-0-")
	var rep accuracyReport
	rep.result = Compute(run, Goodput{}, math.Inf(1))
	if rep.result.Failed != 0 {
		t.Fatalf("%d requests failed: %v %v", rep.result.Failed, rep.result.Errors, rep.result.ErrorSamples)
	}
	for i := range run.Results {
		r := &run.Results[i]
		log := up.Log(RequestID(0, 0, r.Index))
		if log == nil {
			t.Fatalf("server has no record of request %d", r.Index)
		}
		if len(log.Writes) != len(r.Chunks) {
			t.Fatalf("request %d: server wrote %d chunks, client saw %d", r.Index, len(log.Writes), len(r.Chunks))
		}
		for k, off := range r.Chunks {
			client := r.Origin.Add(off)
			rep.chunkErrs = append(rep.chunkErrs, ms(client.Sub(log.Writes[k])))
			if k > 0 {
				rep.itlErrs = append(rep.itlErrs, ms(r.Chunks[k]-r.Chunks[k-1])-ms(log.Writes[k].Sub(log.Writes[k-1])))
			}
		}
		rep.ttftErrs = append(rep.ttftErrs, ms(r.TTFT)-ms(log.Writes[0].Sub(log.Recv)))
		rep.dispatch = append(rep.dispatch, ms(r.DispatchLag))
		rep.transit = append(rep.transit, ms(log.Recv.Sub(r.Sent)))
	}
	return rep
}

func absSorted(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Abs(x)
	}
	sort.Float64s(out)
	return out
}

func meanOf(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// accuracyViolations applies the 1 ms bound. Truth is the server's
// recorded write time of each chunk and its receive time of the request.
// The mean TTFT and ITL errors and the median and 90th percentile of the
// per-chunk error must be within 1 ms. The TTFT error is taken net of the
// request's transit (client send stamp to server receive stamp): that time
// is real latency the client rightly counts in its TTFT, spent in the
// kernel and in waking the server, which on a loaded 2-core machine alone
// can exceed 1 ms (seen in CI: transit 1.20 ms, dispatch 0, chunk error
// p50 0.05 ms). What remains is the client's own share: its dispatch lag
// and the stamping of the first chunk.
func accuracyViolations(t *testing.T, rep accuracyReport, up *TimedUpstream) []string {
	t.Helper()
	chunk := absSorted(rep.chunkErrs)
	itl := absSorted(rep.itlErrs)
	t.Logf("chunks=%d |chunk err| p50=%.3f p90=%.3f p99=%.3f max=%.3f ms; TTFT err mean=%.3f ms (dispatch %.3f + request transit %.3f); ITL err mean=%.3f p50=%.3f ms; cpu=%.0f%% wake lag p99=%.3f ms unreliable=%v",
		len(chunk), Percentile(chunk, 50), Percentile(chunk, 90), Percentile(chunk, 99), chunk[len(chunk)-1],
		meanOf(rep.ttftErrs), meanOf(rep.dispatch), meanOf(rep.transit), meanOf(rep.itlErrs), Percentile(itl, 50),
		rep.result.ClientCPUPercent, rep.result.SchedLagP99Ms, rep.result.Unreliable)
	const bound = 1.0
	var v []string
	check := func(name string, got float64) {
		if got > bound {
			v = append(v, fmt.Sprintf("%s %.3f ms > %.0f ms", name, got, bound))
		}
	}
	check("median per-chunk timestamp error", Percentile(chunk, 50))
	check("p90 per-chunk timestamp error", Percentile(chunk, 90))
	check("mean TTFT error net of request transit", math.Abs(meanOf(rep.ttftErrs)-meanOf(rep.transit)))
	check("mean ITL error", math.Abs(meanOf(rep.itlErrs)))
	check("median ITL error", Percentile(itl, 50))
	return v
}

// checkNominal compares the measurements with the schedule the server
// aimed for. The bound is loose because on a loaded machine the server's
// own timers fire late (by tens of milliseconds at times); a client that
// mis-stamped would still be off by far more than this allows, e.g. by
// counting parse time or measuring from the wrong origin.
func checkNominal(t *testing.T, rep accuracyReport, up *TimedUpstream) {
	t.Helper()
	c := rep.result
	if d := c.TTFT.Median - ms(up.T1); d < -1 || d > 100 {
		t.Errorf("median TTFT %.3f ms vs nominal T1 %.0f ms", c.TTFT.Median, ms(up.T1))
	}
	if d := c.ITL.Median - ms(up.T2); math.Abs(d) > ms(up.T2)/2 {
		t.Errorf("median ITL %.3f ms vs nominal T2 %.0f ms", c.ITL.Median, ms(up.T2))
	}
}

// requireAccuracy runs a case up to three times. It passes when one run
// meets every bound. When none does, each failing run must have been
// flagged unreliable by the client's own bottleneck check — the property
// that matters on a shared machine: the tool may be unable to be accurate
// when the OS does not schedule it for hundreds of milliseconds (seen on a
// 2-core box running `go test -race ./...` beside compilers), but it must
// never be inaccurate silently. A run that misses the bound without the
// flag fails the test; all-flagged runs skip with the evidence, so the CI
// log shows the 1 ms bound was not verifiable on that machine.
func requireAccuracy(t *testing.T, up *TimedUpstream, cell Cell, requests int, extra func(accuracyReport) []string) {
	t.Helper()
	var last []string
	for attempt := 1; attempt <= 3; attempt++ {
		rep := runAccuracy(t, up, cell, requests)
		v := accuracyViolations(t, rep, up)
		if extra != nil {
			v = append(v, extra(rep)...)
		}
		if len(v) == 0 {
			// Checked on the attempt that met the bound, when the machine
			// let the server keep to its schedule too.
			checkNominal(t, rep, up)
			return
		}
		if !rep.result.Unreliable {
			t.Fatalf("attempt %d missed the bound but the cell was not flagged unreliable: %v", attempt, v)
		}
		last = append(v, rep.result.UnreliableReasons...)
		t.Logf("attempt %d: machine too busy, cell flagged unreliable: %v", attempt, last)
	}
	t.Skipf("1 ms bound not verifiable: every attempt was flagged unreliable by the client's own check (correct behaviour); last: %v", last)
}

func TestAccuracy_TTFTAndITLWithin1msAtOneStream(t *testing.T) {
	up := &TimedUpstream{T1: 40 * time.Millisecond, T2: 15 * time.Millisecond, Chunks: 10}
	requireAccuracy(t, up, Cell{Concurrency: 1}, 6, nil)
}

func TestAccuracy_TTFTAndITLWithin1msAt500Streams(t *testing.T) {
	if testing.Short() {
		t.Skip("500 streams skipped in -short mode")
	}
	// 500 streams are open at once, but their starts are paced 1 ms apart
	// (open loop, constant rate) so chunk arrivals interleave instead of
	// landing in one synchronised burst: a burst of 500 simultaneous writes
	// measures the shared 2-core machine's queue, not the client. Few
	// chunks and a long gap keep the aggregate rate near 3,000 chunks/s and
	// requests at 1,000/s, modest for CI under -race; the client-capacity
	// benchmark covers the high-rate regime.
	up := &TimedUpstream{T1: 50 * time.Millisecond, T2: 200 * time.Millisecond, Chunks: 4}
	rate := 1000.0
	if raceEnabled {
		// Spread the same 500 concurrent streams over twice the time.
		up.T2, rate = 400*time.Millisecond, 500
	}
	requireAccuracy(t, up, Cell{Rate: rate, MaxConcurrency: 500}, 500, func(rep accuracyReport) []string {
		if rep.result.MaxConcurrentRequests < 450 {
			return []string{fmt.Sprintf("peak concurrent streams %d, want about 500", rep.result.MaxConcurrentRequests)}
		}
		return nil
	})
}
