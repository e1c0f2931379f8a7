// Package router maps public model names to the deployments that serve
// them and decides, per request, which deployment to try: balancing among
// equals, retrying another deployment or a fallback model while nothing has
// reached the client, and keeping a circuit breaker and optional active
// health checks per deployment.
package router

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/dialect"
	"llmgate/internal/fairq"
	"llmgate/internal/fleet"
	"llmgate/internal/provider"
)

// Deployment is one place a public model is served: a backend and the model
// name that backend knows it by.
type Deployment struct {
	Backend       *provider.Backend
	UpstreamModel string
	Weight        int
	Priority      int
	// QueueTimeout bounds a request's wait in the deployment's fair queue.
	QueueTimeout time.Duration
	s            *depState
	// route is the route the deployment belongs to: the requested
	// model's, or a fallback model's when Forward fell back.
	route *Route
	// prefixHeld is set on the copy an attempt gets (PrefixHeld).
	prefixHeld int
}

// Route returns the route the deployment belongs to: the requested
// model's route, or — for a deployment Forward reached by falling back —
// the fallback model's. It is nil for the zero Deployment.
func (d Deployment) Route() *Route { return d.route }

// ObserveLatency reports the time the deployment took to answer with
// headers; lowest_latency balancing uses a moving average of it.
func (d Deployment) ObserveLatency(dur time.Duration) {
	if d.s == nil {
		return
	}
	old := d.s.latency.Load()
	if old == 0 {
		d.s.latency.Store(int64(dur))
		return
	}
	// EWMA with alpha 1/4: recent enough to follow a backend that slows
	// down, smooth enough not to flap on one slow request.
	d.s.latency.Store(old + (int64(dur)-old)/4)
}

// Route is a public model and its deployments, sorted by priority.
type Route struct {
	Model       string
	Deployments []Deployment
	Fallbacks   []string
	Balancing   string
	// ContextWindow is the configured context length (0: learn it from
	// the backend); FitOutput lowers output limits that do not fit it.
	ContextWindow int
	FitOutput     bool
	// Chat shapes the requests translated for the model (reasoning
	// mapping, system messages).
	Chat      dialect.ChatOptions
	fallbacks []*Route
	dialects  []dialect.Dialect
	queued    bool // a deployment has a fair queue
}

// Queued reports whether a deployment of the route (not its fallbacks) has
// a fair queue, so that the caller need not give Forward a lane otherwise.
func (r *Route) Queued() bool { return r.queued }

// FallbackRoutes returns the routes of the model's fallbacks, in the
// order Forward tries them (nil without fallbacks). Callers must not
// modify it.
func (r *Route) FallbackRoutes() []*Route { return r.fallbacks }

// Dialects returns the distinct backend dialects of the route's
// deployments (computed when the table is built).
func (r *Route) Dialects() []dialect.Dialect { return r.dialects }

// Options tune a Table beyond its configuration.
type Options struct {
	// Logger receives breaker transitions, health changes and fallbacks;
	// nil means slog.Default() at the time of logging.
	Logger *slog.Logger
	// Now is the clock (tests inject a fake one); nil means time.Now.
	Now func() time.Time
	// Breaker tunes the circuit breakers; zero means DefaultBreaker.
	Breaker BreakerConfig
	// Backoff is the first pause between attempts, doubled per attempt with
	// jitter and capped at 20 times itself; zero means 20ms.
	Backoff time.Duration
	// Previous, when set, is the table being replaced: backends whose
	// settings did not change keep their connection pools, breakers and
	// health checks. Close the previous table afterwards.
	Previous *Table
	// OnHealthy, when set, runs after each passed active health check of
	// a backend, before the next check is due; recovered says the backend
	// had been marked down. The gateway asks the backend's engine about
	// itself again there (a restarted engine may have another context
	// length). ctx ends with the check's time-out or when the check stops.
	OnHealthy func(ctx context.Context, b *provider.Backend, recovered bool)
	// Leaser, when set, holds the local engines behind some backends:
	// requests to those take a lease from it first (lease.go).
	Leaser Leaser
	// EngineKind, when set, says what engine the gateway learned a backend
	// runs ("vllm", "sglang", "llamacpp", … or ""): a backend without an
	// engine: preset behind an engine-aware model is read like one once
	// it is known (see also Table.EngineLearned).
	EngineKind func(backend string) string
}

