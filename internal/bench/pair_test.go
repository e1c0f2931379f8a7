package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestPairTargets_DeclaredOrObviousOnly(t *testing.T) {
	declared := []Target{{Name: "d", Model: "x"}, {Name: "g", Model: "y", Direct: "d"}}
	if p, _ := PairTargets(declared); len(p) != 1 || p[0] != (Pair{Gateway: "g", Direct: "d"}) {
		t.Errorf("declared pair: %+v", p)
	}
	// Inferred: a gateway and one direct target of the same model, the
	// names differing only in case and the org prefix.
	ts := []Target{
		{Name: "7b-direct", Model: "Qwen/Qwen2.5-7B-Instruct", Endpoint: EndpointChat},
		{Name: "32b-direct", Model: "Qwen/Qwen2.5-32B-Instruct", Endpoint: EndpointChat},
		{Name: "7b-gw", Model: "qwen2.5-7b-instruct", Endpoint: EndpointChat, IsGateway: true},
		{Name: "32b-gw", Model: "qwen2.5-32b-instruct", Endpoint: EndpointChat, IsGateway: true},
		{Name: "qwen3-gw", Model: "qwen3-32b", Endpoint: EndpointChat, IsGateway: true},
	}
	p, notes := PairTargets(ts)
	if len(p) != 2 || p[0] != (Pair{Gateway: "7b-gw", Direct: "7b-direct", Inferred: true}) || p[1].Direct != "32b-direct" {
		t.Errorf("inferred pairs: %+v", p)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "qwen3-gw") || !strings.Contains(notes[0], "direct:") {
		t.Errorf("notes: %v", notes)
	}
	// Gateway targets alone (the usual benchmark of a gateway): no pairs,
	// and nothing to say about it.
	if p, notes := PairTargets(ts[2:]); len(p) != 0 || len(notes) != 0 {
		t.Errorf("gateway targets only: %+v %v", p, notes)
	}
	// Two direct candidates: not obvious, so no pair and a note.
	amb := []Target{{Name: "a", Model: "m"}, {Name: "b", Model: "M"}, {Name: "g", Model: "m", IsGateway: true}}
	if p, notes := PairTargets(amb); len(p) != 0 || len(notes) != 1 || !strings.Contains(notes[0], "a or b") {
		t.Errorf("ambiguous: %+v %v", p, notes)
	}
	// direct: must name another target of the file.
	for _, bad := range []string{
		"targets:\n  - {name: g, base_url: http://x/v1, model: m, direct: nope}\n",
		"targets:\n  - {name: g, base_url: http://x/v1, model: m, direct: g}\n",
		"targets:\n  - {name: d, base_url: http://x/v1, model: m, direct: g}\n  - {name: g, base_url: http://y/v1, model: m, direct: d}\n",
	} {
		if _, err := LoadTargets(strings.NewReader(bad), func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "direct") {
			t.Errorf("accepted %q: %v", bad, err)
		}
	}
}

func cellWith(target string, run int, ttftP50, lo, hi float64) *CellResult {
	c := runWith(run, ttftP50, lo, hi)
	c.Target = target
	c.E2EL = c.TTFT
	return c
}

func TestGatewayAdded_OneRunUsesTheRequestsIntervalsAndRunsArePaired(t *testing.T) {
	one := &Report{Results: []*CellResult{cellWith("d", 0, 100, 95, 105), cellWith("g", 0, 110, 104, 116)}}
	a := gatewayAdded(one, []Pair{{Gateway: "g", Direct: "d"}})
	if len(a) != 1 || a[0].Load != "c=4" || a[0].Method != MethodRequests {
		t.Fatalf("added: %+v", a)
	}
	d := a[0].Figures[0] // TTFT p50
	if d.Key != "p50_ttft_ms" || d.Ms != 10 || d.Percent != 10 || d.Low == nil || d.High == nil ||
		!near(*d.Low, 10-7.81, 0.01) || !near(*d.High, 10+7.81, 0.01) {
		t.Errorf("TTFT p50 added %+v (low %v high %v), want +10 ms [2.19, 17.81]", d, deref(d.Low), deref(d.High))
	}
	// An open tail on the gateway side leaves the upper bound open.
	g := cellWith("g", 0, 110, 104, 116)
	iv := g.Intervals["p50_ttft_ms"]
	iv.Open = true
	g.Intervals["p50_ttft_ms"] = iv
	if d := gatewayAdded(&Report{Results: []*CellResult{cellWith("d", 0, 100, 95, 105), g}}, []Pair{{Gateway: "g", Direct: "d"}})[0].Figures[0]; d.High != nil || d.Low == nil {
		t.Errorf("open gateway tail: low %v high %v, want a lower bound only", deref(d.Low), deref(d.High))
	}

	// Three runs: the gateway 10, 12 and 8 ms slower than direct in each.
	var runs []RunResults
	for i, diff := range []float64{10, 12, 8} {
		base := []float64{100, 140, 90}[i] // the server drifts between runs; the pair does not
		runs = append(runs, RunResults{Run: i + 1, Results: []*CellResult{cellWith("d", i+1, base, base-5, base+5), cellWith("g", i+1, base+diff, base+diff-5, base+diff+5)}})
	}
	rep := &Report{Runs: runs}
	rep.Results = aggregateRuns(runs)
	a = gatewayAdded(rep, []Pair{{Gateway: "g", Direct: "d"}})
	d = a[0].Figures[0]
	if a[0].Method != MethodRuns || d.Ms != 10 || !near(*d.Low, 10-4.968, 0.01) || !near(*d.High, 10+4.968, 0.01) {
		t.Errorf("paired over runs: %s %+v [%v, %v], want +10 ms [5.03, 14.97]", a[0].Method, d, deref(d.Low), deref(d.High))
	}
	var out bytes.Buffer
	rep.Added = a
	if err := writeAdded(&out, rep); err != nil || !strings.Contains(out.String(), "+10.0 [+5.03, +15.0]") {
		t.Errorf("table: %v\n%s", err, out.String())
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// slowGateway answers /healthz as llmgate does and forwards every other
// request to up after a fixed delay: a gateway that adds that much, and
// says so in Server-Timing as llmgate does.
func slowGateway(up http.Handler, delay time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, `{"status":"ok"}`)
			return
		}
		if r.Method == http.MethodPost {
			time.Sleep(delay)
			w.Header().Set("Server-Timing", fmt.Sprintf("gateway;dur=%g, backend;dur=7.5", float64(delay)/float64(time.Millisecond)))
		}
		up.ServeHTTP(w, r)
	})
}

