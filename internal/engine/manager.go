// Package engine runs local model servers (vLLM, SGLang, llama.cpp,
// TensorRT-LLM, Ollama) on demand: a request for a model whose engine is
// stopped starts it, waits until its health check answers, and forwards the
// request. Engines in one group (one GPU) never run together: starting one
// first stops the others once their requests finish. Requests that arrive
// while an engine starts wait in a bounded FIFO queue per model.
//
// Scheduling within a group is first come, first served by engine: the
// waiter at the head of the group's queue decides which engine runs next.
// When an engine becomes ready, every request waiting for it is admitted at
// once (batching the swap); while another engine's request waits at the
// head, new requests for the running engine queue behind it, so two
// clients alternating between models both make progress instead of one
// starving.
package engine

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
	"llmgate/internal/provider"
	"llmgate/internal/router"
)

// State is an engine's life-cycle state.
type State string

// Engine states.
const (
	StateStopped  State = "stopped"
	StateStarting State = "starting"
	StateReady    State = "ready"
	StateStopping State = "stopping"
	StateFailed   State = "failed"
)

// Options tune a Manager.
type Options struct {
	Logger *slog.Logger
	// LogLines is the size of each engine's log ring buffer (default 1000).
	LogLines int
	// StateFile records the running engine processes, so that the next
	// gateway stops those a crashed one left behind (see orphans.go).
	// Default: llmgate-engines.json next to a SQLite database (the user's
	// cache directory with PostgreSQL); "-" disables it.
	StateFile string
	// OnReady, when set, runs each time an engine's health check first
	// answers 200 after a start, before the requests waiting for it are
	// admitted: the gateway asks the new engine about itself (its context
	// length, its tokenizer) there, so that those requests are fitted with
	// its numbers. ctx bounds the call.
	OnReady func(ctx context.Context, b *provider.Backend)
	// Tables, when set, holds the routing table being served: an engine's
	// backend there (the one of its name) is what OnReady is given, and
	// its idle connections are closed when the engine stops.
	Tables *router.Current
}

// Manager owns the engine processes of one gateway.
type Manager struct {
	log       *slog.Logger
	readyHook func(ctx context.Context, b *provider.Backend)
	tables    *router.Current // nil: no table to find the engines' backends in
	mu        sync.Mutex
	engines   map[string]*Engine
	names     []string
	// retired names the engines the running config no longer declares
	// (Rebind): a backend of the same name is a plain one now, and takes
	// no lease. Read when a table is built, from any goroutine.
	retired  atomic.Pointer[map[string]bool]
	closed   bool
	watching bool // the idle watcher runs
	quit     chan struct{}
	ttlDone  chan struct{}
	state    *stateFile // nil when disabled
}

// group is a set of engines of which at most one runs.
type group struct {
	name   string
	active *Engine // the engine holding the group: starting, ready or stopping
	queue  []*waiter
}

// waiter is a request (or a load command) waiting for its engine.
type waiter struct {
	e       *Engine
	model   string
	counted bool       // counts against the model's queue limit
	done    chan error // receives nil once admitted (in flight), or the failure
	run     *run
}

// Engine is one configured engine and its current process.
type Engine struct {
	cfg       *config.Engine
	m         *Manager
	g         *group
	logs      *ring
	state     State
	run       *run
	inflight  int
	queued    map[string]int
	lastUsed  time.Time
	lastErr   string
	lastErrAt time.Time
	crashes   int       // consecutive crashes, for the restart backoff
	restartAt time.Time // no restart before this time
	starts    int
	unload    bool        // stop once the requests in flight finish
	drain     *time.Timer // bounds the wait for requests in flight
	delayed   *time.Timer // a start postponed by the crash backoff
}

var _ router.Leaser = (*Manager)(nil)

