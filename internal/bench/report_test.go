package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// matrixRequests is the number of requests in each cell of matrixReport.
const matrixRequests = 16

// matrixReport runs three models × concurrency 1,4,8,16 against a
// vLLM-like streaming server (the shape of `llmgate serve --demo`).
func matrixReport(t *testing.T) *Report {
	t.Helper()
	up := &TimedUpstream{T1: 15 * time.Millisecond, T2: 3 * time.Millisecond, Chunks: 6, TokensPerChunk: 2, PromptTokens: 30}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	targets, err := TargetsFromFlags(srv.URL+"/v1", "sk-test", []string{"qwen2.5-7b", "qwen2.5-32b", "qwen3-32b"}, "chat", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// 16 requests a cell: enough to fill the widest cell (c=16) once,
	// and about half a second per target at c=1.
	rep, err := Run(ctx, Options{
		Targets: targets, Concurrencies: []int{1, 4, 8, 16}, NumRequests: matrixRequests, Warmup: -1, Burstiness: 1,
		Workload: Workload{InputLen: 32, OutputLen: 12, Seed: 3},
		Request:  RequestOptions{Timeout: 30 * time.Second},
		Goodput:  Goodput{TTFT: 1000}, KeepRequests: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestMatrix_WritesCSVJSONAndHTMLForEveryTargetAndCell(t *testing.T) {
	rep := matrixReport(t)
	if len(rep.Results) != 12 {
		t.Fatalf("%d cells, want 3 targets × 4 concurrencies", len(rep.Results))
	}
	for _, c := range rep.Results {
		if c.Completed != matrixRequests || c.Failed != 0 {
			t.Errorf("%s c=%d: completed %d failed %d %v", c.Target, c.Concurrency, c.Completed, c.Failed, c.ErrorSamples)
		}
		if c.MaxConcurrentRequests > c.Concurrency {
			t.Errorf("%s c=%d: %d requests in flight, more than the concurrency", c.Target, c.Concurrency, c.MaxConcurrentRequests)
		}
	}

	var csvBuf bytes.Buffer
	if err := WriteCSV(&csvBuf, rep); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&csvBuf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 13 || len(rows[1]) != len(CSVHeader()) {
		t.Fatalf("csv: %d rows of %d columns", len(rows), len(rows[0]))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, name := range []string{"model", "backend", "concurrency", "completed", "failed", "mean_ttft_ms", "p99_itl_ms", "mean_tpot_ms", "output_throughput"} {
		if _, ok := col[name]; !ok {
			t.Errorf("csv lacks column %s", name)
		}
	}
	if rows[4][col["concurrency"]] != "16" || rows[5][col["model"]] != "qwen2.5-32b" {
		t.Errorf("csv row order: %v / %v", rows[4][:6], rows[5][:6])
	}

	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(js.Bytes(), &generic); err != nil {
		t.Fatal(err)
	}
	first := generic["results"].([]any)[0].(map[string]any)
	for _, k := range []string{"duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
		"request_goodput", "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
		"mean_tpot_ms", "mean_itl_ms", "median_e2el_ms", "p90_e2el_ms", "p95_itl_ms", "p50_tpot_ms", "mean_itl_per_token_ms"} {
		if _, ok := first[k]; !ok {
			t.Errorf("json result lacks vLLM field %s", k)
		}
	}
	if generic["settings"].(map[string]any)["concurrencies"] == nil {
		t.Error("json lacks the run's settings")
	}
	if strings.Contains(js.String(), "sk-test") {
		t.Error("API key leaked into the JSON report")
	}
	back, err := ReadReport(bytes.NewReader(js.Bytes()))
	if err != nil || !near(back.Results[3].TTFT.P99, rep.Results[3].TTFT.P99, 0.001) {
		t.Errorf("round trip: %v", err)
	}

	var page bytes.Buffer
	if err := WriteHTML(&page, rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "http://") && regexp.MustCompile(`(src|href)="https?://`).MatchString(page.String()) {
		t.Error("HTML report loads something from the network")
	}
	var lines bytes.Buffer
	if err := WriteRequestsJSONL(&lines, rep); err != nil || strings.Count(lines.String(), "\n") != 12*matrixRequests {
		t.Errorf("jsonl: %d lines, %v", strings.Count(lines.String(), "\n"), err)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil || !strings.Contains(table.String(), "qwen3-32b") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
	t.Logf("console table:\n%s", table.String())
}

func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

func TestHTMLReport_RendersChartsInHeadlessChromiumWithoutConsoleErrors(t *testing.T) {
	bin := chromiumPath()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; CI must install Debian's chromium package (apt-get install -y chromium)")
		}
		t.Skip("chromium not installed (apt-get install -y chromium); CI unset, skipping")
	}
	// Closed- and open-loop cells, a failing target, and an unreliable
	// flag: every part of the page the script draws.
	up := &TimedUpstream{T1: 10 * time.Millisecond, T2: 2 * time.Millisecond, Chunks: 5, PromptTokens: 20}
	srv := httptest.NewServer(up)
	defer srv.Close()
	targets, _ := TargetsFromFlags(srv.URL+"/v1", "", []string{"alpha", "beta", "fail-500"}, "chat", func(string) string { return "" })
	ctx0, cancel0 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel0()
	rep, err := Run(ctx0, Options{
		Targets: targets, Concurrencies: []int{1, 2, 4}, Rates: []float64{20, math.Inf(1)}, NumRequests: 8,
		Warmup: 0, Burstiness: 1, Workload: Workload{InputLen: 8, OutputLen: 5},
		Request: RequestOptions{Timeout: 10 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	rep.Results[0].Unreliable = true
	rep.Results[0].UnreliableReasons = []string{"test: flagged to draw the marker"}
	// One chunk of one cell took 500 ms where the rest took a few: the
	// ITL CDF's axis must fit the data (to the largest p99), not the max.
	rep.Results[1].Dist.ITL[100] = 500
	path := writeHTMLFile(t, rep)
	if keep := os.Getenv("LLMGATE_BENCH_KEEP_HTML"); keep != "" {
		// For looking at the page by hand.
		b, _ := os.ReadFile(path)
		_ = os.WriteFile(keep, b, 0o644)
	}

	dom, chromeLog := renderInChromium(t, bin, path)
	m := regexp.MustCompile(`data-charts-rendered="(\d+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("page script did not finish (no data-charts-rendered marker); stderr:\n%s", tail(chromeLog, 3000))
	}
	// Per load mode 4 latency + 3 throughput charts; a TTFT and an ITL CDF
	// per target with successful requests.
	want := 2*(4+3) + 2*2
	if n, _ := strconv.Atoi(m[1]); n != want {
		t.Errorf("charts rendered = %s, want %d", m[1], want)
	}
	if !strings.Contains(dom, `class="unreliable"`) {
		t.Error("the unreliable cell is not marked in the charts")
	}
	if !strings.Contains(dom, "http_500=8") {
		t.Error("the failing target's errors are not in the table")
	}
	if !strings.Contains(dom, "axis to the largest p99 (max 500 ms)") {
		t.Error("the ITL CDF's axis is not fitted to the data")
	}
	// The cell tables: P50/P95/P99 under a header with the unit, and no
	// width cap on the page that cuts them.
	for _, want := range []string{`<th class="group sep" colspan="3">TTFT (ms)</th>`, `<th class="group sep" colspan="3">E2EL (ms)</th>`,
		"<th>p95</th>", ">req/s</th>", "<th>output (tok/s)</th>"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the cell tables lack %s", want)
		}
	}
	if regexp.MustCompile(`main\{[^}]*max-width`).MatchString(reportTemplate) {
		t.Error("the page's main column has a maximum width: wide tables are cut")
	}
	if !strings.Contains(dom, `data-status="ok"`) {
		t.Errorf("status is not ok: %s", regexp.MustCompile(`<div id="status"[^>]*>[^<]*`).FindString(dom))
	}
	if e := regexp.MustCompile(`<pre id="js-errors">([^<]*)</pre>`).FindStringSubmatch(dom); e == nil || strings.TrimSpace(e[1]) != "" {
		t.Errorf("script errors in page: %v", e)
	}
	if n := strings.Count(dom, `<svg `); n < want {
		t.Errorf("%d <svg> elements in the DOM, want at least %d", n, want)
	}
	// Every concurrency latency chart has a p50 and a p95 line for each of
	// the two working targets, with a point per concurrency.
	if n := strings.Count(dom, `class="series"`); n < 4*2*2 {
		t.Errorf("%d plotted series, want at least %d", n, 4*2*2)
	}
	if n := strings.Count(dom, "<circle "); n < 4*2*2*3 {
		t.Errorf("%d data points drawn, want at least %d", n, 4*2*2*3)
	}
	checkConsole(t, chromeLog)
}

// renderInChromium loads a report in headless Chromium and returns the DOM
// after its script ran, and Chromium's log.
// writeHTMLFile writes rep's HTML report into a file of the test's own
// and returns its path.
func writeHTMLFile(t *testing.T, rep *Report) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := WriteHTML(f, rep); err != nil {
		t.Fatal(err)
	}
	return path
}

func renderInChromium(t *testing.T, bin, path string) (dom, log string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir="+filepath.Join(t.TempDir(), "profile"),
		"--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
		"--dump-dom", "file://"+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, tail(stderr.String(), 3000))
	}
	return stdout.String(), stderr.String()
}

// checkConsole fails on anything the page wrote to the console.
func checkConsole(t *testing.T, log string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, ":CONSOLE") || strings.Contains(line, "Uncaught") {
			t.Errorf("console output from the page: %s", line)
		}
	}
}

// TestHTMLReport_ExternalFileRendersInChromium checks a report written by a
// real run — .ci/run points LLMGATE_BENCH_HTML at the report of its
// benchmark matrix against serve --demo.
func TestHTMLReport_ExternalFileRendersInChromium(t *testing.T) {
	path := os.Getenv("LLMGATE_BENCH_HTML")
	if path == "" {
		t.Skip("LLMGATE_BENCH_HTML not set: .ci/run sets it to the demo matrix report")
	}
	bin := chromiumPath()
	if bin == "" {
		t.Fatal("chromium is not installed (apt-get install -y chromium)")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	dom, chromeLog := renderInChromium(t, bin, abs)
	m := regexp.MustCompile(`data-charts-rendered="(\d+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("page script did not finish; chromium log:\n%s", tail(chromeLog, 3000))
	}
	if n, _ := strconv.Atoi(m[1]); n < 7 || strings.Count(dom, "<svg ") < n {
		t.Errorf("charts rendered = %s, <svg> = %d", m[1], strings.Count(dom, "<svg "))
	}
	if !strings.Contains(dom, `data-status="ok"`) {
		t.Error("page status is not ok")
	}
	if e := regexp.MustCompile(`<pre id="js-errors">([^<]*)</pre>`).FindStringSubmatch(dom); e == nil || strings.TrimSpace(e[1]) != "" {
		t.Errorf("script errors in page: %v", e)
	}
	checkConsole(t, chromeLog)
	t.Logf("%s: %s charts rendered", path, m[1])
}

// TestHTMLReport_TargetColoursAreFarApart checks the palette: no two of
// its colours closer than 70 in RGB distance (the old one had two oranges
// 23 apart, so two targets looked the same).
func TestHTMLReport_TargetColoursAreFarApart(t *testing.T) {
	m := regexp.MustCompile(`var COLORS = \[([^\]]*)\]`).FindStringSubmatch(reportTemplate)
	if m == nil {
		t.Fatal("no COLORS palette in the template")
	}
	cols := regexp.MustCompile(`#([0-9a-fA-F]{6})`).FindAllStringSubmatch(m[1], -1)
	if len(cols) < 12 {
		t.Fatalf("%d colours; want 12 so that a 3-model direct-and-gateway matrix has 6 distinct ones and room to spare", len(cols))
	}
	rgb := func(h string) [3]float64 {
		v, _ := strconv.ParseUint(h, 16, 32)
		return [3]float64{float64(v >> 16), float64(v >> 8 & 0xff), float64(v & 0xff)}
	}
	for i := range cols {
		for j := i + 1; j < len(cols); j++ {
			a, b := rgb(cols[i][1]), rgb(cols[j][1])
			if d := math.Sqrt((a[0]-b[0])*(a[0]-b[0]) + (a[1]-b[1])*(a[1]-b[1]) + (a[2]-b[2])*(a[2]-b[2])); d < 70 {
				t.Errorf("colours #%s and #%s are %.0f apart in RGB; two targets would look alike", cols[i][1], cols[j][1], d)
			}
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
