package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report: run settings, client facts and one object
// per target × cell with vLLM's field names (mean_ttft_ms, p99_itl_ms,
// request_throughput, output_throughput, total_token_throughput, ...).
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadReport reads a report written by WriteJSON.
func ReadReport(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("not an llmgate bench JSON report: %w", err)
	}
	if len(r.Results) == 0 && len(r.Agent) > 0 {
		return nil, fmt.Errorf("an agent workload report: bench compare compares load-matrix reports; read the agent figures from its table, CSV or JSON")
	}
	if len(r.Results) == 0 {
		return nil, fmt.Errorf("report has no results")
	}
	return &r, nil
}

// WriteRequestsJSONL writes one JSON object per request.
func WriteRequestsJSONL(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	for i := range r.Requests {
		if err := enc.Encode(&r.Requests[i]); err != nil {
			return err
		}
	}
	return nil
}

// csvMetrics are the per-metric columns of the CSV, in order.
var csvMetrics = []string{"ttft", "tpot", "itl", "e2el", "itl_per_token"}
var csvStats = []string{"mean", "median", "std", "p50", "p90", "p95", "p99"}

// csvIntervalKeys are the figures whose spread the CSV gives.
func csvIntervalKeys() []string {
	var keys []string
	for _, m := range intervalMetrics {
		for _, st := range intervalStats[1:] {
			keys = append(keys, st+"_"+m+"_ms")
		}
	}
	return append(keys, "request_throughput", "output_throughput")
}

// CSVHeader lists the CSV columns.
func CSVHeader() []string {
	h := []string{"run", "target", "model", "backend", "endpoint", "mode", "concurrency", "request_rate", "max_concurrency",
		"requests", "completed", "failed", "errors", "duration_s",
		"request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
		"total_input_tokens", "total_output_tokens", "input_tokens_estimated", "output_tokens_estimated"}
	for _, m := range csvMetrics {
		for _, s := range csvStats {
			h = append(h, s+"_"+m+"_ms")
		}
	}
	for _, k := range csvIntervalKeys() {
		h = append(h, k+"_min", k+"_max", k+"_ci95_low", k+"_ci95_high")
	}
	return append(h, "p99_dispatch_lag_ms", "client_cpu_percent", "client_wake_lag_p99_ms", "unreliable", "unreliable_reasons",
		"conn_retries", "runs_disagree", "runs_disagree_reasons")
}

// WriteCSV writes one row per target × cell; for a --runs N matrix (N >
// 1), one row per run and cell (run 1..N) and then the cells over all runs
// (run "all": medians, with the runs' min, max and confidence interval).
// An empty ci95_high is an interval without an upper bound (a tail
// percentile of too few requests).
func WriteCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	if len(r.Agent) > 0 {
		return writeAgentCSV(cw, r)
	}
	if err := cw.Write(CSVHeader()); err != nil {
		return err
	}
	var rows []*CellResult
	for _, run := range r.Runs {
		rows = append(rows, run.Results...)
	}
	rows = append(rows, r.Results...)
	for _, c := range rows {
		if err := cw.Write(csvRow(c, len(r.Runs) > 1)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func csvRow(c *CellResult, several bool) []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	rate, goodput := "", ""
	if c.RequestRate != nil {
		rate = FormatRate(float64(*c.RequestRate))
	}
	if c.RequestGoodput != nil {
		goodput = f(*c.RequestGoodput)
	}
	conc := ""
	if c.Mode == "concurrency" {
		conc = strconv.Itoa(c.Concurrency)
	}
	run := "1"
	switch {
	case c.Run > 0:
		run = strconv.Itoa(c.Run)
	case several:
		run = "all"
	}
	row := []string{run, c.Target, c.Model, c.Backend, c.Endpoint, c.Mode, conc, rate, strconv.Itoa(c.MaxConcurrency),
		strconv.Itoa(c.Completed + c.Failed), strconv.Itoa(c.Completed), strconv.Itoa(c.Failed), formatErrors(c.Errors),
		f(c.Duration), f(c.RequestThroughput), goodput, f(c.OutputThroughput), f(c.TotalTokenThroughput),
		strconv.Itoa(c.TotalInputTokens), strconv.Itoa(c.TotalOutputTokens),
		strconv.FormatBool(c.InputTokensEstimated), strconv.FormatBool(c.OutputTokensEstimated)}
	for _, m := range csvMetrics {
		s := metricSummary(c, m)
		for _, st := range csvStats {
			row = append(row, f(statValue(s, st)))
		}
	}
	for _, k := range csvIntervalKeys() {
		iv, ok := c.Intervals[k]
		if !ok {
			row = append(row, "", "", "", "")
			continue
		}
		high := f(iv.High)
		if iv.Open {
			high = "" // too few requests to bound this tail from above
		}
		row = append(row, f(iv.Min), f(iv.Max), f(iv.Low), high)
	}
	return append(row, f(c.DispatchLag.P99), f(c.ClientCPUPercent), f(c.SchedLagP99Ms),
		strconv.FormatBool(c.Unreliable), strings.Join(c.UnreliableReasons, "; "), strconv.Itoa(c.ConnRetries),
		strconv.FormatBool(c.Disagree), strings.Join(c.DisagreeReasons, "; "))
}

func metricSummary(c *CellResult, key string) *Summary {
	for _, sm := range summaryMetrics {
		if sm.Key == key {
			return sm.Get(c)
		}
	}
	return &Summary{}
}

func formatErrors(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ";")
}