// Table is an immutable routing table built from one configuration. A config
// reload builds a new Table and swaps it atomically.
type Table struct {
	routes   map[string]*Route
	names    []string
	backends map[string]*provider.Backend
	bstates  map[string]*backendState
	deps     map[string]*depState
	opt      Options
	breaker  *BreakerConfig
	// loadFactor bounds cache_aware's affinity; cacheTokens is the KV
	// capacity assumed for an engine that does not report its own.
	loadFactor    float64
	cacheTokens   int
	sessionHeader string
	leased        map[string]bool // backends whose requests take a lease from opt.Leaser
	// loadWanted are the backends an engine-aware model uses that are not
	// read yet (no engine: preset), with the reading interval: read once
	// the gateway learns they run an engine with metrics (EngineLearned).
	loadWanted map[string]time.Duration

	mu          sync.Mutex
	transferred map[string]bool // backends handed to a newer table
	closed      bool
}

// backendState is a backend and its active health, shared by every
// deployment on it and carried across reloads while its settings stay.
type backendState struct {
	b        *provider.Backend
	settings config.Backend
	down     atomic.Bool
	checkMu  sync.Mutex
	checkErr string
	checkAt  time.Time
	// servingAt is when the backend was last seen serving by an active
	// check or a recheck (Unix ns); recheckAt is the earliest time of the
	// next recheck (depState.allow).
	servingAt  atomic.Int64
	recheckAt  atomic.Int64
	rechecking atomic.Bool
	stop       context.CancelFunc
	done       chan struct{}
	// inflight counts this gateway's requests in flight to the backend,
	// over every deployment on it; scraper reads the engine's /metrics
	// (nil when no engine-aware model uses the backend).
	inflight atomic.Int64
	scraper  atomic.Pointer[fleet.Scraper]
	// waitQueues are the fair queues of deployments on the backend that
	// hold requests while its engine's queue is long (queue_when_waiting);
	// each scrape lets their waiting requests in where it has shrunk.
	waitQueues atomic.Pointer[[]*fairq.Queue]
}

// depState is the live state of one deployment (backend + upstream model).
type depState struct {
	be          *backendState
	br          *breaker
	outstanding atomic.Int64
	latency     atomic.Int64 // EWMA of time to headers, ns
	// rec remembers the prefix blocks sent to the deployment (cache_aware);
	// id identifies it for session affinity.
	rec *fleet.Record
	id  uint64
	q   *fairq.Queue // the fair queue (max_concurrency)
}

// allow reports whether the deployment may take a request now. A
// deployment whose breaker opened on refused connections (its engine was
// not running) is taken back as soon as the backend serves again: seen by
// an active health check, or by a recheck this request makes (one GET of
// the backend's health URL, at most four a second per backend), so that a
// restarted engine is not refused for the rest of an open period that
// grew while it was down.
func (s *depState) allow(ctx context.Context, now time.Time) (ok, probe bool) {
	if s.be.down.Load() {
		return false, false
	}
	ok, probe = s.br.allow(now)
	if ok {
		return ok, probe
	}
	trip, awaits := s.br.awaitsListener(now)
	if !awaits {
		return false, false
	}
	seen, serving := s.be.servingSince(ctx, now, trip)
	if !serving {
		return false, false
	}
	s.br.listening(now, seen)
	return s.br.allow(now)
}

// readyAt is when the deployment may next be tried (zero if now): for
// one that awaits a listener, the next recheck, however long the open
// period has to run.
func (s *depState) readyAt(now time.Time) time.Time {
	at := s.br.readyAt(now)
	if _, awaits := s.br.awaitsListener(now); awaits {
		next := time.Unix(0, s.be.recheckAt.Load())
		if !next.After(now) {
			return time.Time{}
		}
		if next.Before(at) {
			at = next
		}
	}
	return at
}

// recheckEvery bounds the rechecks of a backend whose deployments await a
// listener: at most four a second, one at a time, however many requests
// find it refused.
const recheckEvery = 250 * time.Millisecond

// recheckTimeout bounds the request that makes a recheck: an engine that
// accepts connections before it serves holds it no longer than this.
const recheckTimeout = time.Second

// servingSince reports whether the backend was seen serving after trip,
// and when: by an active health check, or by a recheck made now when none
// was made in the last recheckEvery (one at a time: an engine that
// accepts connections before it serves holds one request, not many).
func (s *backendState) servingSince(ctx context.Context, now, trip time.Time) (time.Time, bool) {
	if at := s.servingAt.Load(); at > trip.UnixNano() {
		return time.Unix(0, at), true
	}
	next := s.recheckAt.Load()
	if now.UnixNano() < next || !s.rechecking.CompareAndSwap(false, true) {
		return time.Time{}, false
	}
	defer s.rechecking.Store(false)
	if !s.recheckAt.CompareAndSwap(next, now.Add(recheckEvery).UnixNano()) {
		return time.Time{}, false
	}
	pctx, cancel := context.WithTimeout(ctx, recheckTimeout)
	err := s.b.Probe(pctx, s.b.HealthURL())
	cancel()
	if err != nil {
		return time.Time{}, false
	}
	s.servingAt.Store(now.UnixNano())
	return now, true
}

