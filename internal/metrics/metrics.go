// Package metrics exposes the gateway's Prometheus metrics (all prefixed
// llmgate_). It stays off the hot path: per-request figures come from the
// one usage.Record the server already builds (a ledger decorator), in-flight
// requests from a middleware, and state (ledger depth, breakers, engines)
// from functions evaluated only when Prometheus scrapes.
//
// Requests, tokens and cost are labelled with the key id ("key_..."; the
// master key is "master"), so anyone who can read /metrics sees which keys
// exist and how much each one uses - never a key's name or secret. Options
// KeyLabels false (metrics_key_labels: false) drops that label.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"llmgate/internal/apierror"
	"llmgate/internal/dnsdisc"
	"llmgate/internal/keys"
	"llmgate/internal/policy"
	"llmgate/internal/usage"
)

// Buckets for time to first token and request latency, in seconds. LLM
// latencies span milliseconds (cached, small models) to minutes (long
// generations), so the buckets are wider than Prometheus' defaults.
var (
	TTFTBuckets    = []float64{0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30}
	LatencyBuckets = []float64{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}
	// OverheadBuckets are for the gateway's own share of a request:
	// tens of microseconds when all is well.
	OverheadBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1}
)

// Metrics holds the gateway's collectors and their registry.
type Metrics struct {
	// Registry holds every llmgate_ collector plus the Go and process
	// collectors; other packages may register their own collectors here.
	Registry *prometheus.Registry

	requests   *prometheus.CounterVec
	tokens     *prometheus.CounterVec
	cost       *prometheus.CounterVec
	ttft       *prometheus.HistogramVec
	latency    *prometheus.HistogramVec
	overhead   *prometheus.HistogramVec
	inflight   prometheus.Gauge
	refusals   *prometheus.CounterVec
	inflightN  atomic.Int64
	keyLabels  bool
	stateMu    sync.Mutex
	stateNames map[string]bool

	// series caches the children of one label combination, so a request
	// costs one map lookup under a read lock instead of five label hashes.
	seriesMu sync.RWMutex
	series   map[seriesKey]*children
}

type seriesKey struct {
	model, backend, key, endpoint string
	status                        int
}

type children struct {
	requests, prompt, completion, cached, cost prometheus.Counter
	ttft, latency, overhead                    prometheus.Observer
}

// maxSeries bounds the cache; beyond it (an attack with endless model
// names is refused earlier by routing, but keys and statuses multiply)
// records are observed without caching.
const maxSeries = 10000

func (m *Metrics) children(r *usage.Record, key string) *children {
	// A replica found by DNS counts under its configured backend: pod
	// addresses come and go, and the series would stay (the health and
	// breaker gauges show each replica now).
	backend := dnsdisc.Configured(r.Backend)
	k := seriesKey{r.Model, backend, key, r.Endpoint, r.Status}
	m.seriesMu.RLock()
	c := m.series[k]
	m.seriesMu.RUnlock()
	if c != nil {
		return c
	}
	st := strconv.Itoa(r.Status)
	c = &children{
		ttft:     m.ttft.WithLabelValues(r.Model, backend),
		latency:  m.latency.WithLabelValues(r.Model, backend, statusClass(r.Status)),
		overhead: m.overhead.WithLabelValues(r.Model, backend, r.Endpoint),
	}
	if m.keyLabels {
		c.requests = m.requests.WithLabelValues(r.Model, backend, key, r.Endpoint, st)
		c.prompt = m.tokens.WithLabelValues(r.Model, backend, key, "prompt")
		c.completion = m.tokens.WithLabelValues(r.Model, backend, key, "completion")
		c.cached = m.tokens.WithLabelValues(r.Model, backend, key, "cached")
		c.cost = m.cost.WithLabelValues(r.Model, backend, key)
	} else {
		c.requests = m.requests.WithLabelValues(r.Model, backend, r.Endpoint, st)
		c.prompt = m.tokens.WithLabelValues(r.Model, backend, "prompt")
		c.completion = m.tokens.WithLabelValues(r.Model, backend, "completion")
		c.cached = m.tokens.WithLabelValues(r.Model, backend, "cached")
		c.cost = m.cost.WithLabelValues(r.Model, backend)
	}
	m.seriesMu.Lock()
	if len(m.series) < maxSeries {
		m.series[k] = c
	}
	m.seriesMu.Unlock()
	return c
}

// Options configures NewWith.
type Options struct {
	// KeyLabels labels requests, tokens and cost with the key id.
	KeyLabels bool
}

