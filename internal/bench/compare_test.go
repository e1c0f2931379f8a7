package bench

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// sampleCell is a one-run cell whose TTFT and E2EL are the given samples
// (ms), summarized and given intervals as Compute does.
func sampleCell(target string, ttft []float64, throughput float64) *CellResult {
	c := &CellResult{Target: target, Mode: "concurrency", Concurrency: 4, Completed: len(ttft), Errors: map[string]int{},
		OutputThroughput: throughput, RequestThroughput: throughput / 100, Intervals: map[string]Interval{}}
	e2el := make([]float64, len(ttft))
	for i, v := range ttft {
		e2el[i] = 10 * v
	}
	sorted := append([]float64(nil), ttft...)
	c.TTFT = Summarize(sorted)
	sampleIntervals(c.Intervals, "ttft", sorted, &c.TTFT)
	c.E2EL = Summarize(e2el)
	sampleIntervals(c.Intervals, "e2el", e2el, &c.E2EL)
	return c
}

// draw returns n samples of a normal latency with the given mean and a
// standard deviation of 10% of it, from a fixed seed.
func draw(seed uint64, n int, mean float64) []float64 { return drawCV(seed, n, mean, 0.1) }

// drawCV draws with a standard deviation of cv × mean, never below 1% of
// the mean (a latency is positive).
func drawCV(seed uint64, n int, mean, cv float64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 99))
	out := make([]float64, n)
	for i := range out {
		out[i] = max(mean*(1+cv*rng.NormFloat64()), mean/100)
	}
	return out
}

func changes(t *testing.T, a, b *Report) map[string]Change {
	t.Helper()
	ch, unmatched := Compare(a, b, 5)
	if len(unmatched) != 0 {
		t.Fatalf("unmatched %v", unmatched)
	}
	got := map[string]Change{}
	for _, c := range ch {
		got[c.Metric] = c
	}
	return got
}

func TestCompare_RequestSamples_ARealTenPercentChangeIsFoundAndNoiseIsNot(t *testing.T) {
	// Per-request noise of 10%: a B drawn from the same distribution is
	// never called better or worse (at most, in about 5% of the cases, a
	// significant change below the 5% threshold); a B 10% slower is worse.
	for seed := uint64(1); seed <= 20; seed++ {
		a := &Report{Results: []*CellResult{sampleCell("m", draw(seed, 200, 100), 1000)}}
		same := &Report{Results: []*CellResult{sampleCell("m", draw(seed+1000, 200, 100), 1000)}}
		slower := &Report{Results: []*CellResult{sampleCell("m", draw(seed+2000, 200, 110), 1000)}}
		for _, metric := range []string{"mean_ttft_ms", "p50_ttft_ms", "p95_e2el_ms"} {
			if c := changes(t, a, same)[metric]; c.Verdict == VerdictBetter || c.Verdict == VerdictWorse || c.Method != MethodRequests {
				t.Errorf("seed %d %s: same distribution called %q (%+.1f%%, p %.3f)", seed, metric, c.Verdict, c.Percent, c.P)
			}
			if c := changes(t, a, slower)[metric]; c.Verdict != VerdictWorse {
				t.Errorf("seed %d %s: a 10%% slowdown called %q (%+.1f%%, p %.3f)", seed, metric, c.Verdict, c.Percent, c.P)
			}
		}
		// The p99 of 200 requests has no upper bound: a rise cannot be told
		// from its tail.
		if c := changes(t, a, slower)["p99_ttft_ms"]; c.Verdict != VerdictNoDifference {
			t.Errorf("seed %d: the p99 of 200 requests called %q (p %.3f)", seed, c.Verdict, c.P)
		}
		// One run each: a throughput has no spread, so it is not judged.
		if c := changes(t, a, slower)["output_throughput"]; c.Verdict != VerdictNotTested {
			t.Errorf("single-run throughput judged %q", c.Verdict)
		}
	}
	// The first hour's case: 16 requests at a loaded concurrency (TTFT
	// varying by 40%), the same server twice, and the mean 7% lower by
	// chance: not a finding.
	found := false
	for seed := uint64(1); seed < 200 && !found; seed++ {
		a := &Report{Results: []*CellResult{sampleCell("m", drawCV(seed, 16, 100, 0.4), 1000)}}
		b := &Report{Results: []*CellResult{sampleCell("m", drawCV(seed+500, 16, 100, 0.4), 1000)}}
		c := changes(t, a, b)["mean_ttft_ms"]
		if c.Percent > -6 || c.Percent < -9 {
			continue
		}
		found = true
		if c.Verdict != VerdictNoDifference {
			t.Errorf("a %+.1f%% change of the mean of 16 noisy requests called %q (p %.3f)", c.Percent, c.Verdict, c.P)
		}
	}
	if !found {
		t.Fatal("no seed gave a chance change of -6..-9%")
	}
}