// New prepares the engines of cfg: it assigns free ports to engines
// without one and points each engine's backend at its port
// (config.BindEngine). Call it before building the routing table, build
// the table with the Manager as its Leaser (router.Options.Leaser), then
// Start. It first stops the engines a previous gateway that crashed left
// running (Options.StateFile), which can take up to their stop grace.
func New(cfg *config.Config, opt Options) (*Manager, error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{log: log, readyHook: opt.OnReady, tables: opt.Tables, engines: map[string]*Engine{}, quit: make(chan struct{}), ttlDone: make(chan struct{})}
	// Before any port is chosen or engine started: a leftover engine holds
	// its port and its GPU memory.
	m.state = openState(statePath(cfg, opt), log)
	m.state.reapOrphans()
	groups := map[string]*group{}
	var holds []net.Listener // kept open until every port is chosen, so ports differ
	lo, hi := ephemeralRange()
	defer func() {
		for _, l := range holds {
			l.Close()
		}
	}()
	for _, name := range sortedNames(cfg.Engines) {
		ec := cfg.Engines[name]
		port := ec.Port
		if port == 0 {
			l, err := pickPort(lo, hi, func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) })
			if err != nil {
				return nil, fmt.Errorf("engine %q: pick a free port: %w", name, err)
			}
			holds = append(holds, l)
			port = l.Addr().(*net.TCPAddr).Port
		}
		if err := cfg.BindEngine(name, port); err != nil {
			return nil, err
		}
		gname := ec.Group
		if gname == "" {
			gname = "\x00" + name // a private group
		}
		g := groups[gname]
		if g == nil {
			g = &group{name: ec.Group}
			groups[gname] = g
		}
		m.engines[name] = &Engine{cfg: ec, m: m, g: g, logs: newRing(opt.LogLines), state: StateStopped, queued: map[string]int{}}
		m.names = append(m.names, name)
	}
	return m, nil
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Manages implements router.Leaser: an engine's backend has its name,
// while the running config declares the engine.
func (m *Manager) Manages(backend string) bool {
	return m.engines[backend] != nil && !m.isRetired(backend)
}

var _ router.EngineStates = (*Manager)(nil)

// EngineState implements router.EngineStates: backend's engine's state,
// and whether it is ready (true for a backend without an engine).
func (m *Manager) EngineState(backend string) (string, bool) {
	e := m.engines[backend]
	if e == nil {
		return "", true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return string(e.state), e.state == StateReady
}

// isRetired reports whether the running config no longer declares the
// engine (see Rebind).
func (m *Manager) isRetired(name string) bool {
	r := m.retired.Load()
	return r != nil && (*r)[name]
}

// Lease implements router.Leaser: it returns once the backend's engine is
// ready (starting it, or waiting in its group's queue) and the request
// counts as in flight.
func (m *Manager) Lease(ctx context.Context, backend, model string) (func(error) error, error) {
	e := m.engines[backend]
	if e == nil { // a table asks only for the backends Manages named
		return nil, apierror.From(fmt.Errorf("backend %q has no local engine", backend))
	}
	return e.acquire(ctx, model)
}

// backend is e's backend on the table being served, nil when there is
// none.
func (m *Manager) backend(e *Engine) *provider.Backend {
	if m.tables == nil {
		return nil
	}
	if t := m.tables.Load(); t != nil {
		return t.Backend(e.cfg.Name)
	}
	return nil
}

// Start starts the always_on engines and the idle (TTL) watcher.
func (m *Manager) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.watching {
		return
	}
	for _, name := range m.names {
		if e := m.engines[name]; e.cfg.AlwaysOn && e.state == StateStopped {
			m.startLocked(e)
		}
	}
	m.watching = true
	go m.watchIdle()
}

// acquire takes a lease on e for a request for model: it returns once the
// engine is ready and the request counts as in flight.
func (e *Engine) acquire(ctx context.Context, model string) (func(error) error, error) {
	m := e.m
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, e.shuttingDown()
	}
	e.lastUsed = time.Now()
	g := e.g
	if e.state == StateReady && g.active == e && len(g.queue) == 0 {
		e.inflight++
		r := e.run
		m.mu.Unlock()
		return e.lease(r), nil
	}
	if e.cfg.MaxQueue > 0 && e.queued[model] >= e.cfg.MaxQueue {
		n := e.queued[model]
		m.mu.Unlock()
		err := apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_queue_full",
			"engine %q is %s and %d requests for model %q are already waiting (engines.%s.max_queue); retry shortly. Last log lines: %s",
			e.cfg.Name, e.describeWait(), n, model, e.cfg.Name, e.logs.tailText(5))
		err.Header = http.Header{"Retry-After": {"5"}}
		return nil, err
	}
	w := &waiter{e: e, model: model, counted: true, done: make(chan error, 1)}
	g.queue = append(g.queue, w)
	e.queued[model]++
	m.schedule(g)
	m.mu.Unlock()
	if err := m.wait(ctx, w); err != nil {
		return nil, err
	}
	return e.lease(w.run), nil
}