// New returns Metrics with key labels, registered on a fresh registry.
func New() *Metrics { return NewWith(Options{KeyLabels: true}) }

// NewWith returns Metrics registered on a fresh registry.
func NewWith(opt Options) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry(), stateNames: map[string]bool{}, series: map[seriesKey]*children{}, keyLabels: opt.KeyLabels}
	reqLabels, tokLabels, costLabels := []string{"model", "backend", "key", "endpoint", "status"}, []string{"model", "backend", "key", "type"}, []string{"model", "backend", "key"}
	reqHelp := "Model requests served, by public model, backend, key id, endpoint and HTTP status."
	tokHelp := "Tokens by model, backend, key id and type (prompt, completion, cached); estimated counts included."
	costHelp := "Cost in US dollars by model, backend (the one that served: a fallback's shows here) and key id, as priced by the gateway."
	if !m.keyLabels {
		reqLabels, tokLabels, costLabels = []string{"model", "backend", "endpoint", "status"}, []string{"model", "backend", "type"}, []string{"model", "backend"}
		reqHelp = "Model requests served, by public model, backend, endpoint and HTTP status (per-key labels are off)."
		tokHelp = "Tokens by model, backend and type (prompt, completion, cached); estimated counts included (per-key labels are off)."
		costHelp = "Cost in US dollars by model and backend, as priced by the gateway (per-key labels are off)."
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmgate_requests_total", Help: reqHelp}, reqLabels)
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmgate_tokens_total", Help: tokHelp}, tokLabels)
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmgate_cost_usd_total", Help: costHelp}, costLabels)
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "llmgate_time_to_first_token_seconds",
		Help:    "Time from request arrival to the first token (streams) or the first response byte, successful requests only.",
		Buckets: TTFTBuckets,
	}, []string{"model", "backend"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "llmgate_request_duration_seconds",
		Help:    "Time from request arrival to the end of the response, by model, backend and status class (2xx, 4xx, 5xx).",
		Buckets: LatencyBuckets,
	}, []string{"model", "backend", "code"})
	m.overhead = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "llmgate_overhead_seconds",
		Help: "The gateway's own time in a request, from its body read until the answer's head was handed to the HTTP server " +
			"(the time to first byte it added), beyond waiting for backends, fair queues, engine starts and retry pauses; by model, backend and endpoint.",
		Buckets: OverheadBuckets,
	}, []string{"model", "backend", "endpoint"})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "llmgate_requests_in_flight",
		Help: "API requests (/v1/...) being served right now.",
	})
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmgate_limiter_refusals_total",
		Help: "Requests refused before forwarding by limits or budgets, by reason code and HTTP status; fallback_<code>: a fallback model skipped for its own limits.",
	}, []string{"reason", "status"})
	m.Registry.MustRegister(m.requests, m.tokens, m.cost, m.ttft, m.latency, m.overhead, m.inflight, m.refusals,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry, EnableOpenMetrics: true})
}

// Observe folds one finished request into the counters and histograms.
func (m *Metrics) Observe(r usage.Record) {
	key := r.KeyID
	switch {
	case !m.keyLabels:
		key = ""
	case key == "":
		key = "master"
	}
	c := m.children(&r, key)
	c.requests.Inc()
	if r.PromptTokens > 0 {
		c.prompt.Add(float64(r.PromptTokens))
	}
	if r.CompletionTokens > 0 {
		c.completion.Add(float64(r.CompletionTokens))
	}
	if r.CachedTokens > 0 {
		c.cached.Add(float64(r.CachedTokens))
	}
	if r.CostUSD > 0 {
		c.cost.Add(r.CostUSD)
	}
	if r.Status/100 == 2 && r.TTFT > 0 {
		c.ttft.Observe(r.TTFT.Seconds())
	}
	c.latency.Observe(r.Latency.Seconds())
	if r.Overhead > 0 {
		c.overhead.Observe(r.Overhead.Seconds())
	}
}

func statusClass(s int) string {
	switch {
	case s >= 200 && s < 600:
		return strconv.Itoa(s/100) + "xx"
	case s == 0:
		return "none"
	}
	return "other"
}

var _ policy.Observer = (*Metrics)(nil)

// Middleware counts API requests in flight. Only /v1/ paths count, so
// scrapes, health checks and the console do not distort the figure.
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Path) < 4 || r.URL.Path[:4] != "/v1/" {
			next.ServeHTTP(w, r)
			return
		}
		m.inflight.Inc()
		m.inflightN.Add(1)
		defer func() {
			m.inflight.Dec()
			m.inflightN.Add(-1)
		}()
		next.ServeHTTP(w, r)
	})
}

