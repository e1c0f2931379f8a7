package bench

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// RunResults are the cells of one run of the matrix (--runs).
type RunResults struct {
	Run     int           `json:"run"`
	Started string        `json:"started"`
	Results []*CellResult `json:"results"`
}

// DisagreeMinPercent is the smallest relative difference between two runs'
// figures that can flag a cell: below it, intervals that do not overlap
// (the ITL's, from thousands of chunks, are narrow) are called agreement.
const DisagreeMinPercent = 5

// throughputKeys are the per-run figures without a within-run interval
// that still get a spread over runs.
var throughputKeys = []struct {
	Key string
	Get func(*CellResult) float64
}{
	{"request_throughput", func(c *CellResult) float64 { return c.RequestThroughput }},
	{"output_throughput", func(c *CellResult) float64 { return c.OutputThroughput }},
	{"total_token_throughput", func(c *CellResult) float64 { return c.TotalTokenThroughput }},
}

// cellKey identifies a cell of a target in a report.
func cellKey(c *CellResult) string { return c.Target + " " + cellLabel(c) }

// aggregateRuns returns one result per target × cell over its runs, in the
// order of the first run. Each figure is the median of the runs' figures;
// counts are summed; Intervals hold the runs' min–max and Student's t
// interval; Disagree flags runs that disagree beyond their own intervals.
func aggregateRuns(runs []RunResults) []*CellResult {
	if len(runs) == 1 {
		return runs[0].Results
	}
	byKey := map[string][]*CellResult{}
	for _, r := range runs {
		for _, c := range r.Results {
			byKey[cellKey(c)] = append(byKey[cellKey(c)], c)
		}
	}
	var out []*CellResult
	for _, c := range runs[0].Results {
		out = append(out, aggregateCell(byKey[cellKey(c)]))
	}
	return out
}

func aggregateCell(rs []*CellResult) *CellResult {
	a := *rs[0]
	a.Run, a.Runs = 0, len(rs)
	a.Completed, a.Failed, a.TotalInputTokens, a.TotalOutputTokens, a.ConnRetries, a.EngineWaits = 0, 0, 0, 0, 0, 0
	a.Duration, a.Errors, a.ErrorSamples = 0, map[string]int{}, nil
	a.UnreliableReasons, a.Unreliable = nil, false
	a.Intervals = map[string]Interval{}
	seenSample := map[string]bool{}
	var good []float64
	for _, r := range rs {
		a.Completed += r.Completed
		a.Failed += r.Failed
		a.TotalInputTokens += r.TotalInputTokens
		a.TotalOutputTokens += r.TotalOutputTokens
		a.ConnRetries += r.ConnRetries
		a.EngineWaits += r.EngineWaits
		a.EngineWaitMaxS = math.Max(a.EngineWaitMaxS, r.EngineWaitMaxS)
		a.Duration += r.Duration
		for k, n := range r.Errors {
			a.Errors[k] += n
		}
		for _, s := range r.ErrorSamples {
			if len(a.ErrorSamples) < 5 && !seenSample[s] {
				seenSample[s] = true
				a.ErrorSamples = append(a.ErrorSamples, s)
			}
		}
		a.InputTokensEstimated = a.InputTokensEstimated || r.InputTokensEstimated
		a.OutputTokensEstimated = a.OutputTokensEstimated || r.OutputTokensEstimated
		a.ITLPerTokenEstimated = a.ITLPerTokenEstimated || r.ITLPerTokenEstimated
		a.MaxConcurrentRequests = max(a.MaxConcurrentRequests, r.MaxConcurrentRequests)
		a.ClientCPUPercent = math.Max(a.ClientCPUPercent, r.ClientCPUPercent)
		a.SchedLagP99Ms = math.Max(a.SchedLagP99Ms, r.SchedLagP99Ms)
		for _, why := range r.UnreliableReasons {
			a.UnreliableReasons = append(a.UnreliableReasons, fmt.Sprintf("run %d: %s", r.Run, why))
		}
		a.Unreliable = a.Unreliable || r.Unreliable
		if r.RequestGoodput != nil {
			good = append(good, *r.RequestGoodput)
		}
	}
	for _, tk := range throughputKeys {
		var vals []float64
		for _, r := range rs {
			vals = append(vals, tk.Get(r))
		}
		a.Intervals[tk.Key] = roundInterval(runsInterval(vals))
		v := median(vals)
		switch tk.Key {
		case "request_throughput":
			a.RequestThroughput = v
		case "output_throughput":
			a.OutputThroughput = v
		case "total_token_throughput":
			a.TotalTokenThroughput = v
		}
	}
	if len(good) > 0 {
		g := median(good)
		a.RequestGoodput = &g
	}
	for _, sm := range summaryMetrics {
		agg := sm.Get(&a)
		*agg = Summary{Min: math.Inf(1), Max: math.Inf(-1)}
		var with []*CellResult
		for _, r := range rs {
			if s := sm.Get(r); s.Count > 0 {
				with = append(with, r)
				agg.Count += s.Count
				agg.Min, agg.Max = math.Min(agg.Min, s.Min), math.Max(agg.Max, s.Max)
			}
		}
		if len(with) == 0 {
			*agg = Summary{}
			continue
		}
		for _, st := range statNames {
			var vals []float64
			for _, r := range with {
				vals = append(vals, statValue(sm.Get(r), st))
			}
			setStat(agg, st, median(vals))
		}
	}
	for _, m := range intervalMetrics {
		for _, st := range intervalStats {
			key := st + "_" + m + "_ms"
			var vals []float64
			for _, r := range rs {
				if metricSummary(r, m).Count > 0 {
					vals = append(vals, statValue(metricSummary(r, m), st))
				}
			}
			if len(vals) > 0 {
				a.Intervals[key] = roundInterval(runsInterval(vals))
			}
		}
	}
	a.Dist = Distributions{TTFT: medianDist(rs, func(c *CellResult) []float64 { return c.Dist.TTFT }),
		ITL: medianDist(rs, func(c *CellResult) []float64 { return c.Dist.ITL })}
	a.DisagreeReasons = runsDisagree(rs)
	a.Disagree = len(a.DisagreeReasons) > 0
	return &a
}

