package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"llmgate/internal/apierror"
	"llmgate/internal/policy"
	"llmgate/internal/usage"
)

func TestObserve_CountsEveryRecord(t *testing.T) {
	m := New()
	m.Observe(usage.Record{Model: "qwen", Backend: "a", KeyID: "key_1", Endpoint: "chat", Status: 200, PromptTokens: 10, CompletionTokens: 4,
		CachedTokens: 2, CostUSD: 0.5, TTFT: 80 * time.Millisecond, Latency: time.Second, Overhead: 40 * time.Microsecond})
	m.Observe(usage.Record{Model: "qwen", Backend: "a", KeyID: "key_1", Endpoint: "chat", Status: 502, Latency: 2 * time.Second})
	if v := testutil.ToFloat64(m.requests.WithLabelValues("qwen", "a", "key_1", "chat", "502")); v != 1 {
		t.Errorf("requests{502} = %v", v)
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("qwen", "a", "key_1", "chat", "200")); v != 1 {
		t.Errorf("requests{200} = %v", v)
	}
	if v := testutil.ToFloat64(m.tokens.WithLabelValues("qwen", "a", "key_1", "cached")); v != 2 {
		t.Errorf("cached tokens = %v", v)
	}
	if v := testutil.ToFloat64(m.cost.WithLabelValues("qwen", "a", "key_1")); v != 0.5 {
		t.Errorf("cost = %v", v)
	}
	// TTFT counts successes only; latency counts both, by status class.
	if n := testutil.CollectAndCount(m.ttft); n != 1 {
		t.Errorf("TTFT series = %d, want 1", n)
	}
	if n := testutil.CollectAndCount(m.latency); n != 2 {
		t.Errorf("latency series = %d, want 2 (2xx and 5xx)", n)
	}
	// The gateway's own share: a record that carries it (not the second).
	want := `
# HELP llmgate_overhead_seconds The gateway's own time in a request, from its body read until the answer's head was handed to the HTTP server (the time to first byte it added), beyond waiting for backends, fair queues, engine starts and retry pauses; by model, backend and endpoint.
# TYPE llmgate_overhead_seconds histogram
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="5e-05"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="0.0001"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="0.00025"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="0.0005"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="0.001"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="0.0025"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="0.005"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="0.01"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="0.025"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="0.1"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="1"} 1
llmgate_overhead_seconds_bucket{backend="a",endpoint="chat",model="qwen",le="+Inf"} 1
llmgate_overhead_seconds_sum{backend="a",endpoint="chat",model="qwen"} 4e-05
llmgate_overhead_seconds_count{backend="a",endpoint="chat",model="qwen"} 1
`
	if err := testutil.CollectAndCompare(m.overhead, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

type refuser struct{ err error }

func (r refuser) Admit(context.Context, policy.AdmitRequest) (policy.Ticket, error) {
	return nil, r.err
}

func TestAdmission_CountsRefusalsByCode(t *testing.T) {
	m := New()
	if m.Admission(nil) != nil {
		t.Fatal("wrapping no Admission must stay nil, so the server skips admission")
	}
	a := m.Admission(refuser{apierror.New(http.StatusTooManyRequests, apierror.KindRateLimit, "rpm_exceeded", "slow down")})
	_, _ = a.Admit(context.Background(), policy.AdmitRequest{})
	_, _ = a.Admit(context.Background(), policy.AdmitRequest{})
	b := m.Admission(refuser{errors.New("plain")})
	_, _ = b.Admit(context.Background(), policy.AdmitRequest{})
	if v := testutil.ToFloat64(m.refusals.WithLabelValues("rpm_exceeded", "429")); v != 2 {
		t.Errorf("rpm_exceeded refusals = %v, want 2", v)
	}
	if v := testutil.ToFloat64(m.refusals.WithLabelValues("refused", "429")); v != 1 {
		t.Errorf("untyped refusals = %v, want 1", v)
	}
}

func TestMiddleware_CountsOnlyAPIRequestsInFlight(t *testing.T) {
	m := New()
	var during int64
	h := m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { during = m.InFlight() }))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/chat/completions", nil))
	if during != 1 || m.InFlight() != 0 {
		t.Fatalf("in flight during %d after %d, want 1 and 0", during, m.InFlight())
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil))
	if during != 0 {
		t.Fatalf("a scrape counted as in flight")
	}
}