// InFlight returns the API requests being served now (for the console).
func (m *Metrics) InFlight() int64 { return m.inflightN.Load() }

// Refused counts one request refused by a limiter or budget.
func (m *Metrics) Refused(reason string, status int) {
	m.refusals.WithLabelValues(reason, strconv.Itoa(status)).Inc()
}

// admission counts refusals of the wrapped Admission.
type admission struct {
	m    *Metrics
	next policy.Admission
}

func (a admission) Admit(ctx context.Context, req policy.AdmitRequest) (policy.Ticket, error) {
	t, err := a.next.Admit(ctx, req)
	if err != nil {
		a.refused("", err)
	}
	return t, err
}

// refused counts a refusal under its error code, after prefix.
func (a admission) refused(prefix string, err error) {
	reason, status := "refused", 429
	var ae *apierror.Error
	if errors.As(err, &ae) {
		reason, status = ae.Code, ae.Status
		if reason == "" {
			reason = string(ae.Kind)
		}
	}
	a.m.Refused(prefix+reason, status)
}

// AdmitFallback passes a fallback model's admission through (none when
// the wrapped Admission has none), counting its refusals too.
func (a admission) AdmitFallback(ctx context.Context, req policy.AdmitRequest) (func(int64), error) {
	fa, ok := a.next.(policy.FallbackAdmission)
	if !ok {
		return nil, nil
	}
	release, err := fa.AdmitFallback(ctx, req)
	if err != nil {
		a.refused("fallback_", err) // the request goes on to the next fallback, if any
	}
	return release, err
}

// Precheck passes a pre-body check through, counting its refusals too.
func (a admission) Precheck(p keys.Principal) error {
	pc, ok := a.next.(policy.Prechecker)
	if !ok {
		return nil
	}
	err := pc.Precheck(p)
	if err != nil {
		reason, status := "refused", 429
		var ae *apierror.Error
		if errors.As(err, &ae) {
			reason, status = ae.Code, ae.Status
		}
		a.m.Refused(reason, status)
	}
	return err
}

// Admission decorates the server's Admission so that every refusal (rate
// limit, concurrency, budget) counts in llmgate_limiter_refusals_total
// under its error code. A nil next returns nil: no limits, no refusals.
func (m *Metrics) Admission(next policy.Admission) policy.Admission {
	if next == nil {
		return nil
	}
	return admission{m: m, next: next}
}

// GaugeFunc registers a gauge evaluated at scrape time, such as the
// ledger queue depth. The name should start with llmgate_.
func (m *Metrics) GaugeFunc(name, help string, fn func() float64) error {
	return m.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
}

// Emit reports one sample of a labelled gauge; label values follow the
// order of the labels given to GaugeVecFunc.
type Emit func(value float64, labelValues ...string)

// GaugeVecFunc registers a labelled gauge whose samples are produced at
// scrape time by fn (breaker states per deployment, engine states). fn
// must be safe to call concurrently with serving.
func (m *Metrics) GaugeVecFunc(name, help string, labels []string, fn func(emit Emit)) error {
	return m.vecFunc(name, help, labels, prometheus.GaugeValue, fn)
}

// CounterVecFunc registers a labelled counter whose samples are produced
// at scrape time by fn from totals kept elsewhere (a fair queue's waits
// and time-outs). fn must be safe to call concurrently with serving.
func (m *Metrics) CounterVecFunc(name, help string, labels []string, fn func(emit Emit)) error {
	return m.vecFunc(name, help, labels, prometheus.CounterValue, fn)
}

func (m *Metrics) vecFunc(name, help string, labels []string, vt prometheus.ValueType, fn func(emit Emit)) error {
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	if m.stateNames[name] {
		return errors.New("metric " + name + " is already registered")
	}
	c := &funcCollector{desc: prometheus.NewDesc(name, help, labels, nil), fn: fn, vt: vt}
	if err := m.Registry.Register(c); err != nil {
		return err
	}
	m.stateNames[name] = true
	return nil
}

type funcCollector struct {
	desc *prometheus.Desc
	fn   func(emit Emit)
	vt   prometheus.ValueType
}

func (c *funcCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *funcCollector) Collect(ch chan<- prometheus.Metric) {
	c.fn(func(v float64, lv ...string) {
		if m, err := prometheus.NewConstMetric(c.desc, c.vt, v, lv...); err == nil {
			ch <- m
		}
	})
}
