package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
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
var csvStats = []string{"mean", "median", "std", "p90", "p95", "p99"}

// CSVHeader lists the CSV columns.
func CSVHeader() []string {
	h := []string{"target", "model", "backend", "endpoint", "mode", "concurrency", "request_rate", "max_concurrency",
		"requests", "completed", "failed", "errors", "duration_s",
		"request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
		"total_input_tokens", "total_output_tokens", "input_tokens_estimated", "output_tokens_estimated"}
	for _, m := range csvMetrics {
		for _, s := range csvStats {
			h = append(h, s+"_"+m+"_ms")
		}
	}
	return append(h, "p99_dispatch_lag_ms", "client_cpu_percent", "client_wake_lag_p99_ms", "unreliable", "unreliable_reasons", "conn_retries")
}

// WriteCSV writes one row per target × cell.
func WriteCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader()); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	for _, c := range r.Results {
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
		row := []string{c.Target, c.Model, c.Backend, c.Endpoint, c.Mode, conc, rate, strconv.Itoa(c.MaxConcurrency),
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
		row = append(row, f(c.DispatchLag.P99), f(c.ClientCPUPercent), f(c.SchedLagP99Ms),
			strconv.FormatBool(c.Unreliable), strings.Join(c.UnreliableReasons, "; "), strconv.Itoa(c.ConnRetries))
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
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

// WriteTable prints the console summary: one line per target × cell.
func WriteTable(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tload\tok\tfail\treq/s\tout tok/s\tTTFT p50\tTTFT p99\tTPOT p50\tITL p50\tITL p99\tE2EL p50\tE2EL p99\tclient\t")
	for _, c := range r.Results {
		load := "c=" + strconv.Itoa(c.Concurrency)
		if c.Mode == "rate" && c.RequestRate != nil {
			load = "rate=" + FormatRate(float64(*c.RequestRate))
		}
		flag := "ok"
		if c.Unreliable {
			flag = "UNRELIABLE"
		}
		est := ""
		if c.OutputTokensEstimated {
			est = "~"
		}
		if c.Completed == 0 {
			// No successful request: latencies do not exist, not zero.
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\t\n", c.Target, load, c.Completed, c.Failed, flag)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f\t%s%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%s\t\n",
			c.Target, load, c.Completed, c.Failed, c.RequestThroughput, est, c.OutputThroughput,
			c.TTFT.P50, c.TTFT.P99, c.TPOT.P50, c.ITL.P50, c.ITL.P99, c.E2EL.P50, c.E2EL.P99, flag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "latencies in ms; TPOT = (E2EL − TTFT)/(output tokens − 1); ITL per streamed chunk; ~ = token count estimated (no usage from server)")
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