func TestGaugeVecFunc_ScrapesCurrentValuesAndRefusesDuplicates(t *testing.T) {
	m := New()
	state := "closed"
	err := m.GaugeVecFunc("llmgate_test_state", "test", []string{"state"}, func(emit Emit) {
		for _, s := range []string{"closed", "open"} {
			v := 0.0
			if s == state {
				v = 1
			}
			emit(v, s)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.GaugeVecFunc("llmgate_test_state", "again", []string{"state"}, func(Emit) {}); err == nil {
		t.Fatal("a second registration of the same name must fail")
	}
	state = "open"
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `llmgate_test_state{state="open"} 1`) {
		t.Fatalf("scrape does not show the current state:\n%s", rec.Body.String())
	}
}

// BenchmarkObserve measures what the metrics add per request.
func BenchmarkObserve(b *testing.B) {
	m := New()
	rec := usage.Record{Model: "qwen", Backend: "a", KeyID: "key_1", Endpoint: "chat", Status: 200, PromptTokens: 100, CompletionTokens: 50,
		TTFT: 80 * time.Millisecond, Latency: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(rec)
	}
}

func TestMetrics_KeyLabelsOffShowNoKeyIDs(t *testing.T) {
	scrape := func(m *Metrics) string {
		m.Observe(usage.Record{Model: "qwen", Backend: "a", KeyID: "key_secretive", Endpoint: "chat", Status: 200, PromptTokens: 3, CompletionTokens: 2, CostUSD: 0.25})
		m.Observe(usage.Record{Model: "qwen", Backend: "a", KeyID: "key_other", Endpoint: "chat", Status: 200, PromptTokens: 3, CompletionTokens: 2, CostUSD: 0.25})
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	on := scrape(New())
	if !strings.Contains(on, `key="key_secretive"`) || !strings.Contains(on, `key="key_other"`) {
		t.Fatalf("key labels on by default, but the scrape has no key ids:\n%s", on)
	}
	off := scrape(NewWith(Options{KeyLabels: false}))
	if strings.Contains(off, "key_secretive") || strings.Contains(off, `key="`) {
		t.Fatalf("key labels off, but the scrape names keys:\n%s", off)
	}
	// The two keys' requests are counted together.
	for _, want := range []string{
		`llmgate_requests_total{backend="a",endpoint="chat",model="qwen",status="200"} 2`,
		`llmgate_tokens_total{backend="a",model="qwen",type="prompt"} 6`,
		`llmgate_cost_usd_total{backend="a",model="qwen"} 0.5`,
	} {
		if !strings.Contains(off, want) {
			t.Errorf("scrape without key labels lacks %s:\n%s", want, off)
		}
	}
}

// Requests served by replicas found through DNS count under the configured
// backend: pods coming and going leave no trail of series.
func TestObserve_ReplicasCountUnderTheirBackend(t *testing.T) {
	m := New()
	m.Observe(usage.Record{Model: "qwen", Backend: "pool@10.0.0.1:8000", KeyID: "key_1", Endpoint: "chat", Status: 200})
	m.Observe(usage.Record{Model: "qwen", Backend: "pool@10.0.0.2:8000", KeyID: "key_1", Endpoint: "chat", Status: 200})
	if v := testutil.ToFloat64(m.requests.WithLabelValues("qwen", "pool", "key_1", "chat", "200")); v != 2 {
		t.Fatalf("requests under pool = %v, want 2", v)
	}
	if n := testutil.CollectAndCount(m.requests); n != 1 {
		t.Fatalf("%d request series, want 1", n)
	}
}
