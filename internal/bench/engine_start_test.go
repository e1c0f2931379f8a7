package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// startingGateway is a gateway whose engine is down: the requests numbered
// in waitOn (counting POSTs from 1) wait `start` for it, with the
// keep-alive comments llmgate sends meanwhile, then get the answer.
func startingGateway(up http.Handler, start time.Duration, waitOn ...int64) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, `{"status":"ok"}`)
			return
		}
		if r.Method != http.MethodPost {
			up.ServeHTTP(w, r)
			return
		}
		i := n.Add(1)
		for _, k := range waitOn {
			if i == k {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, ": waiting for engine qwen (0s)\n\n")
				w.(http.Flusher).Flush()
				time.Sleep(start)
				_, _ = io.WriteString(w, ": waiting for engine qwen (1s)\n\n")
				w.(http.Flusher).Flush()
				up.ServeHTTP(headerSent{w}, r)
				return
			}
		}
		up.ServeHTTP(w, r)
	})
}

// headerSent drops the status an already-started answer writes again.
type headerSent struct{ http.ResponseWriter }

func (headerSent) WriteHeader(int) {}

func (h headerSent) Flush() { h.ResponseWriter.(http.Flusher).Flush() }

// loadingEngine answers GET /health with 503 until ready, as llama.cpp's
// server does while it loads its model.
func loadingEngine(up http.Handler, ready time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if time.Now().Before(ready) {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`)
				return
			}
			_, _ = io.WriteString(w, `{"status":"ok"}`)
			return
		}
		up.ServeHTTP(w, r)
	})
}

func TestEngineStart_IsReportedPerTargetAndKeptOutOfTheLatencies(t *testing.T) {
	up := &TimedUpstream{T1: 5 * time.Millisecond, T2: time.Millisecond, Chunks: 4, PromptTokens: 10}
	const start = 600 * time.Millisecond
	// The gateway's engine starts for bench's first request, and again
	// (say, after its idle time-out) for the 3rd measured request.
	gw := httptest.NewServer(startingGateway(up, start, 1, 4))
	defer gw.Close()
	engine := httptest.NewServer(loadingEngine(up, time.Now().Add(start)))
	defer engine.Close()
	targets := []Target{{Name: "engine", BaseURL: engine.URL + "/v1", Model: "m"}, {Name: "gateway", BaseURL: gw.URL + "/v1", Model: "m"}}
	for i := range targets {
		if err := targets[i].Normalize(func(string) string { return "" }); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Targets: targets, Concurrencies: []int{1}, NumRequests: 6, Warmup: 0, Burstiness: 1,
		Workload: Workload{InputLen: 8, OutputLen: 4}, Request: RequestOptions{Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]EngineStart{}
	for _, e := range rep.EngineStarts {
		got[e.Target+" "+e.When] = e
	}
	if e := got["engine before the first cell"]; e.Source != EngineStartHealth || e.Seconds < 0.3 {
		t.Errorf("the loading engine's start: %+v (all: %+v)", e, rep.EngineStarts)
	}
	if e := got["gateway before the first cell"]; e.Source != EngineStartGateway || e.Seconds < start.Seconds() {
		t.Errorf("the gateway's engine start: %+v (all: %+v)", e, rep.EngineStarts)
	}
	if e := got["gateway in c=1"]; e.Requests != 1 || e.Seconds < start.Seconds() {
		t.Errorf("the restart in the cell: %+v (all: %+v)", e, rep.EngineStarts)
	}
	for _, c := range rep.Results {
		// Every request completed; the one that waited is in no latency.
		if c.Completed != 6 || c.Failed != 0 {
			t.Errorf("%s: completed %d failed %d %v", c.Target, c.Completed, c.Failed, c.ErrorSamples)
		}
		if c.TTFT.Max >= start.Seconds()*1000 || c.E2EL.Max >= start.Seconds()*1000 {
			t.Errorf("%s: TTFT max %.0f ms, E2EL max %.0f ms: the engine start leaked into the latencies", c.Target, c.TTFT.Max, c.E2EL.Max)
		}
		if want := map[string]int{"engine": 0, "gateway": 1}[c.Target]; c.EngineWaits != want || c.TTFT.Count != 6-want {
			t.Errorf("%s: %d engine waits, %d TTFT samples", c.Target, c.EngineWaits, c.TTFT.Count)
		}
	}
	var out bytes.Buffer
	if err := WriteTable(&out, rep); err != nil || strings.Count(out.String(), "engine start ") != 3 ||
		!strings.Contains(out.String(), "kept out of the latency figures") {
		t.Errorf("table: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
}
