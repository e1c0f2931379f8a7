package gateway

import (
	"llmgate/internal/engine"
	"llmgate/internal/metrics"
)

// engineStates lists local engines for the console (nil without engines).
func (g *Gateway) engineStates() any {
	if g.Engines == nil {
		return nil
	}
	return g.Engines.List()
}

// observeEngines exports each local engine's state, in-flight and queued
// requests, evaluated at scrape time.
func (g *Gateway) observeEngines() {
	if g.Engines == nil {
		return
	}
	states := []engine.State{engine.StateStopped, engine.StateStarting, engine.StateReady, engine.StateStopping, engine.StateFailed}
	_ = g.Metrics.GaugeVecFunc("llmgate_engine_state", "Local engine life-cycle state: 1 for the current state.",
		[]string{"engine", "state"}, func(emit metrics.Emit) {
			for _, e := range g.Engines.List() {
				for _, st := range states {
					v := 0.0
					if e.State == st {
						v = 1
					}
					emit(v, e.Name, string(st))
				}
			}
		})
	_ = g.Metrics.GaugeVecFunc("llmgate_engine_queued_requests", "Requests waiting for a local engine to become ready.",
		[]string{"engine"}, func(emit metrics.Emit) {
			for _, e := range g.Engines.List() {
				emit(float64(e.Queued), e.Name)
			}
		})
	_ = g.Metrics.GaugeVecFunc("llmgate_engine_in_flight_requests", "Requests being served by a local engine.",
		[]string{"engine"}, func(emit metrics.Emit) {
			for _, e := range g.Engines.List() {
				emit(float64(e.InFlight), e.Name)
			}
		})
}