// check is a cell's verdict column: ok, or what makes its figures suspect.
func check(c *CellResult) string {
	var flags []string
	if c.Unreliable {
		flags = append(flags, "UNRELIABLE")
	}
	if c.Disagree {
		flags = append(flags, "RUNS DISAGREE")
	}
	if len(flags) == 0 {
		return "ok"
	}
	return strings.Join(flags, ", ")
}

// writeGatewaySaid prints, for the cells of targets whose answers carried
// an llmgate gateway's Server-Timing, the gateway's own time before each
// answer began (without a direct twin to compare with, the added table,
// which has the same figures, is not printed).
func writeGatewaySaid(w io.Writer, r *Report) error {
	var cells []*CellResult
	for _, c := range r.Results {
		if c.GatewayOverhead != (Summary{}) {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nthe gateway says: its own time before each answer began (its Server-Timing; not the backend's, a queue's or an engine start's)")
	tw := newTable(w)
	fmt.Fprintln(tw, "target\tload\tgateway ms p50 / p95 / p99\t")
	for _, c := range cells {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", c.Target, cellLabel(c), triple(&c.GatewayOverhead))
	}
	return tw.Flush()
}

// triple prints p50 / p95 / p99 of a summary.
func triple(s *Summary) string {
	return fmtFig(s.P50) + " / " + fmtFig(s.P95) + " / " + fmtFig(s.P99)
}

// WriteTable prints the console summary: one line per target × cell with
// P50 / P95 / P99 of TTFT, ITL and E2EL; for several runs, the medians over
// the runs followed by a table of their spread.
func WriteTable(w io.Writer, r *Report) error {
	if len(r.Agent) > 0 {
		return writeAgentTable(w, r)
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "target\tload\tok\tfail\treq/s\tout tok/s\tTTFT ms p50 / p95 / p99\tTPOT ms p50\tITL ms p50 / p95 / p99\tE2EL ms p50 / p95 / p99\tcheck\t")
	for _, c := range r.Results {
		if c.Completed == 0 {
			// No successful request: latencies do not exist, not zero.
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t-\t-\t-\t-\t-\t-\t%s\t\n", c.Target, cellLabel(c), c.Completed, c.Failed, check(c))
			continue
		}
		est := ""
		if c.OutputTokensEstimated {
			est = "~"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f\t%s%.1f\t%s\t%s\t%s\t%s\t%s\t\n",
			c.Target, cellLabel(c), c.Completed, c.Failed, c.RequestThroughput, est, c.OutputThroughput,
			triple(&c.TTFT), fmtFig(c.TPOT.P50), triple(&c.ITL), triple(&c.E2EL), check(c))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "TPOT = (E2EL − TTFT)/(output tokens − 1); ITL per streamed chunk; ~ = token count estimated (no usage from server)")
	if len(r.Runs) > 1 {
		fmt.Fprintf(w, "%d runs: each figure is the median of the runs' figures; ok and fail are summed over the runs\n", len(r.Runs))
		if err := writeSpread(w, r); err != nil {
			return err
		}
	}
	if err := writeAdded(w, r); err != nil {
		return err
	}
	if len(r.Added) == 0 {
		if err := writeGatewaySaid(w, r); err != nil {
			return err
		}
	}
	for _, n := range r.PairNotes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	writeEngineStarts(w, r)
	for _, c := range r.Results {
		if len(c.Errors) > 0 {
			fmt.Fprintf(w, "errors %s %s: %s\n", c.Target, cellLabel(c), formatErrors(c.Errors))
			for _, s := range c.ErrorSamples {
				fmt.Fprintf(w, "  e.g. %s\n", s)
			}
		}
		if c.Unreliable {
			fmt.Fprintf(w, "unreliable %s %s: %s\n", c.Target, cellLabel(c), strings.Join(c.UnreliableReasons, "; "))
		}
		if c.Disagree {
			fmt.Fprintf(w, "runs disagree %s %s: %s\n", c.Target, cellLabel(c), strings.Join(c.DisagreeReasons, "; "))
		}
		if c.ConnRetries > 0 {
			fmt.Fprintf(w, "reconnects %s %s: %d request(s) resent on a fresh connection (the server had closed the reused one before answering)\n", c.Target, cellLabel(c), c.ConnRetries)
		}
		if c.Proxy != "" {
			fmt.Fprintf(w, "proxy %s: requests went through %s (from the environment)\n", c.Target, c.Proxy)
		}
	}
	for _, s := range r.Saturation {
		fmt.Fprintf(w, "saturation %s: concurrency %d, %.1f output tok/s (%s)\n", s.Target, s.Concurrency, s.Throughput, s.Reason)
	}
	return nil
}

// spreadKeys are the figures whose spread over runs the console shows.
var spreadKeys = []string{"p50_ttft_ms", "p95_ttft_ms", "p95_e2el_ms", "output_throughput"}

// writeSpread prints, per cell, the runs' range and confidence interval of
// the main figures.
func writeSpread(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "\nspread over the runs: median [min–max] (95%% confidence interval)\n")
	tw := newTable(w)
	head := "target\tload\t"
	for _, k := range spreadKeys {
		unit := " ms"
		if !strings.HasSuffix(k, "_ms") {
			unit = ""
		}
		head += keyLabel(k) + unit + "\t"
	}
	fmt.Fprintln(tw, head)
	for _, c := range r.Results {
		line := c.Target + "\t" + cellLabel(c) + "\t"
		for _, k := range spreadKeys {
			iv, ok := c.Intervals[k]
			if !ok || c.Completed == 0 {
				line += "-\t"
				continue
			}
			line += fmt.Sprintf("%s [%s–%s] (%s–%s)\t", fmtFig(figure(c, k)), fmtFig(iv.Min), fmtFig(iv.Max), fmtFig(iv.Low), fmtFig(iv.High))
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// newTable returns the right-aligned tab writer of the console tables.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
}

// figure returns a cell's figure by its JSON key.
func figure(c *CellResult, key string) float64 {
	for _, tk := range throughputKeys {
		if tk.Key == key {
			return tk.Get(c)
		}
	}
	for _, sm := range summaryMetrics {
		for _, st := range statNames {
			if st+"_"+sm.Key+"_ms" == key {
				return statValue(sm.Get(c), st)
			}
		}
	}
	return math.NaN()
}

func cellLabel(c *CellResult) string {
	if c.Mode == "rate" && c.RequestRate != nil {
		s := "rate=" + FormatRate(float64(*c.RequestRate))
		if c.MaxConcurrency > 0 {
			s += fmt.Sprintf(",max=%d", c.MaxConcurrency)
		}
		return s
	}
	return "c=" + strconv.Itoa(c.Concurrency)
}
