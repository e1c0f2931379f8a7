package gateway

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"llmgate/internal/console"
	"llmgate/internal/fleet"
	"llmgate/internal/keys"
	"llmgate/internal/metrics"
	"llmgate/internal/policy"
	"llmgate/internal/tracing"
	"llmgate/internal/usage"
)

// startObservability creates the metrics, starts tracing when an OTLP
// endpoint is configured, and puts their middleware in front of opt's:
// tracing outermost (its span covers everything), then the in-flight gauge.
func (g *Gateway) startObservability(ctx context.Context, opt *Options) error {
	g.Metrics = metrics.NewWith(metrics.Options{KeyLabels: g.Config.MetricsKeyLabelsOn()})
	tc := tracing.FromEnv()
	stop, err := tracing.Setup(ctx, tc)
	if err != nil {
		return err
	}
	g.stopTracing = stop
	if tc.On() {
		g.log.Info("tracing on: exporting spans over OTLP/HTTP", "endpoint", firstNonEmpty(tc.TracesEndpoint, tc.Endpoint))
	}
	// The tracing middleware checks at run time whether tracing is on (one
	// atomic load), so a tracer installed later, as tests do, is honoured.
	mw := []func(http.Handler) http.Handler{tracing.Middleware, g.Metrics.Middleware}
	opt.Middleware = append(mw, opt.Middleware...)
	// The Admission (limits, budgets) is wrapped where the server is
	// built, once accounting has set it up, to count refusals.
	return nil
}

// observer is what sees each record after its answer was flushed: the
// metrics, then the access log (unless access_log: off).
func (g *Gateway) observer() policy.Observer {
	if !g.Config.AccessLogOn() {
		return g.Metrics
	}
	al := accessLog{log: g.log}
	return policy.ObserverFunc(func(r usage.Record) {
		g.Metrics.Observe(r)
		al.Observe(r)
	})
}

// mountObservability registers the state gauges and mounts /metrics and
// the console on the server.
func (g *Gateway) mountObservability() {
	m := g.Metrics
	_ = m.GaugeFunc("llmgate_ledger_queue_depth", "Usage records waiting to be written to the database.",
		func() float64 { return float64(g.Ledger.Depth()) })
	_ = m.GaugeVecFunc("llmgate_breaker_state", "Circuit breaker state per model deployment: 1 for the current state.",
		[]string{"model", "backend", "state"}, func(emit metrics.Emit) {
			for _, mh := range g.Tables.Load().Health() {
				for _, d := range mh.Deployments {
					for _, st := range []string{"closed", "open", "half_open"} {
						v := 0.0
						if d.Breaker.State == st {
							v = 1
						}
						emit(v, mh.Model, d.Backend, st)
					}
				}
			}
		})
	_ = m.GaugeVecFunc("llmgate_deployment_healthy", "1 when a model deployment may take requests now (breaker closed or probing, backend up).",
		[]string{"model", "backend"}, func(emit metrics.Emit) {
			for _, mh := range g.Tables.Load().Health() {
				for _, d := range mh.Deployments {
					v := 0.0
					if d.Healthy {
						v = 1
					}
					emit(v, mh.Model, d.Backend)
				}
			}
		})
	engineLoad := func(name, help string, value func(s fleet.Snapshot) (float64, bool)) {
		_ = m.GaugeVecFunc(name, help, []string{"backend"}, func(emit metrics.Emit) {
			g.Tables.Load().EngineLoads(func(backend string, s fleet.Snapshot) {
				if v, ok := value(s); ok {
					emit(v, backend)
				}
			})
		})
	}
	engineLoad("llmgate_engine_requests_waiting", "Requests waiting in an engine's own queue, as its /metrics said last (engines behind cache_aware or least_load models).",
		func(s fleet.Snapshot) (float64, bool) { return s.Waiting, !s.At.IsZero() })
	engineLoad("llmgate_engine_requests_running", "Requests an engine is generating, as its /metrics said last.",
		func(s fleet.Snapshot) (float64, bool) { return s.Running, !s.At.IsZero() })
	engineLoad("llmgate_engine_kv_cache_usage", "Share of an engine's KV cache in use (0-1), as its /metrics said last.",
		func(s fleet.Snapshot) (float64, bool) { return s.KVUsage, !s.At.IsZero() && s.KVUsage >= 0 })
	engineLoad("llmgate_engine_metrics_fresh", "1 while an engine's last /metrics reading is recent enough to route on; 0 when routing falls back to requests in flight.",
		func(s fleet.Snapshot) (float64, bool) {
			if s.Fresh {
				return 1, true
			}
			return 0, true
		})
	g.observeEngines()
	g.observeQueues()
	g.Server.Handle("/metrics", g.metricsHandler())

	if !g.Config.ConsoleOn() {
		return
	}
	g.Console = console.New(console.Options{
		Store:       g.Store,
		Verify:      g.Verifier.Verify,
		MasterHash:  g.Verifier.MasterHash,
		API:         g.Server,
		KeysChanged: g.Verifier.Reload,
		Models:      func() []string { return g.Tables.Load().Models() },
		Health:      func() any { return g.Tables.Load().Health() },
		Engines:     g.engineStates,
		// The keys page shows the spend the running admission enforces,
		// as the admin API's key view does.
		Spend: func(ctx context.Context, k *keys.Key) (float64, float64, error) {
			if g.acct == nil {
				return 0, 0, fmt.Errorf("no limiter")
			}
			return g.acct.adm.KeySpend(ctx, k)
		},
		Stats: func() map[string]float64 {
			return map[string]float64{"in_flight": float64(m.InFlight()), "ledger_queue": float64(g.Ledger.Depth())}
		},
		Logger: g.log,
	})
	g.Server.Handle(console.Prefix, g.Console)
	g.Server.Handle(console.Prefix+"/", g.Console)
}

// metricsHandler serves Prometheus. With metrics_key (LLMGATE_METRICS_KEY)
// set, scrapes must send it as a bearer token (Prometheus'
// authorization.credentials); otherwise /metrics is open like most
// exporters, which is why the gateway listens on loopback by default.
func (g *Gateway) metricsHandler() http.Handler {
	h := g.Metrics.Handler()
	want := g.Config.MetricsKey
	if want == "" {
		return h
	}
	wantHash := keys.HashBytes(want)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		gotHash := keys.HashBytes(strings.TrimSpace(got))
		if !ok || subtle.ConstantTimeCompare(gotHash[:], wantHash[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="llmgate metrics"`)
			http.Error(w, "metrics need 'Authorization: Bearer <metrics_key>' (the metrics_key setting or LLMGATE_METRICS_KEY)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// stopObservability flushes pending spans.
func (g *Gateway) stopObservability(ctx context.Context) error {
	if g.stopTracing == nil {
		return nil
	}
	if err := g.stopTracing(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
