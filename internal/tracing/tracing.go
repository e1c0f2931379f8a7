// Package tracing sets up OpenTelemetry tracing for the gateway: one server
// span per HTTP request and one client span per upstream attempt, exported
// over OTLP/HTTP. It is off unless an endpoint is configured (the standard
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and
// when off the request path pays one atomic load.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of llmgate's spans.
const Name = "llmgate"

var (
	enabled atomic.Bool
	tracer  atomic.Pointer[trace.Tracer]
)

// Enabled reports whether spans are being recorded.
func Enabled() bool { return enabled.Load() }

// Config selects where spans go.
type Config struct {
	// Endpoint is the OTLP/HTTP base URL (e.g. http://127.0.0.1:4318); the
	// exporter posts to Endpoint + "/v1/traces". TracesEndpoint, when set,
	// is the full URL and wins. Both empty means tracing is off.
	Endpoint       string
	TracesEndpoint string
	// ServiceName defaults to "llmgate".
	ServiceName string
	// SampleRatio of new traces to keep (0 or 1 = all). Requests whose
	// caller sampled them (traceparent) follow the caller's decision.
	SampleRatio float64
	// Headers are sent with every export (e.g. an API key for a hosted
	// collector); OTEL_EXPORTER_OTLP_HEADERS is also honoured.
	Headers map[string]string
}

// FromEnv reads the standard OpenTelemetry variables. LLMGATE_TRACING=off
// disables tracing even when an endpoint is set.
func FromEnv() Config {
	c := Config{
		Endpoint:       strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")),
		TracesEndpoint: strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")),
		ServiceName:    strings.TrimSpace(os.Getenv("OTEL_SERVICE_NAME")),
	}
	if r, err := strconv.ParseFloat(os.Getenv("OTEL_TRACES_SAMPLER_ARG"), 64); err == nil {
		c.SampleRatio = r
	}
	switch strings.ToLower(os.Getenv("LLMGATE_TRACING")) {
	case "off", "0", "false", "no":
		c.Endpoint, c.TracesEndpoint = "", ""
	}
	return c
}

// On reports whether the configuration asks for tracing.
func (c Config) On() bool { return c.Endpoint != "" || c.TracesEndpoint != "" }

// Setup starts exporting spans as configured and installs the W3C trace
// context propagator. It returns a shutdown function that flushes pending
// spans; when tracing is off it does nothing and shutdown is a no-op.
func Setup(ctx context.Context, c Config) (shutdown func(context.Context) error, err error) {
	if !c.On() {
		return func(context.Context) error { return nil }, nil
	}
	url := c.TracesEndpoint
	if url == "" {
		url = strings.TrimRight(c.Endpoint, "/") + "/v1/traces"
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(url), otlptracehttp.WithTimeout(10 * time.Second)}
	if len(c.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(c.Headers))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", url, err)
	}
	return Install(exp, c), nil
}

// Install makes spans go to exp (tests pass an in-memory exporter) and
// returns the function that flushes and stops it.
func Install(exp sdktrace.SpanExporter, c Config) func(context.Context) error {
	name := c.ServiceName
	if name == "" {
		name = "llmgate"
	}
	sampler := sdktrace.ParentBased(sdktrace.AlwaysSample())
	if c.SampleRatio > 0 && c.SampleRatio < 1 {
		sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))
	}
	res := resource.NewSchemaless(attribute.String("service.name", name))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t := tp.Tracer(Name)
	tracer.Store(&t)
	enabled.Store(true)
	return func(ctx context.Context) error {
		enabled.Store(false)
		return tp.Shutdown(ctx)
	}
}

func getTracer() trace.Tracer {
	if t := tracer.Load(); t != nil {
		return *t
	}
	return otel.Tracer(Name)
}

// statusRecorder captures the status code for the request span.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush keeps streaming working through the wrapper.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Middleware opens one server span per request, continuing the caller's
// trace when it sent traceparent. Scrapes and console assets are not
// traced: only API paths (/v1/...) and admin calls are.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !enabled.Load() || !traced(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := getTracer().Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(ctx))
		st := rec.status
		if st == 0 {
			st = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", st))
		if id := w.Header().Get("X-Request-Id"); id != "" {
			span.SetAttributes(attribute.String("llmgate.request_id", id))
		}
		if st >= 500 {
			span.SetStatus(codes.Error, http.StatusText(st))
		}
	})
}

func traced(path string) bool {
	return strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, "/admin/") || strings.HasPrefix(path, "/ui/api/")
}

// Attempt describes an upstream attempt for its span.
type Attempt struct {
	Model, Backend, UpstreamModel, KeyID, RequestID string
	Stream                                          bool
}

// StartAttempt opens a client span for one attempt at a backend, as a child
// of the request's span, and tags the request span with the model and key.
// end takes the attempt's outcome. When tracing is off it returns ctx and
// a no-op end without allocating.
func StartAttempt(ctx context.Context, a Attempt) (context.Context, func(status, promptTokens, completionTokens int, err error)) {
	if !enabled.Load() {
		return ctx, noEnd
	}
	parent := trace.SpanFromContext(ctx)
	parent.SetAttributes(attribute.String("llmgate.model", a.Model), attribute.String("llmgate.key_id", a.KeyID))
	ctx, span := getTracer().Start(ctx, "upstream "+a.Backend, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("llmgate.backend", a.Backend),
			attribute.String("gen_ai.request.model", a.UpstreamModel),
			attribute.String("llmgate.model", a.Model),
			attribute.String("llmgate.request_id", a.RequestID),
			attribute.Bool("llmgate.stream", a.Stream)))
	return ctx, func(status, prompt, completion int, err error) {
		if status > 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
		}
		if prompt > 0 || completion > 0 {
			span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", prompt), attribute.Int("gen_ai.usage.output_tokens", completion))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

func noEnd(int, int, int, error) {}

// Inject writes the current trace context (traceparent) into upstream
// request headers, so engines that trace (vLLM --otlp-traces-endpoint)
// join the gateway's trace. It does nothing when tracing is off.
func Inject(ctx context.Context, h http.Header) {
	if enabled.Load() {
		otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
	}
}
