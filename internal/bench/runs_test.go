package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// orderRecorder notes, per run and cell, the order in which targets were
// first seen, from the request ids bench sends
// (llmgate-bench-<target>-<cell>-[r<run>-]<index>).
type orderRecorder struct {
	http.Handler
	mu    sync.Mutex
	seen  map[string]bool
	order map[string][]int // "run/cell" → target indexes
}

func (o *orderRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get("X-Request-Id"); strings.HasPrefix(id, "llmgate-bench-") && !strings.Contains(id, "warmup") {
		parts := strings.Split(strings.TrimPrefix(id, "llmgate-bench-"), "-")
		run := "1"
		if len(parts) == 4 {
			run = strings.TrimPrefix(parts[2], "r")
		}
		key := run + "/" + parts[1]
		ti, _ := strconv.Atoi(parts[0])
		o.mu.Lock()
		if !o.seen[key+"/"+parts[0]] {
			o.seen[key+"/"+parts[0]] = true
			o.order[key] = append(o.order[key], ti)
		}
		o.mu.Unlock()
	}
	o.Handler.ServeHTTP(w, r)
}

func TestRuns_EveryRunIsKeptTargetsInterleaveAndTheCellIsTheMedian(t *testing.T) {
	rec := &orderRecorder{Handler: &TimedUpstream{T1: 4 * time.Millisecond, T2: time.Millisecond, Chunks: 4, PromptTokens: 12},
		seen: map[string]bool{}, order: map[string][]int{}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	targets, err := TargetsFromFlags(srv.URL+"/v1", "", []string{"a", "b"}, "chat", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Targets: targets, Concurrencies: []int{1, 2}, NumRequests: 6, Warmup: 0, Burstiness: 1, Runs: 3,
		Workload: Workload{InputLen: 8, OutputLen: 4}, Request: RequestOptions{Timeout: 10 * time.Second}, KeepRequests: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 3 || len(rep.Results) != 4 || rep.Settings.Runs != 3 {
		t.Fatalf("%d runs, %d cells, settings.runs %d; want 3 runs of 4 cells", len(rep.Runs), len(rep.Results), rep.Settings.Runs)
	}
	// Within each run every cell measures both targets, the first target
	// rotating from run to run.
	for run := 1; run <= 3; run++ {
		for ci := 0; ci < 2; ci++ {
			got := rec.order[fmt.Sprintf("%d/%d", run, ci)]
			want := []int{0, 1}
			if run == 2 {
				want = []int{1, 0}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("run %d cell %d: targets in order %v, want %v", run, ci, got, want)
			}
		}
		if r := rep.Runs[run-1]; r.Run != run || len(r.Results) != 4 || r.Results[0].Run != run || r.Results[0].Target != "a" {
			t.Errorf("run %d holds %+v", run, r)
		}
	}
	for i, c := range rep.Results {
		if c.Runs != 3 || c.Run != 0 || c.Completed != 18 || c.Failed != 0 {
			t.Errorf("cell %s: runs %d run %d completed %d failed %d", cellKey(c), c.Runs, c.Run, c.Completed, c.Failed)
		}
		var p50s, thr []float64
		for _, r := range rep.Runs {
			p50s = append(p50s, r.Results[i].TTFT.P50)
			thr = append(thr, r.Results[i].OutputThroughput)
		}
		if c.TTFT.P50 != median(p50s) || c.OutputThroughput != median(thr) {
			t.Errorf("cell %s: TTFT p50 %v of runs %v, out tok/s %v of %v: want the medians", cellKey(c), c.TTFT.P50, p50s, c.OutputThroughput, thr)
		}
		iv := c.Intervals["p50_ttft_ms"]
		lo, hi := math.Min(p50s[0], math.Min(p50s[1], p50s[2])), math.Max(p50s[0], math.Max(p50s[1], p50s[2]))
		if !near(iv.Min, lo, 0.001) || !near(iv.Max, hi, 0.001) || iv.Low > iv.Min+0.001 && iv.Low > 0 || iv.High < iv.Max-0.001 {
			t.Errorf("cell %s: interval %+v for run values %v", cellKey(c), iv, p50s)
		}
		if _, ok := c.Intervals["output_throughput"]; !ok {
			t.Errorf("cell %s has no throughput spread", cellKey(c))
		}
	}
	if len(rep.Requests) != 3*4*6 || rep.Requests[len(rep.Requests)-1].Run == 0 {
		t.Errorf("%d request rows (want 72, each with its run)", len(rep.Requests))
	}

	var buf bytes.Buffer
	if err := WriteCSV(&buf, rep); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, r := range rows[1:] {
		runs[r[0]]++
	}
	if len(rows) != 1+3*4+4 || runs["1"] != 4 || runs["3"] != 4 || runs["all"] != 4 {
		t.Errorf("CSV: %d rows, by run %v; want 4 per run and 4 over all runs", len(rows), runs)
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(&js)
	if err != nil || len(back.Runs) != 3 || !near(back.Runs[2].Results[3].TTFT.P50, rep.Runs[2].Results[3].TTFT.P50, 0.001) ||
		back.Results[0].Intervals["p95_e2el_ms"] != rep.Results[0].Intervals["p95_e2el_ms"] {
		t.Errorf("JSON round trip lost the runs or intervals: %v", err)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil || !strings.Contains(table.String(), "spread over the runs") ||
		!strings.Contains(table.String(), "TTFT ms p50 / p95 / p99") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
	t.Logf("\n%s", table.String())
}

// runWith makes a per-run cell whose TTFT p50 is v with the given interval.
func runWith(run int, v, lo, hi float64) *CellResult {
	c := &CellResult{Target: "m", Mode: "concurrency", Concurrency: 4, Run: run, Completed: 100, Errors: map[string]int{}}
	c.TTFT = Summary{Count: 100, Mean: v, Median: v, P50: v, P90: v, P95: v, P99: v, Min: v, Max: v}
	c.Intervals = map[string]Interval{"p50_ttft_ms": {Min: v, Max: v, Low: lo, High: hi}}
	return c
}

func TestRuns_CellIsFlaggedOnlyWhenRunsDisagreeBeyondTheirIntervals(t *testing.T) {
	agree := aggregateCell([]*CellResult{runWith(1, 100, 95, 105), runWith(2, 103, 98, 108), runWith(3, 99, 94, 104)})
	if agree.Disagree {
		t.Errorf("overlapping runs flagged: %v", agree.DisagreeReasons)
	}
	// Run 3 measured something else: 30% slower, outside the others'
	// intervals.
	apart := aggregateCell([]*CellResult{runWith(1, 100, 95, 105), runWith(2, 102, 97, 107), runWith(3, 130, 124, 136)})
	if !apart.Disagree || len(apart.DisagreeReasons) != 1 || !strings.Contains(apart.DisagreeReasons[0], "TTFT p50: run 1 100 ms") ||
		!strings.Contains(apart.DisagreeReasons[0], "run 3 130 ms") {
		t.Errorf("disagreeing runs: flagged %v, reasons %v", apart.Disagree, apart.DisagreeReasons)
	}
	if apart.TTFT.P50 != 102 {
		t.Errorf("median of 100, 102, 130 = %v", apart.TTFT.P50)
	}
	// Narrow intervals that do not overlap, but a gap under 5%: agreement.
	close := aggregateCell([]*CellResult{runWith(1, 10.0, 9.99, 10.01), runWith(2, 10.2, 10.19, 10.21)})
	if close.Disagree {
		t.Errorf("a 2%% gap flagged: %v", close.DisagreeReasons)
	}
}

func TestIntervals_QuantileCIUsesBinomialRanks(t *testing.T) {
	vals := make([]float64, 100)
	for i := range vals {
		vals[i] = float64(i + 1) // the value is its 1-based rank
	}
	if lo, hi, open := quantileCI(vals, 0.5); lo != 40 || hi != 61 || open {
		t.Errorf("median CI of 100 samples: ranks %v–%v (open %v), want 40–61 (the exact binomial interval)", lo, hi, open)
	}
	if lo, hi, open := quantileCI(vals[:16], 0.95); !open || hi != 16 || lo < 12 {
		t.Errorf("p95 CI of 16 samples: %v–%v open %v; 16 samples cannot bound the p95 from above", lo, hi, open)
	}
	if _, _, open := quantileCI(vals, 0.99); !open {
		t.Error("the p99 of 100 samples has no upper bound")
	}
	big := make([]float64, 1000)
	for i := range big {
		big[i] = float64(i + 1)
	}
	if lo, hi, open := quantileCI(big, 0.95); open || lo < 930 || lo > 940 || hi < 960 || hi > 970 {
		t.Errorf("p95 CI of 1000 samples: ranks %v–%v", lo, hi)
	}
	if got := studentT975(2); !near(got, 4.3027, 0.001) {
		t.Errorf("t(0.975, 2) = %v, want 4.3027", got)
	}
	if got := studentT975(30); !near(got, 2.0423, 0.001) {
		t.Errorf("t(0.975, 30) = %v, want 2.0423", got)
	}
}
