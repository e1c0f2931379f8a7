package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/fleet"
	"llmgate/internal/provider"
	"llmgate/internal/redact"
)

// Hint is what engine-aware balancing knows of a request: the chained
// hashes of its prompt's blocks (fleet.PrefixBlocks) for cache_aware, and
// its session key for session. The zero Hint balances on load alone.
type Hint struct {
	Prefix  []uint64
	Session string
	// first is 1 + the index in the route's deployments of the one Pick
	// named (0: none), which ForwardHint then tries first.
	first int
}

// WantsPrefix reports whether the route's balancing reads the request's
// prefix hashes.
func (r *Route) WantsPrefix() bool { return r.Balancing == config.BalanceCacheAware }

// HintWants reports what of a request the route or one of its fallback
// models balances on: its prefix hashes, its session key. Callers
// compute only that.
func (r *Route) HintWants() (prefix, session bool) {
	prefix, session = r.WantsPrefix(), r.WantsSession()
	for _, f := range r.fallbacks {
		prefix = prefix || f.WantsPrefix()
		session = session || f.WantsSession()
	}
	return prefix, session
}

// WantsSession reports whether the route's balancing reads the request's
// session key.
func (r *Route) WantsSession() bool { return r.Balancing == config.BalanceSession }

// engineAware reports whether a balancing reads the engines' metrics.
func engineAware(balancing string) bool {
	return balancing == config.BalanceCacheAware || balancing == config.BalanceLeastLoad
}

// scrapesMetrics reports whether a backend is an engine whose /metrics
// tell its queue: vLLM, SGLang (with --enable-metrics) and llama.cpp
// (with --metrics). Cloud APIs and engines without such metrics are
// balanced on the gateway's own requests in flight.
func scrapesMetrics(b *provider.Backend, learned string) bool {
	kind := b.Engine
	if kind == "" {
		kind = learned // what the engine said of itself, for a backend without a preset
	}
	switch kind {
	case "vllm", "sglang", "llamacpp":
		return true
	}
	return false
}

// learnedKind is the engine the gateway learned b runs ("" unknown).
func (t *Table) learnedKind(b *provider.Backend) string {
	if t.opt.EngineKind == nil || b.Engine != "" {
		return ""
	}
	return t.opt.EngineKind(b.Name)
}

// EngineLearned starts reading the metrics of backend, which the gateway
// learned runs kind, when an engine-aware model of this table uses it
// and its config named no engine: preset (those are read from the
// start). It does nothing on a closed table, or for a backend a newer
// table took over (that one read EngineKind when it was built).
func (t *Table) EngineLearned(backend, kind string) {
	interval, ok := t.loadWanted[backend]
	if !ok {
		return
	}
	st := t.bstates[backend]
	if st == nil || !scrapesMetrics(st.b, kind) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.transferred[backend] {
		return
	}
	t.startScraper(st, interval)
}

// metricsURL is /metrics on the backend's origin (engines serve it there,
// outside /v1).
func metricsURL(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base + "/metrics"
	}
	u.Path, u.RawPath, u.RawQuery = "/metrics", "", ""
	return u.String()
}

// maxMetricsBytes bounds one /metrics answer: vLLM's is ~100 KB with its
// histograms.
const maxMetricsBytes = 4 << 20

// startScraper starts reading st's engine metrics unless it already is.
func (t *Table) startScraper(st *backendState, interval time.Duration) {
	if st.scraper.Load() != nil {
		return
	}
	b := st.b
	states, _ := t.Leaser(b.Name).(EngineStates)
	get := func(ctx context.Context) ([]byte, error) {
		if states != nil {
			if s, ready := states.EngineState(b.Name); !ready {
				return nil, fmt.Errorf("engine %s: not read until it is ready (llmgate starts it on a request for its model)", s)
			}
		}
		// BaseURL and the credentials are the backend's; the error says
		// which URL failed, never the key.
		u := metricsURL(b.BaseURL)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		b.Authorize(req)
		resp, err := b.HTTPClient().Do(req)
		if err != nil {
			// The reading's error is shown on the status pages: no
			// password of a URL's user information in it.
			return nil, errors.New(redact.Secrets(fmt.Sprintf("GET %s: %v", u, b.Classify(ctx, err))))
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			return nil, errors.New(redact.Secrets(fmt.Sprintf("GET %s answered %d", u, resp.StatusCode)))
		}
		return io.ReadAll(io.LimitReader(resp.Body, maxMetricsBytes))
	}
	// A backend carried over from the serving table may be read by its
	// requests meanwhile: the scraper is published atomically.
	sc := fleet.NewScraper(get, st.inflight.Load, interval, t.opt.Now)
	sc.OnScrape(func() {
		if qs := st.waitQueues.Load(); qs != nil {
			for _, q := range *qs {
				q.Kick()
			}
		}
	})
	if st.scraper.CompareAndSwap(nil, sc) {
		sc.Start()
	}
}

