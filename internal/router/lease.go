package router

import (
	"context"

	"llmgate/internal/config"
)

// Leaser holds the local engines behind some backends (internal/engine):
// a request to such a backend takes a lease first, which starts the engine
// or waits until it is ready, and gives it back with its outcome. A table
// is given its Leaser when it is built (Options.Leaser), so that nothing
// changes a backend once requests may use it.
type Leaser interface {
	// Manages reports whether requests to the backend take a lease: it
	// is a local engine's. Asked once per backend when a table is built.
	Manages(backend string) bool
	// Lease returns once the backend's engine is ready and counts the
	// request for model as in flight there. release ends the lease with
	// the request's outcome and returns the error to report, which may
	// explain a failure by the engine's exit.
	Lease(ctx context.Context, backend, model string) (release func(err error) error, err error)
}

// EngineStates is implemented by a Leaser that knows whether each of its
// engines is running: the reader of engine metrics asks it before each
// reading and reads only a ready engine, since a stopped one (its idle
// timeout passed, or another of its group was started) has nothing on its
// port, and one starting has not loaded its model yet.
type EngineStates interface {
	// EngineState says whether backend's engine is ready to be read, and
	// its state otherwise ("stopped", "starting", ...); ready for a
	// backend without an engine.
	EngineState(backend string) (state string, ready bool)
}

// leasedBackends names the backends of cfg whose requests take a lease.
func leasedBackends(cfg *config.Config, l Leaser) map[string]bool {
	if l == nil {
		return nil
	}
	var leased map[string]bool
	for name := range cfg.Backends {
		if l.Manages(name) {
			if leased == nil {
				leased = map[string]bool{}
			}
			leased[name] = true
		}
	}
	return leased
}

// Leaser returns the leaser a request to the backend takes its lease
// from, nil when it takes none (no local engine's backend, or a table
// built without a Leaser).
func (t *Table) Leaser(backend string) Leaser {
	if t.leased[backend] {
		return t.opt.Leaser
	}
	return nil
}
