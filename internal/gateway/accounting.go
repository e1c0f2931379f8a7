package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"llmgate/internal/admin"
	"llmgate/internal/admit"
	"llmgate/internal/keys"
	"llmgate/internal/ledger"
	"llmgate/internal/limit"
	"llmgate/internal/usage"
)

// accounting is the gateway's limits, budgets, prices, retention and admin
// API (issue 5), kept apart from the core wiring in gateway.go.
type accounting struct {
	lim    limit.Limiter
	adm    *admit.Admission
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// withSpool gives the ledger its on-disk journal (spool_dir), which makes
// each record durable before its answer's last bytes, unless the caller
// chose one. A spool that cannot be opened (another gateway holds it, the
// directory is not writable) stops the start.
func (g *Gateway) withSpool(o ledger.Options) (ledger.Options, error) {
	if o.Spool != nil {
		return o, nil
	}
	sp, err := ledger.OpenSpool(g.Config.Spool())
	if err != nil {
		// Without its journal a gateway would answer requests whose usage
		// records a crash can lose: refuse to start instead. (The error
		// names the directory and what to do.)
		return o, err
	}
	g.adoptLegacySpool(sp)
	o.Spool, o.SpoolSync = sp, g.Config.SpoolFsync
	return o, nil
}

// adoptLegacySpool moves the unsent records of the spool directory
// earlier versions used by default (llmgate-spool beside the SQLite file,
// shared by every database of that folder) into this gateway's spool,
// where the ledger drains them, when they are this database's: every key
// they name is one it knows. Records of another database stay where they
// are, and so do those of a directory a running gateway still holds; the
// log says so. Nothing is lost either way.
func (g *Gateway) adoptLegacySpool(sp *ledger.Spool) {
	legacy := g.Config.LegacySpool()
	if legacy == "" {
		return
	}
	ours := func(keyIDs map[string]bool) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		list, err := g.Store.ListKeys(ctx)
		if err != nil {
			return false
		}
		known := map[string]bool{"master": true}
		for _, k := range list {
			known[k.ID] = true
		}
		for id := range keyIDs {
			if !known[id] {
				return false
			}
		}
		return true
	}
	n, err := sp.Adopt(legacy, ours)
	switch {
	case errors.Is(err, ledger.ErrForeignSpool):
		g.log.Warn("the old default usage spool holds records of another database's keys: left there; they are written when the gateway of that database starts",
			"dir", legacy)
	case errors.Is(err, ledger.ErrSpoolBusy):
		g.log.Warn("the old default usage spool is in use by another gateway process: its records stay there for it", "dir", legacy)
	case err != nil:
		g.log.Warn("the old default usage spool could not be taken over; its records stay there", "dir", legacy, "err", err)
	case n > 0:
		g.log.Info("usage records left in the old default spool are written from this gateway's spool", "from", legacy, "to", sp.Dir(), "records", n)
	}
}

