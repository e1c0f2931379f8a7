// Package bench measures the latency and throughput of OpenAI-compatible
// streaming endpoints the way vLLM's `bench serve` defines them, and writes
// the results as a console table, CSV, JSON (with vLLM's field names), a
// per-request JSONL and one self-contained HTML report.
//
// Definitions (all per successful request; failed requests are counted by
// kind and excluded from every latency):
//   - TTFT: arrival of the first SSE chunk whose choices array is non-empty
//     (a role-only or reasoning delta counts), minus the request's origin.
//   - ITL: one sample per later chunk, the gap to the previous chunk. A
//     chunk carrying k tokens is one sample. The per-token variant
//     (itl_per_token) contributes k samples of gap/k, with k from usage in
//     every chunk (--continuous-usage) or else estimated from text length.
//   - E2EL: arrival of the last chunk with choices, minus the origin.
//   - TPOT: (E2EL − TTFT)/(output tokens − 1), only when output tokens > 1.
//   - Output tokens come from usage.completion_tokens (the request sets
//     stream_options.include_usage); without usage they are estimated and
//     every report labels them so.
//   - Throughputs divide completed requests, output tokens and input plus
//     output tokens by the cell's wall time; goodput counts requests that
//     meet every --goodput objective.
//   - Statistics are numpy's: population standard deviation, percentiles by
//     linear interpolation.
//
// Measurement: chunks are timestamped when the read that delivered their
// bytes returns, before any JSON is decoded. The origin is the send time in
// closed-loop cells and the intended send time in open-loop cells (the
// scheduled arrival, or the moment a slot freed under --max-concurrency), so
// a client that falls behind shows it in the latencies. Each cell records
// the dispatch lag, the client's CPU use (getrusage) and the wake-up delay
// of a goroutine blocked on a pipe, and is flagged unreliable when the
// client may have been the bottleneck (see UnreliableCPUFraction).
//
// RunAgent runs the coding-agent workload instead of the load matrix:
// concurrent sessions with growing histories (see AgentWorkload), reporting
// TTFT, throughput and the share of prompt tokens the server's prefix cache
// served.
package bench
