package gateway

import (
	"llmgate/internal/metrics"
	"llmgate/internal/router"
)

// observeQueues registers the fair queues' metrics, per deployment that
// has one (max_concurrency or queue_when_waiting): requests waiting and
// in flight, the limit, and totals of waits, time waited, time-outs and
// clients that left while waiting. The mean wait over a window is
// rate(llmgate_queue_wait_seconds_total) / rate(llmgate_queue_waits_total).
func (g *Gateway) observeQueues() {
	m := g.Metrics
	labels := []string{"backend", "upstream_model"}
	each := func(fn func(emit metrics.Emit, q router.QueueStats)) func(metrics.Emit) {
		return func(emit metrics.Emit) {
			for _, q := range g.Tables.Load().Queues() {
				fn(emit, q)
			}
		}
	}
	_ = m.GaugeVecFunc("llmgate_queue_depth", "Requests waiting in a deployment's fair queue in this gateway.",
		labels, each(func(emit metrics.Emit, q router.QueueStats) { emit(float64(q.Waiting), q.Backend, q.UpstreamModel) }))
	_ = m.GaugeVecFunc("llmgate_queue_in_flight", "Requests this gateway has in flight to a deployment with a fair queue.",
		labels, each(func(emit metrics.Emit, q router.QueueStats) { emit(float64(q.InFlight), q.Backend, q.UpstreamModel) }))
	_ = m.GaugeVecFunc("llmgate_queue_max_concurrency", "A deployment's max_concurrency (0: none, only queue_when_waiting holds requests).",
		labels, each(func(emit metrics.Emit, q router.QueueStats) { emit(float64(q.Limit), q.Backend, q.UpstreamModel) }))
	_ = m.CounterVecFunc("llmgate_queue_waits_total", "Requests that waited in a deployment's fair queue (served, timed out or gone).",
		labels, each(func(emit metrics.Emit, q router.QueueStats) { emit(float64(q.Waits), q.Backend, q.UpstreamModel) }))
	_ = m.CounterVecFunc("llmgate_queue_wait_seconds_total", "Total time requests waited in a deployment's fair queue.",
		labels, each(func(emit metrics.Emit, q router.QueueStats) { emit(q.WaitTime.Seconds(), q.Backend, q.UpstreamModel) }))
	_ = m.CounterVecFunc("llmgate_queue_timeouts_total", "Requests refused with 429 queue_timeout after waiting a deployment's whole queue_timeout.",
		labels, each(func(emit metrics.Emit, q router.QueueStats) { emit(float64(q.Timeouts), q.Backend, q.UpstreamModel) }))
	_ = m.CounterVecFunc("llmgate_queue_abandoned_total", "Requests whose client went away while they waited in a deployment's fair queue.",
		labels, each(func(emit metrics.Emit, q router.QueueStats) { emit(float64(q.Gone), q.Backend, q.UpstreamModel) }))
}