// startAccounting builds the limiter (Redis when configured) and the
// admission (limits, budgets, prices), seeds budgets from the ledger before
// serving, and starts budget re-seeding and retention.
func (g *Gateway) startAccounting(ctx context.Context, opt *Options) error {
	cfg := g.Config
	var lim limit.Limiter
	var shared *limit.Redis
	if cfg.Redis != "" {
		// An unreachable Redis is not an error: the limiter starts on this
		// replica's local shares (or without limits, redis_fail_open) and
		// joins Redis when it answers.
		r, err := limit.NewRedis(ctx, cfg.Redis, limit.RedisOptions{Prefix: cfg.RedisPrefix, FailOpen: cfg.RedisFailOpen,
			Replicas: cfg.RedisReplicas, Logger: g.log})
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		lim, shared = r, r
	} else {
		lim = limit.NewMemory()
	}
	models := make(map[string]admit.ModelPolicy, len(cfg.Models))
	for name, m := range cfg.Models {
		models[name] = admit.ModelPolicy{InputPrice: m.InputPrice, OutputPrice: m.OutputPrice, CachedInputPrice: m.CachedInputPrice,
			RPM: m.RPM, TPM: m.TPM, MaxConc: m.MaxConcurrency}
	}
	a := admit.New(admit.Options{Limiter: lim, Models: models, Logger: g.log})
	if shared != nil {
		// The limiter reads the database after the ledger has stored what
		// it holds (at most 2 s): spend and requests settled just before
		// a Redis restart are then in the figures it re-seeds from, however
		// long the ledger's batches wait.
		led := g.Ledger
		flush := func(ctx context.Context) {
			if led == nil {
				return
			}
			fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			// Refused or late: spend settled since this replica's last
			// re-seed is then missing from the figures until the next
			// minute's seeding (docs/operations.md names this exception).
			_ = led.Flush(fctx)
		}
		// After a Redis restart or outage the limiter re-seeds every budget
		// from the ledger at once, not at the next tick below...
		shared.SetLedger(func(ctx context.Context) ([]limit.BudgetSeed, error) {
			flush(ctx)
			return a.BudgetSeeds(ctx, g.Store, g.Store)
		})
		// ... and rebuilds the RPM and TPM buckets from the ledger's last
		// minute, so that a restart hands out no fresh minute.
		if rr, ok := g.Store.(usage.RateReader); ok {
			shared.SetRates(func(ctx context.Context, since time.Time) ([]limit.RateSeed, error) {
				flush(ctx)
				return a.RateSeeds(ctx, g.Store, rr, since)
			})
		}
		g.limiterGauges(shared)
	}
	if err := a.SeedBudgets(ctx, g.Store, g.Store); err != nil {
		g.log.Warn("budget spend not loaded from the ledger; will retry", "err", err)
	}
	actx, cancel := context.WithCancel(context.Background())
	acct := &accounting{lim: lim, adm: a, cancel: cancel}
	g.acct = acct
	if opt.Admission == nil {
		opt.Admission = a
	}
	acct.wg.Add(1)
	go func() {
		defer acct.wg.Done()
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-actx.Done():
				return
			case <-t.C:
			}
			if err := a.SeedBudgets(actx, g.Store, g.Store); err != nil && actx.Err() == nil {
				g.log.Warn("budget re-seeding from the ledger failed", "err", err)
			}
		}
	}()
	if ret, ok := g.Store.(usage.Retainer); ok && cfg.Retention > 0 {
		acct.wg.Add(1)
		go func() {
			defer acct.wg.Done()
			usage.RunRetention(actx, ret, time.Duration(cfg.Retention), time.Hour, g.log)
		}()
	}
	return nil
}

// limiterGauges tells Prometheus whether the shared limiter is in use and
// how many replicas share it.
func (g *Gateway) limiterGauges(r *limit.Redis) {
	if g.Metrics == nil {
		return
	}
	_ = g.Metrics.GaugeFunc("llmgate_limiter_redis_shared", "1 while limits use Redis's shared counters; 0 while Redis is unreachable and this replica enforces its local share (or none, redis_fail_open).",
		func() float64 {
			if r.Shared() {
				return 1
			}
			return 0
		})
	_ = g.Metrics.GaugeFunc("llmgate_limiter_replicas", "Replicas this one counts as sharing the limits (redis_replicas, else live replicas seen through Redis); its local share while Redis is unreachable is 1/this.",
		func() float64 { return float64(r.Replicas()) })
}

// mountAdmin mounts the admin API (master key only). Its key view shows
// the spend the running admission enforces.
func (g *Gateway) mountAdmin() {
	st, ok := g.Store.(admin.Store)
	if !ok {
		return
	}
	var spend func(context.Context, *keys.Key) (float64, float64, error)
	if g.acct != nil {
		spend = g.acct.adm.KeySpend
	}
	h := admin.New(admin.Options{Store: st, Auth: g.Server.Authenticate, Reload: g.Verifier.Reload, Logger: g.log, Spend: spend})
	for _, p := range admin.Paths {
		g.Server.Handle(p, h)
	}
}

// stopAccounting stops background work and closes the limiter; call it
// after the HTTP server has drained, so every ticket was settled.
func (g *Gateway) stopAccounting() {
	if g.acct == nil {
		return
	}
	g.acct.cancel()
	g.acct.wg.Wait()
	_ = g.acct.lim.Close()
}

// Admission returns the gateway's built-in admission (limits, budgets,
// prices); nil before Start.
func (g *Gateway) Admission() *admit.Admission {
	if g.acct == nil {
		return nil
	}
	return g.acct.adm
}