// wait blocks until w is admitted or failed, or ctx ends.
func (m *Manager) wait(ctx context.Context, w *waiter) error {
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
	}
	m.mu.Lock()
	if m.dequeue(w) {
		m.schedule(w.e.g)
		m.mu.Unlock()
		return clientClosed(ctx)
	}
	m.mu.Unlock()
	if err := <-w.done; err == nil { // admitted just now: give the slot back
		_ = w.e.lease(w.run)(nil)
	}
	return clientClosed(ctx)
}

func clientClosed(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return apierror.New(http.StatusGatewayTimeout, apierror.KindTimeout, "engine_wait_timeout",
			"the request's time-out passed while it waited for its engine to start")
	}
	return apierror.ErrClientClosed.WithMessage("client closed the request while it waited for its engine")
}

// lease returns the release function of one admitted request.
func (e *Engine) lease(r *run) func(error) error {
	var once sync.Once
	return func(err error) error {
		if err != nil {
			err = e.explain(r, err)
		}
		once.Do(func() {
			m := e.m
			m.mu.Lock()
			e.inflight--
			e.lastUsed = time.Now()
			if e.inflight == 0 {
				if e.unload && e.state == StateReady {
					m.stopLocked(e, "unloaded")
				}
				m.schedule(e.g)
			}
			m.mu.Unlock()
		})
		return err
	}
}

// explain replaces a transport failure of a request in flight by a 503
// naming the engine when the engine's process exited under it.
func (e *Engine) explain(r *run, err error) error {
	ae := apierror.From(err)
	if r == nil || !(ae.Status == http.StatusBadGateway || ae.Status == http.StatusGatewayTimeout) {
		return err
	}
	select {
	case <-r.exited:
	case <-time.After(500 * time.Millisecond):
		return err // the engine lives: the failure is the request's own
	}
	if r.stopReason != "" {
		return apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_stopped",
			"engine %q was stopped (%s) while this request was in flight; retry", e.cfg.Name, r.stopReason).Wrap(err)
	}
	return apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_crashed",
		"engine %q exited unexpectedly (%s) while serving this request; the next request restarts it. Last log lines: %s",
		e.cfg.Name, exitText(r.exitErr), e.logs.tailText(5)).Wrap(err)
}

// schedule decides what the group does next. Called with m.mu held
// whenever a waiter arrives or leaves, a request finishes, or an engine
// changes state.
func (m *Manager) schedule(g *group) {
	if len(g.queue) == 0 || m.closed {
		return
	}
	head := g.queue[0].e
	a := g.active
	switch {
	case a == nil:
		m.startLocked(head)
	case a == head:
		if a.state == StateReady {
			m.admitAll(a)
		}
	case a.state == StateReady:
		// Another engine waits: swap once the requests in flight finish,
		// or when the drain time-out passes.
		if a.inflight == 0 {
			m.stopLocked(a, fmt.Sprintf("swapped out for %q", head.cfg.Name))
		} else if a.drain == nil {
			a.drain = time.AfterFunc(time.Duration(a.cfg.DrainTimeout), func() {
				m.mu.Lock()
				defer m.mu.Unlock()
				a.drain = nil
				if g.active == a && a.state == StateReady && len(g.queue) > 0 && g.queue[0].e != a {
					m.stopLocked(a, fmt.Sprintf("swapped out for %q after waiting %s for requests in flight", g.queue[0].e.cfg.Name, time.Duration(a.cfg.DrainTimeout)))
				}
			})
		}
	case a.state == StateStarting && !a.hasWaiters():
		// Everyone who wanted it left: do not finish loading it.
		m.stopLocked(a, fmt.Sprintf("start abandoned for %q", head.cfg.Name))
	}
}

