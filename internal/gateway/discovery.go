package gateway

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"llmgate/internal/config"
	"llmgate/internal/dnsdisc"
	"llmgate/internal/metrics"
	"llmgate/internal/router"
)

// startDiscovery sets up DNS discovery (backends with discovery: dns or
// srv) before the first table is built: the names are resolved once, so
// that the first requests find the replicas, and then on each backend's
// interval by a goroutine that rebuilds the table when an answer changes.
func (g *Gateway) startDiscovery(ctx context.Context, cfg *config.Config, opt *Options) {
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmgate_discovery_errors_total",
		Help: "Failed DNS resolutions of a backend with discovery (the last addresses are kept)."}, []string{"backend"})
	_ = g.Metrics.Registry.Register(errs)
	g.disc = dnsdisc.New(dnsdisc.Options{Resolver: opt.Resolver, Logger: g.log, OnChange: g.rediscovered,
		OnError: func(b string) { errs.WithLabelValues(b).Inc() }})
	_ = g.Metrics.GaugeVecFunc("llmgate_discovery_addresses", "Addresses a backend with discovery resolved to (each one a deployment of its models).",
		[]string{"backend"}, func(emit metrics.Emit) {
			for b, addrs := range g.disc.Addresses() {
				emit(float64(len(addrs)), b)
			}
		})
	g.rawCfg = cfg
	g.disc.SetConfig(cfg)
	if dnsdisc.Enabled(cfg) {
		g.disc.Refresh(ctx, true)
	}
}

// newTable builds the routing table of a configuration, each backend with
// discovery expanded into its replicas as of now, and the local engines'
// backends leasing their engines (the config's engine ports are bound:
// engine.New at start, Rebind on a reload).
func (g *Gateway) newTable(cfg *config.Config, prev *router.Table) *router.Table {
	return router.NewWithOptions(g.disc.Expand(cfg), router.Options{Logger: g.log, Previous: prev, OnHealthy: g.engineInfo.Recheck, Leaser: g.leaser,
		EngineKind: func(backend string) string { return string(g.engineInfo.KindOf(backend)) }})
}

// swapTable makes cfg the running configuration: a new table replaces the
// current one, carrying over the backends (and replicas) whose settings
// stay. Requests in flight finish on the table they started with.
func (g *Gateway) swapTable(cfg *config.Config) {
	g.tableMu.Lock()
	defer g.tableMu.Unlock()
	g.rawCfg = cfg
	g.disc.SetConfig(cfg)
	if dnsdisc.Enabled(cfg) {
		// A backend new to discovery is resolved before its models go live.
		g.disc.Refresh(context.Background(), false)
	}
	g.swapLocked()
}

// UseConfig swaps in the routing of cfg, a valid configuration made by
// the program rather than read from a file (a start without a config
// file that found another local engine): new backends join, those whose
// settings did not change keep their state. Engines cannot change.
func (g *Gateway) UseConfig(cfg *config.Config) { g.swapTable(cfg) }

func (g *Gateway) swapLocked() {
	if g.tablesClosed {
		return // the gateway stopped: a late answer must not start health checks again
	}
	old := g.Tables.Load()
	g.Tables.Store(g.newTable(g.rawCfg, old))
	old.Close()
}

// rediscovered rebuilds the table after a discovered backend's addresses
// changed: new replicas join, those gone get no new requests and finish
// the ones they have (their connections close when idle).
func (g *Gateway) rediscovered() {
	g.tableMu.Lock()
	defer g.tableMu.Unlock()
	g.swapLocked()
}
