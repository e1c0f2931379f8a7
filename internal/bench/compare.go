package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// compareMetric is one figure `bench compare` shows: its JSON key, whether
// a higher value is better, and how to read it from a cell.
type compareMetric struct {
	Name   string
	Higher bool
	Get    func(*CellResult) (float64, bool)
}

// compareMetrics lists the metrics `bench compare` shows.
var compareMetrics = []compareMetric{
	{"request_throughput", true, func(c *CellResult) (float64, bool) { return c.RequestThroughput, true }},
	{"output_throughput", true, func(c *CellResult) (float64, bool) { return c.OutputThroughput, true }},
	{"total_token_throughput", true, func(c *CellResult) (float64, bool) { return c.TotalTokenThroughput, true }},
	{"request_goodput", true, func(c *CellResult) (float64, bool) {
		if c.RequestGoodput == nil {
			return 0, false
		}
		return *c.RequestGoodput, true
	}},
	{"failed", false, func(c *CellResult) (float64, bool) { return float64(c.Failed), true }},
}

func init() {
	for _, m := range intervalMetrics {
		for _, st := range intervalStats {
			m, st := m, st
			compareMetrics = append(compareMetrics, compareMetric{st + "_" + m + "_ms", false, func(c *CellResult) (float64, bool) {
				// A report read back from JSON has no sample counts; a cell
				// with a successful request has the metric.
				s := metricSummary(c, m)
				return statValue(s, st), s.Count > 0 || c.Completed > 0
			}})
		}
	}
}

// Significance is the level below which a change is called significant.
const Significance = 0.05

// Verdicts of a change.
const (
	VerdictBetter         = "better"
	VerdictWorse          = "worse"
	VerdictNoDifference   = "no significant difference"
	VerdictBelowThreshold = "significant but small"
	VerdictNotTested      = "not tested"
)

// Change is one metric of one matched cell in two reports.
type Change struct {
	Cell    string
	Metric  string
	A, B    float64
	Percent float64 // (B − A)/A × 100; NaN when A is 0
	// P is the two-sided p-value of the difference (Method says how it
	// was tested); 1 when not tested.
	P      float64
	Method string
	// Verdict is better or worse (significant and at least the threshold),
	// significant but small, no significant difference, or not tested
	// (a per-run figure measured once on each side).
	Verdict string
}

// Test methods.
const (
	MethodRuns     = "runs"     // Welch's t-test over the runs' figures
	MethodRequests = "requests" // the figures' intervals from their requests
	MethodCounts   = "counts"   // two-proportion test of failed requests
)

// Compare matches cells of a and b by target and load and returns the
// change of every metric, each tested for significance: over the runs
// when both reports have several (Welch's t-test on the runs' figures),
// else from the per-request 95% intervals each figure carries (the
// difference against the interval halves that face each other, a normal
// test), failures as proportions of requests. Throughputs measured in one
// run on either side have no per-request spread and are not tested. When
// no target names match (two different endpoints run separately), cells
// are matched by load alone.
func Compare(a, b *Report, thresholdPct float64) ([]Change, []string) {
	key := func(c *CellResult, withTarget bool) string {
		k := cellLabel(c)
		if withTarget {
			k = c.Target + " " + k
		}
		return k
	}
	withTarget := false
	names := map[string]bool{}
	for _, c := range a.Results {
		names[c.Target] = true
	}
	for _, c := range b.Results {
		if names[c.Target] {
			withTarget = true
		}
	}
	bm := map[string]*CellResult{}
	for _, c := range b.Results {
		bm[key(c, withTarget)] = c
	}
	var out []Change
	var unmatched []string
	seen := map[string]bool{}
	for _, ca := range a.Results {
		k := key(ca, withTarget)
		cb, ok := bm[k]
		if !ok {
			unmatched = append(unmatched, "only in A: "+k)
			continue
		}
		seen[k] = true
		label := k
		if !withTarget {
			label = ca.Target + " → " + cb.Target + " " + k
		}
		runsA, runsB := cellRuns(a, ca), cellRuns(b, cb)
		for _, m := range compareMetrics {
			va, okA := m.Get(ca)
			vb, okB := m.Get(cb)
			if !okA || !okB {
				continue
			}
			ch := Change{Cell: label, Metric: m.Name, A: va, B: vb, Percent: math.NaN(), P: 1}
			switch {
			case va != 0:
				ch.Percent = (vb - va) / math.Abs(va) * 100
			case vb == 0:
				ch.Percent = 0
			}
			ch.P, ch.Method = testChange(m, ca, cb, runsA, runsB)
			switch {
			case ch.Method == "":
				ch.Verdict = VerdictNotTested
			case ch.P >= Significance || va == vb:
				ch.Verdict = VerdictNoDifference
			case !math.IsNaN(ch.Percent) && math.Abs(ch.Percent) < thresholdPct:
				ch.Verdict = VerdictBelowThreshold
			case (vb > va) == m.Higher:
				ch.Verdict = VerdictBetter
			default:
				ch.Verdict = VerdictWorse
			}
			out = append(out, ch)
		}
	}
	for _, c := range b.Results {
		if k := key(c, withTarget); !seen[k] {
			unmatched = append(unmatched, "only in B: "+k)
		}
	}
	return out, unmatched
}