func (e *Engine) hasWaiters() bool {
	for _, w := range e.g.queue {
		if w.e == e {
			return true
		}
	}
	return false
}

// admitAll lets every request waiting for e through, in arrival order.
func (m *Manager) admitAll(e *Engine) {
	q := e.g.queue[:0]
	var admitted []*waiter
	for _, w := range e.g.queue {
		if w.e == e {
			admitted = append(admitted, w)
		} else {
			q = append(q, w)
		}
	}
	clear(e.g.queue[len(q):])
	e.g.queue = q
	for _, w := range admitted {
		if w.counted {
			e.queued[w.model]--
		}
		e.inflight++
		w.run = e.run
		w.done <- nil
	}
}

// failAll fails every request waiting for e with err.
func (m *Manager) failAll(e *Engine, err error) {
	q := e.g.queue[:0]
	var failed []*waiter
	for _, w := range e.g.queue {
		if w.e == e {
			failed = append(failed, w)
		} else {
			q = append(q, w)
		}
	}
	clear(e.g.queue[len(q):])
	e.g.queue = q
	for _, w := range failed {
		if w.counted {
			e.queued[w.model]--
		}
		w.done <- err
	}
}

// dequeue removes w from its group's queue and reports whether it was there.
func (m *Manager) dequeue(w *waiter) bool {
	g := w.e.g
	for i, x := range g.queue {
		if x == w {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			if w.counted {
				w.e.queued[w.model]--
			}
			return true
		}
	}
	return false
}

// startLocked makes e the group's active engine and starts its process,
// after the crash backoff if one applies.
func (m *Manager) startLocked(e *Engine) {
	e.g.active = e
	e.state = StateStarting
	e.unload = false
	if d := time.Until(e.restartAt); d > 0 {
		m.log.Info("engine restart delayed after repeated crashes", "engine", e.cfg.Name, "crashes", e.crashes, "delay", d.Round(time.Millisecond))
		e.delayed = time.AfterFunc(d, func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if e.delayed != nil && e.g.active == e && e.state == StateStarting && e.run == nil && !m.closed {
				e.delayed = nil
				m.spawnLocked(e)
			}
		})
		return
	}
	m.spawnLocked(e)
}

// startFailed records that e could not be started and fails its waiters.
func (m *Manager) startFailed(e *Engine, err *apierror.Error) {
	e.state = StateFailed
	e.setErr(err.Message)
	if e.g.active == e {
		e.g.active = nil
	}
	m.log.Error("engine failed to start", "engine", e.cfg.Name, "err", err.Message)
	m.failAll(e, err)
	m.schedule(e.g)
}

func (e *Engine) setErr(msg string) {
	e.lastErr = msg
	e.lastErrAt = time.Now()
}

// watchIdle stops engines that had no requests for their ttl.
func (m *Manager) watchIdle() {
	defer close(m.ttlDone)
	tick := 5 * time.Second
	for _, e := range m.engines {
		if t := time.Duration(e.cfg.TTL) / 4; t > 0 && t < tick {
			tick = max(t, 20*time.Millisecond)
		}
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-m.quit:
			return
		case <-t.C:
		}
		m.mu.Lock()
		for _, e := range m.engines {
			ttl := time.Duration(e.cfg.TTL)
			if ttl > 0 && !e.cfg.AlwaysOn && e.state == StateReady && e.inflight == 0 && !e.hasWaiters() && time.Since(e.lastUsed) >= ttl {
				m.stopLocked(e, fmt.Sprintf("idle for %s (ttl)", ttl))
			}
		}
		m.mu.Unlock()
	}
}

// describeWait says what a waiting request waits for.
func (e *Engine) describeWait() string {
	switch {
	case e.state == StateStarting && e.delayed != nil:
		return "waiting out its crash backoff"
	case e.state == StateStarting:
		return "starting"
	case e.g.active != nil && e.g.active != e:
		return fmt.Sprintf("waiting for engine %q (group %s) to stop", e.g.active.cfg.Name, e.g.name)
	}
	return string(e.state)
}

func (e *Engine) shuttingDown() error {
	return apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "gateway_shutting_down",
		"the gateway is shutting down; engine %q is not available", e.cfg.Name)
}