// New builds a table from a validated configuration.
func New(cfg *config.Config) *Table { return NewWithOptions(cfg, Options{}) }

// NewWithOptions builds a table from a validated configuration.
func NewWithOptions(cfg *config.Config, opt Options) *Table {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Breaker == (BreakerConfig{}) {
		opt.Breaker = BreakerFromConfig(cfg.Routing.CircuitBreaker)
	}
	if opt.Backoff <= 0 {
		opt.Backoff = time.Duration(cfg.Routing.RetryBackoff)
	}
	if opt.Backoff <= 0 {
		opt.Backoff = 20 * time.Millisecond
	}
	prev := opt.Previous
	opt.Previous = nil
	t := &Table{routes: map[string]*Route{}, backends: map[string]*provider.Backend{},
		bstates: map[string]*backendState{}, deps: map[string]*depState{}, opt: opt, transferred: map[string]bool{}}
	t.breaker = &t.opt.Breaker
	t.loadFactor = cfg.Routing.LoadFactor
	if t.loadFactor < 1 {
		t.loadFactor = config.DefaultLoadFactor
	}
	t.cacheTokens = cfg.Routing.PrefixCacheTokens
	t.sessionHeader = cfg.Routing.SessionHeader
	if t.sessionHeader == "" {
		t.sessionHeader = config.DefaultSessionHeader
	}
	t.leased = leasedBackends(cfg, opt.Leaser)
	for name, b := range cfg.Backends {
		settings := *b
		if prev != nil {
			if old := prev.takeBackend(name, settings); old != nil {
				t.bstates[name] = old
				t.backends[name] = old.b
				continue
			}
		}
		st := &backendState{b: provider.NewBackend(b), settings: settings}
		t.bstates[name] = st
		t.backends[name] = st.b
		if st.b.Unavailable != "" { // a discovered name with no address (discovered.go)
			st.down.Store(true)
			continue
		}
		t.startHealthCheck(st)
	}
	queues := map[*depState]queueSettings{}
	for name, m := range cfg.Models {
		r := &Route{Model: name, Fallbacks: m.Fallbacks, Balancing: m.Balancing, ContextWindow: m.ContextWindow, FitOutput: m.FitsOutput()}
		r.Chat, _ = m.ChatOptions() // validated with the config
		deps := m.Deployments
		if len(deps) == 0 && m.Backend != "" { // a config that skipped ApplyDefaults
			deps = []*config.Deployment{{Backend: m.Backend, UpstreamModel: m.UpstreamModel, Weight: 1}}
		}
		for _, d := range deps {
			if d == nil || t.bstates[d.Backend] == nil {
				continue
			}
			s := t.depState(prev, d.Backend, d.UpstreamModel)
			r.Deployments = append(r.Deployments, Deployment{Backend: t.backends[d.Backend], UpstreamModel: d.UpstreamModel,
				Weight: max(d.Weight, 1), Priority: d.Priority, QueueTimeout: time.Duration(d.QueueTimeout), s: s, route: r})
			qs := queues[s]
			qs.limit, qs.whenWaiting = max(qs.limit, d.MaxConcurrency), max(qs.whenWaiting, d.QueueWhenWaiting)
			qs.reserve = max(qs.reserve, d.QueueReserve)
			queues[s] = qs
		}
		sort.SliceStable(r.Deployments, func(i, j int) bool { return r.Deployments[i].Priority < r.Deployments[j].Priority })
		for _, d := range r.Deployments {
			if !slices.Contains(r.dialects, d.Backend.Dialect) {
				r.dialects = append(r.dialects, d.Backend.Dialect)
			}
		}
		if r.Balancing == "" {
			r.Balancing = config.BalanceLeastOutstanding
		}
		if engineAware(r.Balancing) || waitsOnEngines(m) {
			interval := time.Duration(cfg.Routing.EngineMetricsInterval)
			if interval <= 0 {
				interval = config.DefaultEngineMetricsInterval
			}
			for _, d := range r.Deployments {
				st := d.s.be
				switch {
				case scrapesMetrics(st.b, t.learnedKind(st.b)):
					t.startScraper(st, interval)
				case st.b.Engine == "":
					if t.loadWanted == nil {
						t.loadWanted = map[string]time.Duration{}
					}
					t.loadWanted[st.b.Name] = interval
				}
			}
		}
		t.routes[name] = r
		t.names = append(t.names, name)
	}
	for _, r := range t.routes {
		for _, f := range r.Fallbacks {
			if fr := t.routes[f]; fr != nil && fr != r {
				r.fallbacks = append(r.fallbacks, fr)
			}
		}
	}
	sort.Strings(t.names)
	t.setupQueues(queues)
	for _, r := range t.routes {
		for _, d := range r.Deployments {
			r.queued = r.queued || d.s.q.Active()
		}
	}
	return t
}