// cellRuns returns the per-run results of a report's cell (nil for a
// report of one run).
func cellRuns(r *Report, c *CellResult) []*CellResult {
	if len(r.Runs) < 2 {
		return nil
	}
	var out []*CellResult
	for _, run := range r.Runs {
		for _, rc := range run.Results {
			if cellKey(rc) == cellKey(c) {
				out = append(out, rc)
			}
		}
	}
	return out
}

// testChange returns the p-value of a metric's change and how it was
// found, or "" when it cannot be tested.
func testChange(m compareMetric, ca, cb *CellResult, runsA, runsB []*CellResult) (float64, string) {
	if len(runsA) >= 2 && len(runsB) >= 2 {
		var xa, xb []float64
		for _, r := range runsA {
			if v, ok := m.Get(r); ok {
				xa = append(xa, v)
			}
		}
		for _, r := range runsB {
			if v, ok := m.Get(r); ok {
				xb = append(xb, v)
			}
		}
		if p, ok := welch(xa, xb); ok {
			return p, MethodRuns
		}
	}
	if m.Name == "failed" {
		return proportionTest(ca.Failed, ca.Failed+ca.Completed, cb.Failed, cb.Failed+cb.Completed), MethodCounts
	}
	ia, okA := ca.Intervals[m.Name]
	ib, okB := cb.Intervals[m.Name]
	if !okA || !okB {
		return 1, ""
	}
	va, _ := m.Get(ca)
	vb, _ := m.Get(cb)
	if p, ok := intervalTest(va, vb, ia, ib); ok {
		return p, MethodRequests
	}
	return 1, ""
}

// proportionTest is the two-sided two-proportion z-test of fa of na
// against fb of nb.
func proportionTest(fa, na, fb, nb int) float64 {
	if na == 0 || nb == 0 {
		return 1
	}
	pa, pb := float64(fa)/float64(na), float64(fb)/float64(nb)
	p := float64(fa+fb) / float64(na+nb)
	se := math.Sqrt(p * (1 - p) * (1/float64(na) + 1/float64(nb)))
	if se == 0 {
		return 1
	}
	return math.Erfc(math.Abs(pb-pa) / se / math.Sqrt2)
}

// metricTitle names a compared metric with its unit.
func metricTitle(name string) string {
	switch name {
	case "request_throughput", "request_goodput":
		return strings.ReplaceAll(name, "_", " ") + " (req/s)"
	case "output_throughput", "total_token_throughput":
		return strings.ReplaceAll(name, "_", " ") + " (tok/s)"
	case "failed":
		return "failed requests"
	}
	return keyLabel(name) + " (ms)"
}

// WriteComparison prints Compare's result as a table per cell.
func WriteComparison(w io.Writer, a, b *Report, thresholdPct float64) error {
	changes, unmatched := Compare(a, b, thresholdPct)
	if len(changes) == 0 {
		return fmt.Errorf("no cell appears in both reports (%s)", strings.Join(unmatched, "; "))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	cell := ""
	for _, c := range changes {
		if c.Cell != cell {
			if cell != "" {
				fmt.Fprintln(tw)
			}
			cell = c.Cell
			fmt.Fprintf(tw, "%s\tA\tB\tchange\tp\tverdict\n", c.Cell)
		}
		pct := "n/a"
		if !math.IsNaN(c.Percent) {
			pct = fmt.Sprintf("%+.1f%%", c.Percent)
		}
		p := "-"
		if c.Method != "" {
			p = fmt.Sprintf("%.3f", c.P)
			if c.P < 0.001 {
				p = "<0.001"
			}
		}
		verdict := c.Verdict
		if c.Method == MethodRuns {
			verdict += " (runs)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", metricTitle(c.Metric), fmtFig(c.A), fmtFig(c.B), pct, p, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, u := range unmatched {
		fmt.Fprintln(w, u)
	}
	fmt.Fprintf(w, "A change is better or worse when it is significant (p < %.2f) and at least %.0f%% (--threshold); "+
		"p from the runs' figures (Welch's t) when both reports have several runs, else from each figure's 95%% interval "+
		"over its requests; a throughput measured in one run has no spread: --runs 3 tests it\n", Significance, thresholdPct)
	return nil
}
