package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// compareMetrics lists the metrics `bench compare` shows, with whether a
// higher value is better.
var compareMetrics = []struct {
	Name   string
	Higher bool
	Get    func(*CellResult) (float64, bool)
}{
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
	for _, m := range []string{"ttft", "tpot", "itl", "e2el"} {
		for _, st := range []string{"mean", "median", "p90", "p99"} {
			m, st := m, st
			compareMetrics = append(compareMetrics, struct {
				Name   string
				Higher bool
				Get    func(*CellResult) (float64, bool)
			}{st + "_" + m + "_ms", false, func(c *CellResult) (float64, bool) {
				return statValue(metricSummary(c, m), st), true
			}})
		}
	}
}

// Change is one metric of one matched cell in two reports.
type Change struct {
	Cell    string
	Metric  string
	A, B    float64
	Percent float64 // (B − A)/A × 100; NaN when A is 0
	// Verdict is "better", "worse" or "" when the change is below the
	// threshold.
	Verdict string
}

// Compare matches cells of a and b by target and load and returns the
// change of every metric. When no target names match (comparing two
// different endpoints run separately), cells are matched by load alone.
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
		for _, m := range compareMetrics {
			va, okA := m.Get(ca)
			vb, okB := m.Get(cb)
			if !okA || !okB {
				continue
			}
			ch := Change{Cell: label, Metric: m.Name, A: va, B: vb, Percent: math.NaN()}
			switch {
			case va != 0:
				ch.Percent = (vb - va) / math.Abs(va) * 100
			case vb == 0:
				ch.Percent = 0
			}
			significant := !math.IsNaN(ch.Percent) && math.Abs(ch.Percent) >= thresholdPct
			if va == 0 && vb != 0 {
				significant = true
			}
			if significant {
				if (vb > va) == m.Higher {
					ch.Verdict = "better"
				} else {
					ch.Verdict = "worse"
				}
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
			fmt.Fprintf(tw, "%s\tA\tB\tchange\t\n", c.Cell)
		}
		pct := "n/a"
		if !math.IsNaN(c.Percent) {
			pct = fmt.Sprintf("%+.1f%%", c.Percent)
		}
		fmt.Fprintf(tw, "  %s\t%.3f\t%.3f\t%s\t%s\n", c.Metric, c.A, c.B, pct, c.Verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, u := range unmatched {
		fmt.Fprintln(w, u)
	}
	fmt.Fprintf(w, "better/worse marks changes of at least %.0f%%; latencies in ms, throughputs per second\n", thresholdPct)
	return nil
}