// depState returns the state of backend+upstream, shared by every route
// that names the pair and kept from the previous table when the backend
// was carried over.
func (t *Table) depState(prev *Table, backend, upstream string) *depState {
	key := backend + "\x00" + upstream
	if s := t.deps[key]; s != nil {
		return s
	}
	var s *depState
	if prev != nil && prev.bstates[backend] == t.bstates[backend] {
		s = prev.deps[key]
	}
	if s == nil {
		s = &depState{be: t.bstates[backend], br: newBreaker(t.breaker), q: fairq.New(0), id: fleet.HashString(key),
			rec: fleet.NewRecord(fleet.BlocksFor(t.cacheTokens))}
	}
	t.deps[key] = s
	return s
}

// takeBackend hands a backend to a newer table when its settings are
// unchanged, so that connections, health and breakers survive a reload.
func (t *Table) takeBackend(name string, settings config.Backend) *backendState {
	st := t.bstates[name]
	if st == nil || !st.settings.SameSettings(settings) {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.transferred[name] {
		return nil
	}
	t.transferred[name] = true
	return st
}

// Models returns the public model names, sorted.
func (t *Table) Models() []string { return t.names }

// Route returns the route for a public model. An unknown model yields a 404
// that lists what is available and the nearest name.
func (t *Table) Route(model string) (*Route, error) {
	if r, ok := t.routes[model]; ok {
		return r, nil
	}
	return nil, t.notFound(model)
}

// Backend returns a backend by name.
func (t *Table) Backend(name string) *provider.Backend { return t.backends[name] }

// Close stops health checks and releases the connections of the backends
// this table still owns (not those handed to a newer table). Requests in
// flight on the table finish normally.
func (t *Table) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	var owned []*backendState
	for name, st := range t.bstates {
		if !t.transferred[name] {
			owned = append(owned, st)
		}
	}
	t.mu.Unlock()
	for _, st := range owned {
		if sc := st.scraper.Load(); sc != nil {
			sc.Stop()
		}
		if st.stop != nil {
			st.stop()
			<-st.done
		}
		st.b.Close()
	}
}

func (t *Table) log() *slog.Logger {
	if t.opt.Logger != nil {
		return t.opt.Logger
	}
	return slog.Default()
}

func (t *Table) notFound(model string) error { return t.NotFoundFor(model, nil) }

// NotFoundFor is the unknown-model error as a caller limited to the models
// allowed reports true for would see it: the suggestions and the list name
// only those, so a restricted key does not learn other teams' model names.
// A nil allowed means every model.
func (t *Table) NotFoundFor(model string, allowed func(string) bool) error {
	names := t.names
	if allowed != nil {
		names = make([]string, 0, len(t.names))
		for _, n := range t.names {
			if allowed(n) {
				names = append(names, n)
			}
		}
	}
	// One sentence in clauses joined by "; ", except that after a
	// question the next clause starts a new sentence:
	// model "qwne" is not served by this gateway; did you mean "qwen"? Available models: …
	var msg strings.Builder
	if model == "" {
		msg.WriteString(`the request has no "model" field; `)
	} else {
		fmt.Fprintf(&msg, "model %q is not served by this gateway; ", model)
		if near := config.Nearest(model, names); near != "" {
			fmt.Fprintf(&msg, "did you mean %q? ", near)
		}
	}
	var rest string
	switch {
	case len(names) == 0 && allowed != nil:
		rest = "this API key may use none of the models served here: ask the gateway admin to widen its model list"
	case len(names) == 0:
		rest = "no models are configured: add a backend and models to the config file (see llmgate serve --help)"
	case len(names) <= 20:
		rest = "available models: " + strings.Join(names, ", ")
	default:
		rest = fmt.Sprintf("available models include: %s, … (GET /v1/models lists all %d)", strings.Join(names[:20], ", "), len(names))
	}
	if strings.HasSuffix(msg.String(), "? ") {
		rest = strings.ToUpper(rest[:1]) + rest[1:]
	}
	msg.WriteString(rest)
	status, code := http.StatusNotFound, "model_not_found"
	if model == "" {
		status, code = http.StatusBadRequest, "missing_model"
	}
	e := apierror.New(status, apierror.KindNotFound, code, msg.String())
	if model == "" {
		e.Kind = apierror.KindInvalidRequest
		e.Param = "model"
	}
	return e
}

// waitsOnEngines reports whether a deployment of m holds requests while
// its engine's own queue is long (queue_when_waiting): its engines' metrics
// are then read whatever the balancing.
func waitsOnEngines(m *config.Model) bool {
	for _, d := range m.Deployments {
		if d.QueueWhenWaiting > 0 {
			return true
		}
	}
	return false
}
