package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"syscall"
	"time"

	"llmgate/internal/apierror"
	"llmgate/internal/config"
)

// Status is an engine's state as the admin API and `llmgate engines`
// show it.
type Status struct {
	Name     string   `json:"name"`
	State    State    `json:"state"`
	PID      int      `json:"pid,omitempty"`
	Port     int      `json:"port"`
	Models   []string `json:"models"`
	Group    string   `json:"group,omitempty"`
	AlwaysOn bool     `json:"always_on,omitempty"`
	TTL      string   `json:"ttl,omitempty"`
	// UptimeSeconds counts from the process start; 0 when stopped.
	UptimeSeconds float64    `json:"uptime_seconds"`
	StartedAt     *time.Time `json:"started_at,omitempty"`
	ReadyAt       *time.Time `json:"ready_at,omitempty"`
	InFlight      int        `json:"in_flight"`
	Queued        int        `json:"queued"`
	Starts        int        `json:"starts"`
	Crashes       int        `json:"consecutive_crashes"`
	LastError     string     `json:"last_error,omitempty"`
	LastErrorAt   *time.Time `json:"last_error_at,omitempty"`
	// Retired is set on an engine a reload removed from the config that
	// is still stopping (its requests in flight first); once stopped it
	// is no longer listed.
	Retired bool `json:"retired,omitempty"`
}

// List returns every engine's status, sorted by name: the configured
// engines, and those a reload removed while they still run.
func (m *Manager) List() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Status, 0, len(m.names))
	for _, n := range m.names {
		e := m.engines[n]
		st := e.status()
		if st.Retired = m.isRetired(n); st.Retired && e.run == nil && e.state == StateStopped {
			continue
		}
		out = append(out, st)
	}
	return out
}