// EngineLoad is what the engine behind a deployment last reported on its
// /metrics, for the fair queue and the status pages: requests waiting and
// running, KV-cache use (-1 unknown), and whether the reading is fresh
// (at most three scrape intervals old). ok is false when the deployment's
// engine is not scraped (not an engine-aware model, or not an engine).
func (d Deployment) EngineLoad() (load fleet.Snapshot, ok bool) {
	if d.s == nil {
		return fleet.Snapshot{}, false
	}
	sc := d.s.be.scraper.Load()
	if sc == nil {
		return fleet.Snapshot{}, false
	}
	return sc.Snapshot(), true
}

// PrefixBlocksHeld is the number of prefix blocks the gateway remembers
// sending to the deployment (for the status pages and tests).
func (d Deployment) PrefixBlocksHeld() int {
	if d.s == nil || d.s.rec == nil {
		return 0
	}
	return d.s.rec.Len()
}

// candidates fills cands[i] for each deployment index in group.
func (t *Table) candidates(deps []Deployment, group []int, hint *Hint, cands []fleet.Candidate) {
	for _, i := range group {
		d := deps[i]
		c := fleet.Candidate{Weight: d.Weight, InFlight: d.s.be.inflight.Load(), ID: d.s.id}
		if sc := d.s.be.scraper.Load(); sc != nil {
			c.Engine = sc.Snapshot()
		}
		if len(hint.Prefix) > 0 && d.s.rec != nil {
			c.Match = d.s.rec.Match(hint.Prefix)
		}
		cands[i] = c
	}
}

// orderFleet orders a priority group by an engine-aware strategy.
func (t *Table) orderFleet(r *Route, group []int, hint *Hint) {
	deps := r.Deployments
	var stack [maxAttempts]fleet.Candidate
	var cands []fleet.Candidate
	if len(deps) <= len(stack) {
		cands = stack[:len(deps)]
	} else {
		cands = make([]fleet.Candidate, len(deps))
	}
	t.candidates(deps, group, hint, cands)
	switch r.Balancing {
	case config.BalanceSession:
		if hint.Session == "" {
			rotate(group, rand.IntN(len(group)))
			fleet.LeastLoad(cands, group)
			return
		}
		fleet.Session(cands, group, fleet.HashString(hint.Session))
	case config.BalanceCacheAware:
		rotate(group, rand.IntN(len(group)))
		fleet.CacheAware(cands, group, t.loadFactor)
	default:
		rotate(group, rand.IntN(len(group)))
		fleet.LeastLoad(cands, group)
	}
}

// remember records that the deployment is being sent the prefix: the
// engine prefills it now, so the next request sharing it should follow
// even before this one ends. The record follows the engine's reported KV
// capacity when it reports one.
func (t *Table) remember(d Deployment, prefix []uint64) (held int) {
	held = d.s.rec.Match(prefix)
	if sc := d.s.be.scraper.Load(); sc != nil {
		if tokens := sc.Snapshot().CacheTokens; tokens > 0 {
			if want := fleet.BlocksFor(tokens); want != d.s.rec.Nominal() {
				d.s.rec.SetCap(want)
			}
		}
	}
	d.s.rec.Add(prefix)
	return held
}

// minConfirmBlocks is the smallest predicted prefix worth checking
// against the engine's count: below it a chat template's variations
// blur the comparison.
const minConfirmBlocks = 4

// ConfirmPrefix compares the prefix the gateway predicted the deployment
// held when it chose it (PrefixHeld, of blocks in all) with what the
// engine reported serving from its cache (cachedTokens of promptTokens,
// from the answer's usage). Far less than predicted means the engine
// evicts sooner than the record thinks, which then forgets sooner too
// (fleet.Record.Miss); a confirmed prediction lets it grow back.
func (d Deployment) ConfirmPrefix(blocks, cachedTokens, promptTokens int) {
	if d.s == nil || d.s.rec == nil || d.prefixHeld < minConfirmBlocks || blocks <= 0 || promptTokens <= 0 {
		return
	}
	predicted := min(d.prefixHeld, blocks) * promptTokens / blocks
	if cachedTokens*2 < predicted {
		d.s.rec.Miss()
	} else {
		d.s.rec.Hit()
	}
}

// PrefixHeld is how many leading blocks of the request's prompt the
// gateway predicted the deployment held when it chose it (cache_aware).
func (d Deployment) PrefixHeld() int { return d.prefixHeld }

// SessionHeader is the request header that names a conversation under
// session balancing (routing.session_header).
func (t *Table) SessionHeader() string { return t.sessionHeader }

// EngineLoads calls fn with each scraped engine backend's last reading,
// in backend name order.
func (t *Table) EngineLoads(fn func(backend string, s fleet.Snapshot)) {
	names := make([]string, 0, len(t.bstates))
	for name, st := range t.bstates {
		if st.scraper.Load() != nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		fn(name, t.bstates[name].scraper.Load().Snapshot())
	}
}
