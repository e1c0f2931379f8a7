package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a minimal OTLP/HTTP collector: it decodes every export
// and keeps the span names by trace id.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
	spans map[string][]string // trace id (hex) -> span names
	kinds map[string]int32
}

func newReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{spans: map[string][]string{}, kinds: map[string]int32{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.paths = append(rc.paths, r.URL.Path)
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					id := string(sp.TraceId)
					rc.spans[id] = append(rc.spans[id], sp.Name)
					rc.kinds[sp.Name] = int32(sp.Kind)
				}
			}
		}
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func TestSetup_ExportsRequestAndAttemptSpansOverOTLPHTTP(t *testing.T) {
	rc := newReceiver(t)
	shutdown, err := Setup(context.Background(), Config{Endpoint: rc.URL})
	if err != nil {
		t.Fatal(err)
	}
	if !Enabled() {
		t.Fatal("tracing should be on after Setup with an endpoint")
	}
	var upstreamTraceparent string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamTraceparent = r.Header.Get("Traceparent")
	}))
	defer upstream.Close()
	h := Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, end := StartAttempt(r.Context(), Attempt{Model: "qwen", Backend: "vllm-a", UpstreamModel: "Qwen/Qwen3-8B", RequestID: "req_1"})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, upstream.URL, nil)
		Inject(ctx, req.Header)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		end(200, 12, 34, err)
		w.Header().Set("X-Request-Id", "req_1")
		w.WriteHeader(http.StatusOK)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if Enabled() {
		t.Fatal("tracing should be off after shutdown")
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.paths) == 0 || rc.paths[0] != "/v1/traces" {
		t.Fatalf("exports went to %v, want /v1/traces", rc.paths)
	}
	if len(rc.spans) != 1 {
		t.Fatalf("got %d traces, want one trace holding both spans: %v", len(rc.spans), rc.spans)
	}
	for id, names := range rc.spans {
		if len(names) != 2 {
			t.Fatalf("trace has spans %v, want the request span and the attempt span", names)
		}
		want := map[string]bool{"POST /v1/chat/completions": true, "upstream vllm-a": true}
		for _, n := range names {
			if !want[n] {
				t.Errorf("unexpected span %q", n)
			}
		}
		if len(upstreamTraceparent) < 55 || upstreamTraceparent[3:35] != hexID(id) {
			t.Errorf("upstream traceparent %q does not carry trace %s", upstreamTraceparent, hexID(id))
		}
	}
	if rc.kinds["POST /v1/chat/completions"] != 2 || rc.kinds["upstream vllm-a"] != 3 { // SERVER, CLIENT
		t.Errorf("span kinds %v, want server=2 and client=3", rc.kinds)
	}
}

func hexID(raw string) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 2*len(raw))
	for i := 0; i < len(raw); i++ {
		b = append(b, digits[raw[i]>>4], digits[raw[i]&15])
	}
	return string(b)
}

func TestSetup_OffWithoutEndpointAndFromEnvHonoursLLMGATETracingOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("LLMGATE_TRACING", "off")
	if c := FromEnv(); c.On() {
		t.Fatalf("LLMGATE_TRACING=off should disable tracing, got %+v", c)
	}
	t.Setenv("LLMGATE_TRACING", "")
	if c := FromEnv(); !c.On() || c.Endpoint != "http://127.0.0.1:4318" {
		t.Fatalf("OTEL_EXPORTER_OTLP_ENDPOINT should turn tracing on, got %+v", c)
	}
	stop, err := Setup(context.Background(), Config{})
	if err != nil || Enabled() {
		t.Fatalf("Setup without endpoint: err %v, enabled %v; want off", err, Enabled())
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Off: attempts cost nothing and inject nothing.
	ctx, end := StartAttempt(context.Background(), Attempt{Backend: "b"})
	end(200, 1, 1, nil)
	h := http.Header{}
	Inject(ctx, h)
	if len(h) != 0 {
		t.Fatalf("Inject with tracing off wrote %v", h)
	}
}

func BenchmarkStartAttempt_Off(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, end := StartAttempt(ctx, Attempt{Backend: "b", Model: "m"})
		end(200, 1, 1, nil)
	}
}