// runsReport is a report of several runs of one cell whose TTFT p50 and
// output throughput take the given values, one per run.
func runsReport(p50s, thr []float64) *Report {
	r := &Report{}
	for i := range p50s {
		c := &CellResult{Target: "m", Mode: "concurrency", Concurrency: 4, Run: i + 1, Completed: 100, Errors: map[string]int{},
			OutputThroughput: thr[i]}
		c.TTFT = Summary{Count: 100, Mean: p50s[i], Median: p50s[i], P50: p50s[i], P95: p50s[i], P99: p50s[i]}
		r.Runs = append(r.Runs, RunResults{Run: i + 1, Results: []*CellResult{c}})
	}
	r.Results = aggregateRuns(r.Runs)
	return r
}

func TestCompare_Runs_ARealTenPercentChangeIsFoundAndRunNoiseOfTheSameSizeIsNot(t *testing.T) {
	steady := runsReport([]float64{100, 102, 98}, []float64{1000, 1010, 990})
	slower := runsReport([]float64{110, 112, 108}, []float64{900, 910, 890})
	got := changes(t, steady, slower)
	if c := got["p50_ttft_ms"]; c.Verdict != VerdictWorse || c.Method != MethodRuns {
		t.Errorf("TTFT +10%% over 3 runs: %q by %q (p %.3f)", c.Verdict, c.Method, c.P)
	}
	if c := got["output_throughput"]; c.Verdict != VerdictWorse || c.Method != MethodRuns {
		t.Errorf("throughput -10%% over 3 runs: %q by %q (p %.3f)", c.Verdict, c.Method, c.P)
	}
	// Runs that swing by 10% either way: a 5% difference of medians is
	// noise.
	noisyA := runsReport([]float64{100, 110, 91}, []float64{1000, 1100, 910})
	noisyB := runsReport([]float64{108, 96, 105}, []float64{1050, 950, 1080})
	got = changes(t, noisyA, noisyB)
	for _, m := range []string{"p50_ttft_ms", "output_throughput"} {
		if c := got[m]; c.Verdict != VerdictNoDifference || c.Method != MethodRuns {
			t.Errorf("%s with 10%% run noise: %q (%+.1f%%, p %.3f)", m, c.Verdict, c.Percent, c.P)
		}
	}
	var out bytes.Buffer
	if err := WriteComparison(&out, noisyA, noisyB, 5); err != nil || !strings.Contains(out.String(), "no significant difference (runs)") ||
		!strings.Contains(out.String(), "TTFT p50 (ms)") {
		t.Errorf("comparison: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
}

func TestCompare_CellsOfDifferentTargetsMatchByLoad(t *testing.T) {
	a := &Report{Results: []*CellResult{sampleCell("direct", draw(1, 100, 100), 1000)}}
	b := &Report{Results: []*CellResult{sampleCell("via-gateway", draw(2, 100, 100), 1000)}}
	ch, _ := Compare(a, b, 5)
	if len(ch) == 0 || !strings.Contains(ch[0].Cell, "direct → via-gateway") {
		t.Errorf("reports with different target names did not match by load: %+v", ch)
	}
	if math.IsNaN(ch[0].Percent) {
		t.Error("no change computed")
	}
}
