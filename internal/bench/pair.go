package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
)

// Pair is a gateway target and the target that serves the same model
// directly: what the gateway adds is the difference of their figures.
type Pair struct {
	Gateway string `json:"gateway"`
	Direct  string `json:"direct"`
	// Inferred is set when the pair was not declared (direct: in the
	// targets file) but found: see PairTargets.
	Inferred bool `json:"inferred,omitempty"`
}

// Added is what a gateway added to one cell: gateway minus direct, for
// TTFT and E2EL at p50 and p95.
type Added struct {
	Gateway     string  `json:"gateway"`
	Direct      string  `json:"direct"`
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency,omitempty"`
	RequestRate *Rate   `json:"request_rate,omitempty"`
	Load        string  `json:"load"`
	Method      string  `json:"method"`
	Figures     []Delta `json:"figures"`
	// Reported is the gateway's own account of its time before each
	// answer began (an llmgate gateway's Server-Timing), beside what the
	// comparison measured; nil when the gateway sent none.
	Reported *Reported `json:"gateway_reported,omitempty"`
}

// Reported is the gateway's own time before each answer began, as it
// said, in milliseconds.
type Reported struct {
	P50 float64 `json:"p50_overhead_ms"`
	P95 float64 `json:"p95_overhead_ms"`
}

// Delta is one added figure in milliseconds with its 95% interval; a nil
// bound is unbounded (a tail percentile of too few requests).
type Delta struct {
	Key     string   `json:"key"` // p50_ttft_ms, p95_ttft_ms, p50_e2el_ms, p95_e2el_ms
	Ms      float64  `json:"ms"`
	Percent float64  `json:"percent"` // of the direct figure
	Low     *float64 `json:"ci95_low"`
	High    *float64 `json:"ci95_high"`
	Direct  float64  `json:"direct_ms"`
	Through float64  `json:"gateway_ms"`
}

// addedKeys are the figures of the gateway-added table.
var addedKeys = []string{"p50_ttft_ms", "p95_ttft_ms", "p50_e2el_ms", "p95_e2el_ms"}

// PairTargets returns the gateway/direct pairs of a matrix. Declared pairs
// (a target's direct: naming another) are used as given. When none is
// declared, a pair is inferred when it is obvious: a target whose server
// is an llmgate gateway and exactly one target whose server is not and
// whose model has the same name, ignoring case and an "org/" prefix
// (Qwen/Qwen2.5-7B-Instruct and qwen2.5-7b-instruct). notes say which
// gateway targets found no partner, or several.
func PairTargets(ts []Target) (pairs []Pair, notes []string) {
	for _, t := range ts {
		if t.Direct != "" {
			pairs = append(pairs, Pair{Gateway: t.Name, Direct: t.Direct})
		}
	}
	if len(pairs) > 0 {
		return pairs, nil
	}
	norm := func(m string) string {
		m = strings.ToLower(strings.TrimSpace(m))
		if i := strings.LastIndex(m, "/"); i >= 0 {
			m = m[i+1:]
		}
		return m
	}
	anyDirect := false
	for _, t := range ts {
		anyDirect = anyDirect || !t.IsGateway
	}
	for _, g := range ts {
		if !g.IsGateway {
			continue
		}
		var found []string
		for _, d := range ts {
			if !d.IsGateway && d.Endpoint == g.Endpoint && norm(d.Model) == norm(g.Model) {
				found = append(found, d.Name)
			}
		}
		switch len(found) {
		case 1:
			pairs = append(pairs, Pair{Gateway: g.Name, Direct: found[0], Inferred: true})
		case 0:
			// Only worth saying when some target is direct: a matrix of
			// gateway targets alone is not asking what the gateway adds.
			if anyDirect {
				notes = append(notes, fmt.Sprintf("%s is a gateway target but no direct target serves %s; to see what the gateway adds, add one and name it in direct:", g.Name, g.Model))
			}
		default:
			notes = append(notes, fmt.Sprintf("%s could be paired with %s; say which with direct: in the targets file", g.Name, strings.Join(found, " or ")))
		}
	}
	return pairs, notes
}