func TestGatewayAdded_EndToEndFindsWhatASlowGatewayAdds(t *testing.T) {
	up := &TimedUpstream{T1: 5 * time.Millisecond, T2: time.Millisecond, Chunks: 4, PromptTokens: 10}
	direct := httptest.NewServer(up)
	defer direct.Close()
	gw := httptest.NewServer(slowGateway(up, 30*time.Millisecond))
	defer gw.Close()
	targets := []Target{{Name: "m-direct", BaseURL: direct.URL + "/v1", Model: "Org/M"}, {Name: "m-gateway", BaseURL: gw.URL + "/v1", Model: "m"}}
	for i := range targets {
		if err := targets[i].Normalize(func(string) string { return "" }); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Targets: targets, Concurrencies: []int{1, 2}, NumRequests: 8, Warmup: 0, Burstiness: 1, Runs: 2,
		Workload: Workload{InputLen: 8, OutputLen: 4}, Request: RequestOptions{Timeout: 10 * time.Second}, KeepRequests: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Pairs) != 1 || !rep.Pairs[0].Inferred || rep.Pairs[0].Gateway != "m-gateway" || len(rep.Added) != 2 {
		t.Fatalf("pairs %+v, added %d cells", rep.Pairs, len(rep.Added))
	}
	for _, a := range rep.Added {
		ttft := a.Figures[0]
		// The gateway delays each request by 30 ms before the upstream
		// starts: TTFT and E2EL grow by about that, never by nothing.
		if ttft.Ms < 15 || a.Figures[2].Ms < 15 {
			t.Errorf("%s: added TTFT p50 %v ms, E2EL p50 %v ms; the gateway adds 30", a.Load, ttft.Ms, a.Figures[2].Ms)
		}
		// Beside it, what the gateway said of itself.
		if a.Reported == nil || a.Reported.P50 != 30 || a.Reported.P95 != 30 {
			t.Errorf("%s: the gateway's own account %+v, want p50 and p95 30 ms (its Server-Timing)", a.Load, a.Reported)
		}
	}
	// The figure is in the gateway's cells and absent (not 0) in the
	// direct target's.
	for _, c := range rep.Results {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if has := bytes.Contains(b, []byte(`"p50_gateway_overhead_ms":30`)); has != (c.Target == "m-gateway") {
			t.Errorf("%s (run %d): p50_gateway_overhead_ms in the JSON = %v:\n%s", c.Target, c.Run, has, b)
		}
	}
	// And in each request's line.
	for _, row := range rep.Requests {
		if (row.GatewayMs != nil && *row.GatewayMs == 30) != (row.Target == "m-gateway") {
			t.Errorf("request line of %s: gateway_overhead_ms %v", row.Target, deref(row.GatewayMs))
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil || !strings.Contains(table.String(), "what the gateway adds") ||
		!strings.Contains(table.String(), "m-direct → m-gateway inferred") || !strings.Contains(table.String(), "30.0 / 30.0") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
	t.Logf("\n%s", table.String())

	// The HTML report's table has the same column.
	bin := chromiumPath()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; CI must install Debian's chromium package (apt-get install -y chromium)")
		}
		t.Log("chromium not installed (apt-get install -y chromium); CI unset, the HTML report not rendered")
		return
	}
	dom, chromeLog := renderInChromium(t, bin, writeHTMLFile(t, rep))
	if !strings.Contains(dom, `colspan="2">gateway says (ms)</th>`) || !strings.Contains(dom, "Gateway says: its own time") {
		t.Errorf("the HTML report's added table has no gateway says column; stderr:\n%s", tail(chromeLog, 2000))
	}
	if e := regexp.MustCompile(`<pre id="js-errors">([^<]*)</pre>`).FindStringSubmatch(dom); e == nil || strings.TrimSpace(e[1]) != "" {
		t.Errorf("script errors in page: %v", e)
	}
}

// Without a direct twin there is no added table; what the gateway said of
// itself is printed on its own.
func TestWriteTable_TheGatewaySaysWithoutADirectTarget(t *testing.T) {
	up := &TimedUpstream{T1: time.Millisecond, T2: time.Millisecond, Chunks: 2, PromptTokens: 10}
	gw := httptest.NewServer(slowGateway(up, 5*time.Millisecond))
	defer gw.Close()
	targets := []Target{{Name: "via-gateway", BaseURL: gw.URL + "/v1", Model: "m"}}
	if err := targets[0].Normalize(func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Targets: targets, Concurrencies: []int{1}, NumRequests: 4, Burstiness: 1,
		Workload: Workload{InputLen: 8, OutputLen: 2}, Request: RequestOptions{Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Added) != 0 || !strings.Contains(table.String(), "the gateway says: its own time") ||
		!regexp.MustCompile(`via-gateway\s+c=1\s+5\.00 / 5\.00 / 5\.00`).MatchString(table.String()) {
		t.Errorf("added %d; table:\n%s", len(rep.Added), table.String())
	}
}
