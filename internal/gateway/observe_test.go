package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"llmgate/internal/config"
	"llmgate/internal/keys"
	"llmgate/internal/ledger"
	"llmgate/internal/testenv/testdb"
	"llmgate/internal/tracing"
	"llmgate/internal/usage"
)

// scrape returns the gateway's metric families.
func (e *env) scrape() map[string]*dto.MetricFamily {
	e.t.Helper()
	res := e.do(http.MethodGet, "/metrics", "", "", "Accept", "text/plain")
	if res.status != http.StatusOK {
		e.t.Fatalf("GET /metrics: %d %s", res.status, res.body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(res.body))
	if err != nil {
		e.t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sample returns the value of the series of family name whose labels
// include want (counter, gauge, or a histogram's count).
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.Metric {
		ok := true
		for k, v := range want {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

func TestMetrics_ScrapeAfterTrafficShowsCountersAndHistogramsMoving(t *testing.T) {
	e := startEnv(t)
	before := e.scrape()
	for _, name := range []string{"llmgate_requests_in_flight", "llmgate_ledger_queue_depth", "llmgate_breaker_state", "llmgate_deployment_healthy"} {
		if before[name] == nil {
			t.Errorf("%s missing before any traffic", name)
		}
	}
	if v := sample(before, "llmgate_breaker_state", map[string]string{"model": "qwen", "backend": "vllm", "state": "closed"}); v != 1 {
		t.Errorf("breaker of qwen/vllm: closed=%v, want 1", v)
	}

	if r := e.do(http.MethodPost, "/v1/chat/completions", testMaster, chatBody("qwen", false, "")); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodPost, "/v1/chat/completions", testMaster, chatBody("qwen", true, "")); r.status != 200 {
		t.Fatalf("stream: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodPost, "/v1/chat/completions", testMaster, chatBody("err-500", false, "")); r.status != 502 {
		t.Fatalf("err-500: %d %s", r.status, r.body)
	}

	// In flight: hold a stream open and scrape while it runs.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/chat/completions", strings.NewReader(chatBody("endless", true, "")))
	req.Header.Set("Authorization", "Bearer "+testMaster)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	during := e.scrape()
	cancel()
	resp.Body.Close()
	if v := sample(during, "llmgate_requests_in_flight", nil); v < 1 {
		t.Errorf("llmgate_requests_in_flight = %v while a stream is open, want >= 1", v)
	}

	after := e.scrape()
	qwen200 := map[string]string{"model": "qwen", "backend": "vllm", "key": "master", "status": "200"}
	if d := sample(after, "llmgate_requests_total", qwen200) - sample(before, "llmgate_requests_total", qwen200); d != 2 {
		t.Errorf("llmgate_requests_total{qwen,200} moved by %v, want 2", d)
	}
	if d := sample(after, "llmgate_requests_total", map[string]string{"model": "err-500", "status": "502"}); d != 1 {
		t.Errorf("llmgate_requests_total{err-500,502} = %v, want 1", d)
	}
	// The fake reports 11 prompt tokens per request and 2 (JSON) + 3 (stream) completion tokens.
	if v := sample(after, "llmgate_tokens_total", map[string]string{"model": "qwen", "type": "prompt"}); v != 22 {
		t.Errorf("prompt tokens for qwen = %v, want 22", v)
	}
	if v := sample(after, "llmgate_tokens_total", map[string]string{"model": "qwen", "type": "completion"}); v != 5 {
		t.Errorf("completion tokens for qwen = %v, want 5", v)
	}
	if v := sample(after, "llmgate_time_to_first_token_seconds", map[string]string{"model": "qwen"}); v != 2 {
		t.Errorf("TTFT histogram count for qwen = %v, want 2", v)
	}
	if v := sample(after, "llmgate_request_duration_seconds", map[string]string{"model": "qwen", "code": "2xx"}); v != 2 {
		t.Errorf("latency histogram count for qwen 2xx = %v, want 2", v)
	}
	if v := sample(after, "llmgate_request_duration_seconds", map[string]string{"model": "err-500", "code": "5xx"}); v != 1 {
		t.Errorf("latency histogram count for err-500 5xx = %v, want 1", v)
	}
	h := after["llmgate_time_to_first_token_seconds"]
	if h == nil || h.GetType() != dto.MetricType_HISTOGRAM || len(h.Metric[0].Histogram.Bucket) < 10 {
		t.Errorf("TTFT is not a histogram with buckets: %v", h)
	}
}

func TestMetrics_KeyRequiredWhenLLMGATEMetricsKeySet(t *testing.T) {
	t.Setenv("LLMGATE_METRICS_KEY", "scrape-secret")
	e := startEnv(t)
	if r := e.do(http.MethodGet, "/metrics", "", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without the key: %d, want 401", r.status)
	}
	if r := e.do(http.MethodGet, "/metrics", "scrape-secret", ""); r.status != http.StatusOK || !strings.Contains(r.body, "llmgate_requests_in_flight") {
		t.Fatalf("GET /metrics with the key: %d", r.status)
	}
}

// tracedUpstream is an OpenAI-compatible backend that records the
// traceparent header of each request.
type tracedUpstream struct {
	*httptest.Server
	mu           sync.Mutex
	traceparents []string
	requestIDs   []string
}

func TestTracing_RequestAndAttemptSpansShareATraceThatReachesTheBackend(t *testing.T) {
	up := &tracedUpstream{}
	up.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") { // the gateway asking for context lengths
			http.NotFound(w, r)
			return
		}
		up.mu.Lock()
		up.traceparents = append(up.traceparents, r.Header.Get("Traceparent"))
		up.requestIDs = append(up.requestIDs, r.Header.Get("X-Request-Id"))
		up.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}))
	defer up.Close()
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  traced: {url: %s/v1}\nmodels:\n  m: {backend: traced}\n", up.URL)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = testdb.SQLite(t, t.TempDir(), "llmgate.db")
	cfg.Listen = "127.0.0.1:0"

	exp := tracetest.NewInMemoryExporter()
	stop := tracing.Install(keepSpans{exp}, tracing.Config{ServiceName: "llmgate-test"})
	g, err := Start(context.Background(), Options{Config: cfg, MasterKey: testMaster,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LedgerOptions: ledger.Options{Interval: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	e := &env{t: t, g: g, base: g.URL()}
	// The caller's trace is continued: the request span's parent is theirs.
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := e.do(http.MethodPost, "/v1/chat/completions", testMaster, chatBody("m", false, ""),
		"Traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01", "X-Request-Id", "trace-test-1")
	if r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	if got := r.header.Get("X-Request-Id"); got != "trace-test-1" {
		t.Errorf("response x-request-id %q, want the client's trace-test-1", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The answer is flushed before the request's bookkeeping ends; closing
	// the gateway waits for the handler, whose span ends last.
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := stop(ctx); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	var server, client *tracetest.SpanStub
	for i := range spans {
		switch spans[i].Name {
		case "POST /v1/chat/completions":
			server = &spans[i]
		case "upstream traced":
			client = &spans[i]
		}
	}
	if server == nil || client == nil {
		t.Fatalf("spans %v: want the request span and the attempt span", spanNames(spans))
	}
	if got := server.SpanContext.TraceID().String(); got != callerTrace {
		t.Errorf("request span trace %s, want the caller's %s", got, callerTrace)
	}
	if client.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Errorf("attempt span's parent is %s, want the request span %s", client.Parent.SpanID(), server.SpanContext.SpanID())
	}
	attrs := map[string]string{}
	for _, a := range append(server.Attributes, client.Attributes...) {
		attrs[string(a.Key)] = a.Value.String()
	}
	for k, want := range map[string]string{"llmgate.request_id": "trace-test-1", "llmgate.model": "m", "llmgate.backend": "traced",
		"http.response.status_code": "200", "gen_ai.usage.output_tokens": "1"} {
		if attrs[k] != want {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], want)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.requestIDs) != 1 || up.requestIDs[0] != "trace-test-1" {
		t.Errorf("backend saw x-request-id %v, want the client's trace-test-1", up.requestIDs)
	}
	if len(up.traceparents) != 1 || !strings.Contains(up.traceparents[0], callerTrace+"-"+client.SpanContext.SpanID().String()) {
		t.Errorf("backend saw traceparent %v, want trace %s with the attempt span as parent", up.traceparents, callerTrace)
	}
}

// keepSpans keeps the recorded spans past the provider's shutdown, which
// flushes the batcher and then shuts the exporter down (the in-memory
// exporter forgets its spans at shutdown).
type keepSpans struct{ *tracetest.InMemoryExporter }

func (keepSpans) Shutdown(context.Context) error { return nil }

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// loggedGW starts a gateway in front of a fake vLLM whose log (JSON) is
// kept; read it with mu held once the gateway is closed.
func loggedGW(t *testing.T) (*env, *sync.Mutex, *strings.Builder) {
	up := newFakeVLLM(t)
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf("backends:\n  vllm: {url: %s}\nmodels:\n  qwen: {backend: vllm, upstream_model: up-a}\n", up.URL)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = testdb.SQLite(t, t.TempDir(), "llmgate.db")
	cfg.Listen = "127.0.0.1:0"
	mu, buf := &sync.Mutex{}, &strings.Builder{}
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	g, err := Start(context.Background(), Options{Config: cfg, MasterKey: testMaster, Logger: slog.New(slog.NewJSONHandler(w, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	return &env{t: t, g: g, base: g.URL()}, mu, buf
}

func TestAccessLog_OneJSONLinePerRequestWithRequestIDModelAndTokens(t *testing.T) {
	e, mu, buf := loggedGW(t)
	g := e.g
	r := e.do(http.MethodPost, "/v1/chat/completions", testMaster, chatBody("qwen", false, ""), "X-Request-Id", "log-test-1")
	if r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	// The client sees how the time before the answer divided.
	if st := r.header.Get("Server-Timing"); !strings.HasPrefix(st, "gateway;dur=") || !strings.Contains(st, ", backend;dur=") {
		t.Errorf("Server-Timing %q, want the gateway's and the backend's share", st)
	}
	// The answer is flushed before the access log line is written: closing
	// the gateway waits for the handler and flushes the log.
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var line string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `"msg":"request"`) {
			line = l
		}
	}
	for _, want := range []string{`"request_id":"log-test-1"`, `"model":"qwen"`, `"backend":"vllm"`, `"status":200`, `"prompt_tokens":11`, `"completion_tokens":2`, `"latency_ms":`, `"overhead_ms":`} {
		if !strings.Contains(line, want) {
			t.Errorf("access log line %q lacks %s", line, want)
		}
	}
	// The gateway's own share is measured, never zero (it decoded, routed
	// and encoded the request).
	if _, v, _ := strings.Cut(line, `"overhead_ms":`); strings.HasPrefix(v, "0,") || strings.HasPrefix(v, "0}") {
		t.Errorf("access log line %q: overhead_ms is 0", line)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestMetrics_LimiterRefusalsAreCounted(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	_, secret, err := CreateKey(ctx, e.g.Store, keys.Key{Name: "one-per-minute", RPM: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.g.Verifier.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	statuses := []int{}
	for i := 0; i < 3; i++ {
		statuses = append(statuses, e.do(http.MethodPost, "/v1/chat/completions", secret, chatBody("qwen", false, "")).status)
	}
	if statuses[0] != 200 || statuses[2] != http.StatusTooManyRequests {
		t.Fatalf("statuses %v, want 200 then 429 for a 1 rpm key", statuses)
	}
	if v := sample(e.scrape(), "llmgate_limiter_refusals_total", map[string]string{"status": "429"}); v < 1 {
		t.Fatalf("llmgate_limiter_refusals_total{status=429} = %v after a refusal, want >= 1", v)
	}
}

// TestAccessLog_RequestsRefusedBeforeRoutingAreLoggedToo: a 401, an
// unknown model and an unknown route (404), invalid JSON (400) and a wrong
// method (405) each get one line with the status, the reason code and the
// key id ("none" before a key was verified), never the key.
func TestAccessLog_RequestsRefusedBeforeRoutingAreLoggedToo(t *testing.T) {
	e, mu, buf := loggedGW(t)
	g := e.g
	const badKey = "sk-lg-not-a-key-at-all-123"
	e.do(http.MethodPost, "/v1/chat/completions", badKey, chatBody("qwen", false, ""), "X-Request-Id", "al-401")
	e.do(http.MethodPost, "/v1/chat/completions", testMaster, chatBody("nope", false, ""), "X-Request-Id", "al-404-model")
	e.do(http.MethodPost, "/v1/chat/completions", testMaster, `{"model":"qwen",,}`, "X-Request-Id", "al-400")
	e.do(http.MethodGet, "/v1/chat/completions", testMaster, "", "X-Request-Id", "al-405")
	e.do(http.MethodPost, "/v1/v1/chat/completions", testMaster, "{}", "X-Request-Id", "al-404-route")
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	lines := map[string]string{}
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `"msg":"request"`) {
			for _, id := range []string{"al-401", "al-404-model", "al-400", "al-405", "al-404-route"} {
				if strings.Contains(l, `"request_id":"`+id+`"`) {
					lines[id] += l
				}
			}
		}
	}
	for id, want := range map[string][]string{
		"al-401":       {`"status":401`, `"error":"invalid_api_key"`, `"key_id":"none"`},
		"al-404-model": {`"status":404`, `"error":"model_not_found"`, `"key_id":"master"`},
		"al-400":       {`"status":400`, `"error":"invalid_json"`, `"key_id":"master"`},
		"al-405":       {`"status":405`, `"error":"method_not_allowed"`},
		"al-404-route": {`"status":404`, `"error":"unknown_route"`, `"path":"/v1/v1/chat/completions"`},
	} {
		line := lines[id]
		if strings.Count(line, `"msg":"request"`) != 1 {
			t.Errorf("%s: want one access line, got %q", id, line)
			continue
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: access line %q lacks %s", id, line, w)
			}
		}
		if strings.Contains(line, badKey) || strings.Contains(line, testMaster) {
			t.Errorf("%s: a key leaked into the log: %s", id, line)
		}
	}
}

// A record whose prompt the backend partly served from its prefix cache
// says how much on its access line; one without cached tokens says nothing.
func TestAccessLog_CachedTokensWhenTheBackendReportedThem(t *testing.T) {
	var buf strings.Builder
	a := accessLog{log: slog.New(slog.NewJSONHandler(&buf, nil))}
	a.Observe(usage.Record{ID: "r1", Model: "qwen3", Status: 200, PromptTokens: 11604, CachedTokens: 11590})
	a.Observe(usage.Record{ID: "r2", Model: "qwen3", Status: 200, PromptTokens: 11554})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"cached_tokens":11590`) || strings.Contains(lines[1], "cached_tokens") {
		t.Fatalf("access lines:\n%s", buf.String())
	}
}

func TestMetrics_FairQueuePerDeployment(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.Models["qwen"].Deployments[0].MaxConcurrency = 3 })
	if r := e.do(http.MethodPost, "/v1/chat/completions", testMaster, chatBody("qwen", true, "")); r.status != 200 {
		t.Fatalf("stream: %d %s", r.status, r.body)
	}
	fams := e.scrape()
	dep := map[string]string{"backend": "vllm", "upstream_model": "up-a"}
	if v := sample(fams, "llmgate_queue_max_concurrency", dep); v != 3 {
		t.Errorf("llmgate_queue_max_concurrency = %v, want 3", v)
	}
	for _, name := range []string{"llmgate_queue_depth", "llmgate_queue_in_flight", "llmgate_queue_waits_total", "llmgate_queue_wait_seconds_total",
		"llmgate_queue_timeouts_total", "llmgate_queue_abandoned_total"} {
		if fams[name] == nil {
			t.Errorf("%s missing", name)
		} else if v := sample(fams, name, dep); v != 0 {
			t.Errorf("%s = %v after one request that did not wait, want 0", name, v)
		}
	}
	if v := sample(fams, "llmgate_queue_depth", map[string]string{"backend": "dead"}); fams["llmgate_queue_depth"] != nil && len(fams["llmgate_queue_depth"].Metric) != 1 {
		t.Errorf("deployments without a queue have queue series (%v): %v", v, fams["llmgate_queue_depth"].Metric)
	}
}