// Get returns one engine's status.
func (m *Manager) Get(name string) (Status, error) {
	e, err := m.engine(name)
	if err != nil {
		return Status{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.status(), nil
}

func (e *Engine) status() Status {
	c := e.cfg
	s := Status{Name: c.Name, State: e.state, Port: c.Port, Models: c.Models, Group: c.Group, AlwaysOn: c.AlwaysOn,
		InFlight: e.inflight, Starts: e.starts, Crashes: e.crashes, LastError: e.lastErr}
	if c.TTL > 0 {
		s.TTL = time.Duration(c.TTL).String()
	}
	for _, n := range e.queued {
		s.Queued += n
	}
	if r := e.run; r != nil {
		s.PID = r.pid
		s.UptimeSeconds = time.Since(r.started).Round(time.Millisecond).Seconds()
		t := r.started
		s.StartedAt = &t
		if !r.readyAt.IsZero() {
			rt := r.readyAt
			s.ReadyAt = &rt
		}
	}
	if !e.lastErrAt.IsZero() {
		t := e.lastErrAt
		s.LastErrorAt = &t
	}
	return s
}

func (m *Manager) engine(name string) (*Engine, error) {
	if e := m.engines[name]; e != nil {
		return e, nil
	}
	return nil, apierror.Newf(http.StatusNotFound, apierror.KindNotFound, "engine_not_found",
		"no engine named %q; configured engines: %v", name, m.configured())
}

// configured returns the names of the engines the running config
// declares, sorted.
func (m *Manager) configured() []string {
	var names []string
	for _, n := range m.names {
		if !m.isRetired(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Load starts an engine (stopping others in its group first, like a
// request would) and returns once it is ready.
func (m *Manager) Load(ctx context.Context, name string) error {
	e, err := m.engine(name)
	if err != nil {
		return err
	}
	if m.isRetired(name) {
		return apierror.Newf(http.StatusNotFound, apierror.KindNotFound, "engine_not_found",
			"engine %q was removed from the config by a reload and cannot be started; configured engines: %v", name, m.configured())
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return e.shuttingDown()
	}
	if e.state == StateReady && e.g.active == e {
		m.mu.Unlock()
		return nil
	}
	w := &waiter{e: e, done: make(chan error, 1)}
	e.g.queue = append(e.g.queue, w)
	m.schedule(e.g)
	m.mu.Unlock()
	if err := m.wait(ctx, w); err != nil {
		return err
	}
	return e.lease(w.run)(nil)
}

// Unload stops an engine once its requests in flight finish (bounded by
// its drain time-out) and waits until the process has exited.
func (m *Manager) Unload(ctx context.Context, name string) error {
	e, err := m.engine(name)
	if err != nil {
		return err
	}
	m.mu.Lock()
	r := e.run
	switch {
	case e.state == StateReady && e.inflight > 0:
		e.unload = true
		if e.drain == nil {
			e.drain = time.AfterFunc(time.Duration(e.cfg.DrainTimeout), func() {
				m.mu.Lock()
				defer m.mu.Unlock()
				e.drain = nil
				if e.unload && e.run == r {
					m.stopLocked(e, "unloaded; requests in flight did not finish within drain_timeout")
				}
			})
		}
	case e.state == StateStarting:
		m.failAll(e, apierror.Newf(http.StatusServiceUnavailable, apierror.KindOverloaded, "engine_unloaded",
			"engine %q was unloaded by an administrator while it started", e.cfg.Name))
		m.stopLocked(e, "unloaded")
	case e.state == StateReady:
		m.stopLocked(e, "unloaded")
	}
	m.mu.Unlock()
	if r == nil {
		return nil
	}
	select {
	case <-r.exited:
		return nil
	case <-ctx.Done():
		return apierror.New(http.StatusGatewayTimeout, apierror.KindTimeout, "engine_unload_timeout",
			"the engine is still stopping (requests in flight or a slow shutdown); check 'llmgate engines list'")
	}
}

// StopRetired stops, as Unload does (its requests in flight first), every
// running engine the config no longer declares since the last Rebind: a
// reload that removes an engine frees its GPU rather than leaving the
// process to its idle time-out (or, for an always_on engine, to the next
// restart of the gateway). Call it once the new table serves. It returns
// when they have stopped or ctx ends.
func (m *Manager) StopRetired(ctx context.Context) {
	var wg sync.WaitGroup
	for _, name := range m.names {
		if !m.isRetired(name) {
			continue
		}
		m.mu.Lock()
		running := m.engines[name].run != nil
		m.mu.Unlock()
		if !running {
			continue
		}
		m.log.Info("engine no longer in the config: stopping it", "engine", name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Unload(ctx, name); err != nil {
				m.log.Warn("engine no longer in the config did not stop yet", "engine", name, "err", err)
			}
		}()
	}
	wg.Wait()
}

// Logs returns up to n of the newest log lines after sequence number
// after (0 for all).
func (m *Manager) Logs(name string, n int, after uint64) ([]Line, error) {
	e, err := m.engine(name)
	if err != nil {
		return nil, err
	}
	return e.logs.tail(n, after), nil
}

// Close fails waiting requests, stops every engine's process group and
// waits for them to exit; when ctx ends first, what remains is killed.
// Call it after the HTTP server has drained, so requests in flight finish.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.quit)
	var runs []*run
	var graces []time.Duration
	for _, n := range m.names {
		e := m.engines[n]
		m.failAll(e, e.shuttingDown())
		r := e.run
		if r != nil || e.delayed != nil {
			m.stopLocked(e, "gateway shutdown")
		}
		if r != nil {
			runs = append(runs, r)
			graces = append(graces, time.Duration(e.cfg.StopGrace))
		}
	}
	watching := m.watching
	m.mu.Unlock()
	if watching {
		<-m.ttlDone
	}
	var errs []error
	for i, r := range runs {
		deadline := time.Now().Add(graces[i])
		select {
		case <-r.exited:
		case <-ctx.Done():
			_ = killGroup(r.pid, syscall.SIGKILL)
			<-r.exited
		}
		// The leader is gone; give the rest of the group what is left of
		// the grace period (or nothing once ctx ended), then kill it.
		for groupAlive(r.pid) {
			if ctx.Err() != nil || time.Now().After(deadline) {
				_ = killGroup(r.pid, syscall.SIGKILL)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs[0], errors.New("engines were killed before their stop grace period ended"))
	}
	return nil
}

// Rebind prepares a reloaded configuration: every engine keeps its running
// process and port, so the new config's engine backends point at the same
// ports. Call it before building the new routing table (with the Manager
// as its Leaser): the table's engine backends are then made with the
// running engines' URLs, and nothing changes them afterwards. Engines
// cannot be added or redefined by a reload: a new engine is an error (the
// reload should be rejected); changed settings of a known engine are
// reported and take effect at the next restart of the gateway. An engine
// the config no longer declares takes no more leases in the tables built
// after: a backend of its name is a plain backend now.
func (m *Manager) Rebind(cfg *config.Config) (changed []string, err error) {
	defer func() {
		if err != nil {
			return
		}
		retired := map[string]bool{}
		for name := range m.engines {
			if cfg.Engines[name] == nil {
				retired[name] = true
			}
		}
		m.retired.Store(&retired)
	}()
	for _, name := range sortedNames(cfg.Engines) {
		e := m.engines[name]
		if e == nil {
			return nil, fmt.Errorf("engines.%s is new: adding engines needs a gateway restart", name)
		}
		nc := cfg.Engines[name]
		if !nc.SameAs(e.cfg) {
			changed = append(changed, name)
		}
		if err := cfg.BindEngine(name, e.cfg.Port); err != nil {
			return nil, err
		}
	}
	return changed, nil
}
