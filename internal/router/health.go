package router

import (
	"context"
	"time"
)

// startHealthCheck runs active checks of a backend on its interval when
// its config asks for them. Two failures in a row mark it down (one could
// be a blip); one success marks it up again, and Options.OnHealthy runs
// after each success.
func (t *Table) startHealthCheck(st *backendState) {
	on, url, interval, timeout := st.b.HealthCheck()
	if !on {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	st.stop, st.done = cancel, make(chan struct{})
	onHealthy := t.opt.OnHealthy
	go func() {
		defer close(st.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		fails := 0
		for {
			pctx, pcancel := context.WithTimeout(ctx, timeout)
			err := st.b.Probe(pctx, url)
			pcancel()
			if ctx.Err() != nil {
				return
			}
			st.checkMu.Lock()
			st.checkAt = t.opt.Now()
			if err != nil {
				st.checkErr = err.Error()
			} else {
				st.checkErr = ""
			}
			st.checkMu.Unlock()
			if err != nil {
				fails++
				if fails == 2 && !st.down.Swap(true) {
					t.log().Warn("backend failing health checks: skipping its deployments", "backend", st.b.Name, "url", url, "err", err)
				}
			} else {
				fails = 0
				st.servingAt.Store(t.opt.Now().UnixNano())
				recovered := st.down.Swap(false)
				if recovered {
					t.log().Info("backend passing health checks again", "backend", st.b.Name)
				}
				if onHealthy != nil {
					hctx, hcancel := context.WithTimeout(ctx, timeout)
					onHealthy(hctx, st.b, recovered)
					hcancel()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// DeploymentHealth is the health of one deployment, for GET
// /v1/models?health=1 and llmgate models.
type DeploymentHealth struct {
	Backend string `json:"backend"`
	// Address is where DNS discovery found this replica of the backend.
	Address       string        `json:"address,omitempty"`
	UpstreamModel string        `json:"upstream_model"`
	Weight        int           `json:"weight"`
	Priority      int           `json:"priority"`
	Healthy       bool          `json:"healthy"`
	Status        string        `json:"status"` // healthy, open, half_open, rate_limited, down
	Outstanding   int64         `json:"outstanding"`
	LatencyMS     float64       `json:"latency_ms,omitempty"`
	RetryInS      float64       `json:"retry_in_s,omitempty"`
	HealthCheck   string        `json:"health_check,omitempty"` // ok, the last check's error, or empty when off
	Breaker       BreakerStatus `json:"breaker"`
	// Queue is the deployment's fair queue in this gateway, when it has
	// one (max_concurrency or queue_when_waiting).
	Queue *QueueHealth `json:"queue,omitempty"`
	// What the deployment's engine said about itself (filled in by the
	// server from what the gateway learned; empty until it is asked):
	// which engine, the model's context length, how prompts are counted,
	// or why they cannot be.
	Engine        string `json:"engine,omitempty"`
	ContextLength int    `json:"context_length,omitempty"`
	Tokenizer     string `json:"tokenizer,omitempty"`
	NoTokenizer   string `json:"no_tokenizer,omitempty"`
	// EngineLoad is what the engine's /metrics said last, for models
	// balanced on it (cache_aware, least_load).
	EngineLoad *EngineLoad `json:"engine_load,omitempty"`
	// PrefixBlocks is how many prompt prefix blocks the gateway
	// remembers sending to the deployment (cache_aware).
	PrefixBlocks int `json:"prefix_blocks,omitempty"`
}

// EngineLoad is an engine's last /metrics reading as the status pages
// show it.
type EngineLoad struct {
	Waiting float64 `json:"waiting"`
	Running float64 `json:"running"`
	// KVCacheUsage is 0–1, absent when the engine does not report it.
	KVCacheUsage *float64 `json:"kv_cache_usage,omitempty"`
	// Fresh: recent enough to route on; otherwise routing uses the
	// gateway's requests in flight.
	Fresh bool    `json:"fresh"`
	AgeS  float64 `json:"age_s,omitempty"`
	Error string  `json:"error,omitempty"`
}

// ModelHealth is the health of one public model.
type ModelHealth struct {
	Model       string             `json:"model"`
	Healthy     bool               `json:"healthy"`
	Balancing   string             `json:"balancing"`
	Fallbacks   []string           `json:"fallbacks,omitempty"`
	Deployments []DeploymentHealth `json:"deployments"`
}

// Health reports every model's deployments, in name order. A model is
// healthy when at least one deployment may take requests now.
func (t *Table) Health() []ModelHealth {
	out := make([]ModelHealth, 0, len(t.names))
	for _, name := range t.names {
		out = append(out, t.ModelHealth(t.routes[name]))
	}
	return out
}

// ModelHealth reports one route's deployments now.
func (t *Table) ModelHealth(r *Route) ModelHealth {
	now := t.opt.Now()
	mh := ModelHealth{Model: r.Model, Balancing: r.Balancing, Fallbacks: r.Fallbacks, Deployments: []DeploymentHealth{}}
	for _, d := range r.Deployments {
		st := d.s.br.status(now)
		dh := DeploymentHealth{Backend: d.Backend.Name, Address: d.Backend.Address, UpstreamModel: d.UpstreamModel, Weight: d.Weight, Priority: d.Priority,
			Outstanding: d.s.outstanding.Load(), LatencyMS: float64(d.s.latency.Load()) / 1e6, Breaker: st}
		dh.Queue = queueHealth(d.s.q)
		if d.Backend.Unavailable != "" {
			dh.HealthCheck = d.Backend.Unavailable
		} else if on, _, _, _ := d.Backend.HealthCheck(); on {
			d.s.be.checkMu.Lock()
			switch {
			case d.s.be.checkAt.IsZero():
				dh.HealthCheck = "pending"
			case d.s.be.checkErr == "":
				dh.HealthCheck = "ok"
			default:
				dh.HealthCheck = d.s.be.checkErr
			}
			d.s.be.checkMu.Unlock()
		}
		switch {
		case d.s.be.down.Load():
			dh.Status = "down"
		case st.RestingFor > 0:
			dh.Status, dh.RetryInS = "rate_limited", st.RestingFor.Seconds()
		case st.State == StateOpen:
			// When it is tried next: the open period's end, or the next
			// recheck of one that awaits its engine.
			dh.Status = StateOpen
			if at := d.s.readyAt(now); !at.IsZero() {
				dh.RetryInS = at.Sub(now).Seconds()
			}
		case st.State == StateHalfOpen:
			dh.Status = StateHalfOpen
		default:
			dh.Status = "healthy"
		}
		if sn, ok := d.EngineLoad(); ok {
			el := &EngineLoad{Waiting: sn.Waiting, Running: sn.Running, Fresh: sn.Fresh, Error: sn.Err}
			if !sn.At.IsZero() {
				el.AgeS = now.Sub(sn.At).Seconds()
			}
			if sn.KVUsage >= 0 && !sn.At.IsZero() {
				kv := sn.KVUsage
				el.KVCacheUsage = &kv
			}
			dh.EngineLoad = el
		}
		if r.WantsPrefix() {
			dh.PrefixBlocks = d.PrefixBlocksHeld()
		}
		dh.Healthy = dh.Status == "healthy" || dh.Status == StateHalfOpen
		mh.Healthy = mh.Healthy || dh.Healthy
		mh.Deployments = append(mh.Deployments, dh)
	}
	return mh
}