// detectGateway sets IsGateway when the target's server answers GET
// /healthz as an llmgate gateway does ({"status":"ok"} with a 200, where
// engines answer /health).
func (t *Target) detectGateway(ctx context.Context, client *http.Client) {
	if t.IsGateway || t.Direct != "" {
		t.IsGateway = true
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.root()+"/healthz", nil)
	if err != nil {
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	t.IsGateway = resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"status":"ok"`)
}

// root is the base URL without its /v1.
func (t *Target) root() string {
	return strings.TrimSuffix(strings.TrimRight(t.BaseURL, "/"), "/v1")
}

// gatewayAdded computes, for every pair and every cell both targets
// measured, what the gateway added. With several runs the differences are
// paired by run (the two targets ran back to back in each run, so drift
// cancels): the median of the runs' differences and Student's t interval
// over them. With one run, the difference of the two figures and an
// interval from their per-request intervals (the halves facing each
// other, added in quadrature).
func gatewayAdded(rep *Report, pairs []Pair) []Added {
	var out []Added
	for _, p := range pairs {
		for _, g := range rep.Results {
			if g.Target != p.Gateway {
				continue
			}
			var d *CellResult
			for _, c := range rep.Results {
				if c.Target == p.Direct && cellLabel(c) == cellLabel(g) {
					d = c
				}
			}
			if d == nil || g.Completed == 0 || d.Completed == 0 {
				continue
			}
			a := Added{Gateway: p.Gateway, Direct: p.Direct, Mode: g.Mode, Concurrency: g.Concurrency, RequestRate: g.RequestRate, Load: cellLabel(g)}
			if o := g.GatewayOverhead; o != (Summary{}) {
				a.Reported = &Reported{P50: round3(o.P50), P95: round3(o.P95)}
			}
			runsG, runsD := cellRuns(rep, g), cellRuns(rep, d)
			paired := len(runsG) >= 2 && len(runsG) == len(runsD)
			a.Method = MethodRequests
			if paired {
				a.Method = MethodRuns
			}
			for _, key := range addedKeys {
				gv, dv := figure(g, key), figure(d, key)
				delta := Delta{Key: key, Direct: round3(dv), Through: round3(gv)}
				if paired {
					var diffs []float64
					for i := range runsG {
						diffs = append(diffs, figure(runsG[i], key)-figure(runsD[i], key))
					}
					delta.Ms = median(diffs)
					lo, hi := tInterval(diffs)
					delta.Low, delta.High = &lo, &hi
				} else {
					delta.Ms = gv - dv
					ig, okG := g.Intervals[key]
					id, okD := d.Intervals[key]
					if okG && okD {
						// Low: the gateway lower, the direct higher.
						if !id.Open {
							lo := delta.Ms - math.Hypot(gv-ig.Low, id.High-dv)
							delta.Low = &lo
						}
						if !ig.Open {
							hi := delta.Ms + math.Hypot(ig.High-gv, dv-id.Low)
							delta.High = &hi
						}
					}
				}
				if dv > 0 {
					delta.Percent = round3(100 * delta.Ms / dv)
				}
				delta.Ms = round3(delta.Ms)
				if delta.Low != nil {
					*delta.Low = round3(*delta.Low)
				}
				if delta.High != nil {
					*delta.High = round3(*delta.High)
				}
				a.Figures = append(a.Figures, delta)
			}
			out = append(out, a)
		}
	}
	return out
}

// tInterval is Student's t 95% interval of the mean of vals (which may be
// negative: a gateway can measure faster than direct by chance).
func tInterval(vals []float64) (lo, hi float64) {
	mean, variance := meanVar(vals)
	half := studentT975(len(vals)-1) * math.Sqrt(variance/float64(len(vals)))
	return mean - half, mean + half
}

// writeAdded prints the gateway-added table.
func writeAdded(w io.Writer, r *Report) error {
	if len(r.Added) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nwhat the gateway adds: gateway − direct in ms, [95%% confidence interval]\n")
	tw := newTable(w)
	fmt.Fprint(tw, "gateway\tdirect\tload\t")
	for _, k := range addedKeys {
		fmt.Fprintf(tw, "%s added ms\t", keyLabel(k))
	}
	reported := false
	for _, a := range r.Added {
		reported = reported || a.Reported != nil
	}
	if reported {
		fmt.Fprint(tw, "gateway says p50 / p95 ms\t")
	}
	fmt.Fprintln(tw)
	for _, a := range r.Added {
		fmt.Fprintf(tw, "%s\t%s\t%s\t", a.Gateway, a.Direct, a.Load)
		for _, d := range a.Figures {
			fmt.Fprintf(tw, "%s [%s, %s]\t", signed(d.Ms), bound(d.Low, "−∞"), bound(d.High, "+∞"))
		}
		switch {
		case a.Reported != nil:
			fmt.Fprintf(tw, "%s / %s\t", fmtFig(a.Reported.P50), fmtFig(a.Reported.P95))
		case reported:
			fmt.Fprint(tw, "–\t")
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	method := "the difference of the two figures, its interval from their requests' intervals"
	if r.Added[0].Method == MethodRuns {
		method = "the median of the runs' differences (each run measured both back to back), Student's t over them"
	}
	fmt.Fprintf(w, "added = %s; an interval that contains 0 means no measurable difference\n", method)
	if reported {
		fmt.Fprintln(w, "gateway says = its own time before each answer began, from its Server-Timing header (the gateway entry: not waiting for the backend, a queue or an engine start)")
	}
	for _, p := range r.Pairs {
		if p.Inferred {
			fmt.Fprintf(w, "pair %s → %s inferred (same model; %s is an llmgate gateway); declare it with direct: in the targets file\n", p.Direct, p.Gateway, p.Gateway)
		}
	}
	return nil
}

func signed(v float64) string {
	if v >= 0 {
		return "+" + fmtFig(v)
	}
	return "−" + fmtFig(-v)
}

func bound(v *float64, open string) string {
	if v == nil {
		return open
	}
	return signed(*v)
}