func roundInterval(iv Interval) Interval {
	return Interval{Min: round3(iv.Min), Max: round3(iv.Max), Low: round3(iv.Low), High: round3(iv.High), Open: iv.Open}
}

// medianDist is the per-percent median of the runs' distributions.
func medianDist(rs []*CellResult, get func(*CellResult) []float64) []float64 {
	var ds [][]float64
	for _, r := range rs {
		if d := get(r); len(d) > 0 {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return nil
	}
	n := len(ds[0])
	out := make([]float64, n)
	for i := range out {
		var vals []float64
		for _, d := range ds {
			if i < len(d) {
				vals = append(vals, d[i])
			}
		}
		out[i] = round3(median(vals))
	}
	return out
}

// runsDisagree lists the figures on which two runs of a cell disagree
// beyond their spread: each run's own 95% interval (from its requests)
// excludes the other run's interval, and the figures differ by at least
// DisagreeMinPercent. Such runs measured different conditions (a server
// that warmed up, throttled, or was shared), not sampling noise; their
// median hides it, so the cell is flagged. TTFT, TPOT and E2EL are judged,
// one sample per request; ITL is not, because its samples are chunks of
// the same requests and its within-run interval is too narrow to judge by.
func runsDisagree(rs []*CellResult) []string {
	var out []string
	for _, m := range []string{"ttft", "tpot", "e2el"} { // not ITL: see below
		for _, st := range intervalStats[1:] { // p50, p95, p99
			key := st + "_" + m + "_ms"
			var worst string
			worstGap := 0.0
			for i := range rs {
				for j := i + 1; j < len(rs); j++ {
					a, okA := rs[i].Intervals[key]
					b, okB := rs[j].Intervals[key]
					if !okA || !okB {
						continue
					}
					va, vb := a.Min, b.Min
					if a.upper() >= b.Low && b.upper() >= a.Low {
						continue // the intervals overlap
					}
					lo := math.Min(va, vb)
					if lo <= 0 {
						continue
					}
					gap := 100 * math.Abs(va-vb) / lo
					if gap < DisagreeMinPercent || gap <= worstGap {
						continue
					}
					worstGap = gap
					worst = fmt.Sprintf("%s: run %d %s ms [%s–%s] vs run %d %s ms [%s–%s]", keyLabel(key),
						rs[i].Run, fmtFig(va), fmtFig(a.Low), fmtFig(a.High), rs[j].Run, fmtFig(vb), fmtFig(b.Low), fmtFig(b.High))
				}
			}
			if worst != "" {
				out = append(out, worst)
			}
		}
	}
	return out
}

// keyLabel names a figure's key for people: "p95_ttft_ms" → "TTFT p95".
func keyLabel(key string) string {
	switch key {
	case "request_throughput":
		return "req/s"
	case "output_throughput":
		return "out tok/s"
	case "total_token_throughput":
		return "total tok/s"
	}
	parts := strings.Split(strings.TrimSuffix(key, "_ms"), "_")
	if len(parts) < 2 {
		return key
	}
	metric := strings.ToUpper(strings.Join(parts[1:], "_"))
	if metric == "ITL_PER_TOKEN" {
		metric = "ITL/token"
	}
	return metric + " " + parts[0]
}

// fmtFig prints a figure with precision that suits its size.
func fmtFig(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// sortResults orders cells as reports show them: by target in the order
// given, then closed-loop cells by concurrency, then open-loop ones by rate.
func sortResults(rs []*CellResult, targets []Target) {
	pos := map[string]int{}
	for i, t := range targets {
		pos[t.Name] = i
	}
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if pos[a.Target] != pos[b.Target] {
			return pos[a.Target] < pos[b.Target]
		}
		return false
	})
}
