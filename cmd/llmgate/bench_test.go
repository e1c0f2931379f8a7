package main

import (
	"bytes"
	"encoding/csv"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/bench"
)

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func TestBenchCLI_MatrixWritesAllOutputsAndCompareReadsThem(t *testing.T) {
	up := &bench.TimedUpstream{T1: 10 * time.Millisecond, T2: 2 * time.Millisecond, Chunks: 4}
	srv := httptest.NewServer(up)
	defer srv.Close()
	dir := t.TempDir()
	t.Setenv("LLMGATE_API_KEY", "sk-lg-from-env")
	stdout, stderr, err := runCLI(t, "bench", "--base-url", srv.URL+"/v1", "--model", "a,b",
		"--concurrency", "1,2", "--num-requests", "4", "--input-len", "8", "--output-len", "4",
		"--goodput", "ttft:1000", "--out", dir)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr)
	}
	for _, f := range []string{"results.csv", "results.json", "report.html", "requests.jsonl"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	if !strings.Contains(stdout, "TTFT ms p50 / p95 / p99") || !strings.Contains(stderr, "[a c=2]") {
		t.Errorf("table or progress missing:\n%s\n%s", stdout, stderr)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "results.csv"))
	rows, _ := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if len(rows) != 1+2*2 {
		t.Errorf("csv has %d rows, want header + 2 targets × 2 cells", len(rows))
	}
	if js, _ := os.ReadFile(filepath.Join(dir, "results.json")); strings.Contains(string(js), "sk-lg-from-env") {
		t.Error("API key written to the report")
	}
	cmp, _, err := runCLI(t, "bench", "compare", filepath.Join(dir, "results.json"), filepath.Join(dir, "results.json"))
	if err != nil || !strings.Contains(cmp, "TTFT p95 (ms)") || !strings.Contains(cmp, "no significant difference") {
		t.Errorf("compare: %v\n%s", err, cmp)
	}
}

func TestBenchCLI_RejectsBadInputWithAHint(t *testing.T) {
	t.Setenv("LLMGATE_BASE_URL", "")
	t.Setenv("OPENAI_BASE_URL", "")
	cases := map[string][]string{
		"--base-url":   {"bench", "--model", "m", "--concurrency", "1"},
		"pass --model": {"bench", "--base-url", "http://127.0.0.1:9/v1", "--concurrency", "1"},
		"positive":     {"bench", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--request-rate", "-3"},
		"--goodput":    {"bench", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--concurrency", "1", "--goodput", "itl:5"},
		"KEY=VALUE":    {"bench", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--concurrency", "1", "--header", "nokey"},
		"--concurrency, --request-rate or --sweep": {"bench", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"},
	}
	for hint, args := range cases {
		_, _, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), hint) {
			t.Errorf("%v: error %v, want a hint mentioning %q", args, err, hint)
		}
	}
}

func TestBenchCLI_FailsWhenACellMeasuredNothing(t *testing.T) {
	up := &bench.TimedUpstream{T1: time.Millisecond, T2: time.Millisecond, Chunks: 2}
	srv := httptest.NewServer(up)
	defer srv.Close()
	dir := t.TempDir()
	_, _, err := runCLI(t, "bench", "--base-url", srv.URL+"/v1", "--model", "fail-500", "--concurrency", "1",
		"--num-requests", "2", "--json-file", filepath.Join(dir, "r.json"), "-q")
	if err == nil || !strings.Contains(err.Error(), "every request failed") || !strings.Contains(err.Error(), "http_500") {
		t.Errorf("err = %v, want every request failed with the HTTP 500 sample", err)
	}
	if _, statErr := os.Stat(filepath.Join(dir, "r.json")); statErr != nil {
		t.Error("results must still be written when the run fails")
	}
}

func TestBenchCLI_UsesTheFirstServedModelWhenNoneIsNamed(t *testing.T) {
	up := &bench.TimedUpstream{T1: time.Millisecond, T2: time.Millisecond, Chunks: 2}
	srv := httptest.NewServer(up)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "r.json")
	// --json FILE is the old name of --json-file: it still writes, and says so.
	stdout, stderr, err := runCLI(t, "bench", "--base-url", srv.URL+"/v1", "--concurrency", "1", "--num-requests", "2", "-q", "--json", path, "--format", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	// Cobra writes the note where help goes: stderr for the binary, the
	// test's stdout buffer here.
	note, report, _ := strings.Cut(stdout, "\n")
	if !strings.Contains(note, "Flag --json has been deprecated, use --json-file instead") {
		t.Errorf("no deprecation note for --json FILE: %s", note)
	}
	// --format json prints the JSON report on stdout instead of the table.
	if _, err := bench.ReadReport(strings.NewReader(report)); err != nil {
		t.Errorf("--format json: %v\n%s", err, stdout)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := bench.ReadReport(f)
	// TimedUpstream lists one model, "m".
	if err != nil || rep.Results[0].Model != "m" || rep.Results[0].Completed != 2 {
		t.Errorf("report %+v, %v: want model m from the server's list", rep, err)
	}
}

func TestParseRate_AcceptsNumbersAndInf(t *testing.T) {
	if v, err := parseRate("inf"); err != nil || !math.IsInf(v, 1) {
		t.Errorf("inf: %v %v", v, err)
	}
	if v, err := parseRate(" 2.5 "); err != nil || v != 2.5 {
		t.Errorf("2.5: %v %v", v, err)
	}
	for _, bad := range []string{"0", "-1", "fast", "nan"} {
		if _, err := parseRate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBenchCLI_WithoutAKeySaysToPassTheKey(t *testing.T) {
	cleanCLIEnv(t)
	t.Setenv("OPENAI_API_KEY", "")
	d := startTestDemo(t)
	// No --model: listing the models needs the key, and the message says so.
	_, _, err := runCLI(t, "bench", "--base-url", d.g.URL(), "--concurrency", "1", "--num-requests", "1", "-q")
	if err == nil || !strings.Contains(err.Error(), "wants an API key") || !strings.Contains(err.Error(), "pass --api-key KEY or set LLMGATE_API_KEY") ||
		strings.Contains(err.Error(), "pass --model") {
		t.Errorf("no key, no model: err = %v", err)
	}
	_, _, err = runCLI(t, "bench", "--base-url", d.g.URL(), "--api-key", "sk-lg-not-a-key", "--concurrency", "1", "--num-requests", "1", "-q")
	if err == nil || !strings.Contains(err.Error(), "refused the API key") {
		t.Errorf("wrong key: err = %v", err)
	}
	// With --model every request fails with 401; the message names the key.
	_, _, err = runCLI(t, "bench", "--base-url", d.g.URL(), "--model", "qwen2.5-7b-instruct", "--concurrency", "1",
		"--num-requests", "1", "--warmup", "0", "-q")
	if err == nil || !strings.Contains(err.Error(), "every request failed") || !strings.Contains(err.Error(), "no API key was sent: pass --api-key KEY or set LLMGATE_API_KEY") {
		t.Errorf("no key, with a model: err = %v", err)
	}
}
