package sim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Histogram buckets as vLLM V1 declares them (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	tpotBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
		20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// tokenBuckets returns vLLM's 1-2-5 series up to maxModelLen.
func tokenBuckets(maxModelLen int) []float64 {
	var b []float64
	for exp := 1.0; ; exp *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := m * exp
			if v > float64(maxModelLen) {
				return b
			}
			b = append(b, v)
		}
	}
}

type histogram struct {
	buckets []float64
	counts  []uint64
	sum     float64
	count   uint64
}

func newHistogram(buckets []float64) histogram {
	return histogram{buckets: buckets, counts: make([]uint64, len(buckets))}
}

func (h *histogram) observe(v float64) {
	i := sort.SearchFloat64s(h.buckets, v)
	if i < len(h.counts) {
		h.counts[i]++
	}
	h.sum += v
	h.count++
}

// modelMetrics holds one model's vLLM-named metrics. The engine goroutine
// writes them under mu; /metrics reads them under mu.
type modelMetrics struct {
	mu           sync.Mutex
	model        string
	running      int
	waiting      int
	preemptions  uint64 // the scheduler's, for vllm:num_preemptions_total
	promptTokens uint64
	genTokens    uint64
	kvUsage      float64
	pcQueries    uint64
	pcHits       uint64
	cachedTokens uint64 // prompt tokens served from the prefix cache, for llamacpp:prompt_tokens_cached_total
	maxTokens    int    // longest sequence seen (prompt + output), for llamacpp:n_tokens_max
	promptSecs   float64
	decodeSecs   float64
	decodeSteps  uint64
	cacheInfo    string // labels of vllm:cache_config_info
	success      map[string]uint64
	hist         map[string]*histogram
}

// histogram families in exposition order.
var histFamilies = []struct{ name, help string }{
	{"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."},
	{"vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds."},
	{"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."},
	{"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."},
	{"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."},
	{"vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."},
	{"vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."},
	{"vllm:request_prompt_tokens", "Number of prefill tokens processed."},
	{"vllm:request_generation_tokens", "Number of generation tokens processed."},
}

func newModelMetrics(mc ModelConfig) *modelMetrics {
	tb := tokenBuckets(mc.MaxModelLen)
	m := &modelMetrics{model: mc.Name, success: map[string]uint64{}, hist: map[string]*histogram{}}
	if bs := max(mc.BlockSize, 1); mc.KVCacheTokens > 0 {
		caching := "True"
		if mc.NoPrefixCaching {
			caching = "False"
		}
		m.cacheInfo = fmt.Sprintf(`block_size="%d",enable_prefix_caching="%s",num_gpu_blocks="%d"`, bs, caching, mc.KVCacheTokens/bs)
	}
	for _, f := range histFamilies {
		var b []float64
		switch f.name {
		case "vllm:time_to_first_token_seconds":
			b = ttftBuckets
		case "vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds":
			b = tpotBuckets
		case "vllm:request_prompt_tokens", "vllm:request_generation_tokens":
			b = tb
		default:
			b = requestLatencyBuckets
		}
		h := newHistogram(b)
		m.hist[f.name] = &h
	}
	return m
}

func (m *modelMetrics) setLoad(running, waiting int, preemptions uint64) {
	m.mu.Lock()
	m.running, m.waiting, m.preemptions = running, waiting, preemptions
	m.mu.Unlock()
}

func (m *modelMetrics) setKV(usage float64, queries, hits uint64) {
	m.mu.Lock()
	m.kvUsage, m.pcQueries, m.pcHits = usage, queries, hits
	m.mu.Unlock()
}

// observeStep records the tokens of one step. Called by the engine with
// the sequences that progressed, after scheduler.complete.
func (m *modelMetrics) observeStep(touched []*seq, end time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.decodeSteps++
	for _, q := range touched {
		switch {
		case q.target == 0: // pooling request: its prefill is all there is
			m.promptTokens += uint64(q.promptTokens)
			m.cachedTokens += uint64(q.cached)
		case q.generated == 1 && q.firstToken.Equal(end):
			m.promptTokens += uint64(q.promptTokens)
			m.cachedTokens += uint64(q.cached)
			m.promptSecs += end.Sub(q.scheduled).Seconds()
			m.genTokens++
			m.hist["vllm:time_to_first_token_seconds"].observe(end.Sub(q.arrival).Seconds())
		default:
			m.genTokens++
			itl := end.Sub(q.prevToken).Seconds()
			m.decodeSecs += itl
			m.hist["vllm:time_per_output_token_seconds"].observe(itl)
			m.hist["vllm:inter_token_latency_seconds"].observe(itl)
		}
		if q.generated >= q.target {
			m.maxTokens = max(m.maxTokens, q.promptTokens+q.generated)
			m.finish(q, end)
		}
	}
}

func (m *modelMetrics) finish(q *seq, end time.Time) {
	reason := q.finishReason
	if reason == "" {
		reason = "stop"
	}
	m.success[reason]++
	m.hist["vllm:e2e_request_latency_seconds"].observe(end.Sub(q.arrival).Seconds())
	m.hist["vllm:request_queue_time_seconds"].observe(q.scheduled.Sub(q.arrival).Seconds())
	prefillEnd := end
	if q.target > 0 {
		prefillEnd = q.firstToken
	}
	m.hist["vllm:request_prefill_time_seconds"].observe(prefillEnd.Sub(q.scheduled).Seconds())
	m.hist["vllm:request_decode_time_seconds"].observe(end.Sub(prefillEnd).Seconds())
	m.hist["vllm:request_prompt_tokens"].observe(float64(q.promptTokens))
	m.hist["vllm:request_generation_tokens"].observe(float64(q.generated))
}

// addAborted counts requests aborted because their client went away;
// vLLM reports them as finished_reason="abort".
func (m *modelMetrics) addAborted(n int) {
	m.mu.Lock()
	m.success["abort"] += uint64(n)
	m.mu.Unlock()
}

// load returns the current running and waiting counts.
func (m *modelMetrics) load() (running, waiting int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running, m.waiting
}

// writeMetrics writes the Prometheus text exposition (format 0.0.4) of all
// models, one family at a time as Prometheus requires.
func writeMetrics(w io.Writer, models []*modelMetrics) error {
	bw := bufio.NewWriter(w)
	for _, m := range models {
		m.mu.Lock()
		defer m.mu.Unlock()
	}
	labels := func(m *modelMetrics) string {
		return `model_name="` + escapeLabel(m.model) + `",engine="0"`
	}
	gauge := func(name, help string, v func(*modelMetrics) float64) {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for _, m := range models {
			fmt.Fprintf(bw, "%s{%s} %s\n", name, labels(m), fmtFloat(v(m)))
		}
	}
	counter := func(name, help string, v func(*modelMetrics) float64) {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
		for _, m := range models {
			fmt.Fprintf(bw, "%s{%s} %s\n", name, labels(m), fmtFloat(v(m)))
		}
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
		func(m *modelMetrics) float64 { return float64(m.running) })
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
		func(m *modelMetrics) float64 { return float64(m.waiting) })
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
		func(m *modelMetrics) float64 { return float64(m.promptTokens) })
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
		func(m *modelMetrics) float64 { return float64(m.genTokens) })
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
		func(m *modelMetrics) float64 { return m.kvUsage })
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
		func(m *modelMetrics) float64 { return float64(m.pcQueries) })
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
		func(m *modelMetrics) float64 { return float64(m.pcHits) })
	fmt.Fprintf(bw, "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n")
	for _, m := range models {
		if m.cacheInfo != "" {
			fmt.Fprintf(bw, "vllm:cache_config_info{%s,%s} 1.0\n", m.cacheInfo, labels(m))
		}
	}
	counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
		func(m *modelMetrics) float64 { return float64(m.preemptions) })
	const succ = "vllm:request_success_total"
	fmt.Fprintf(bw, "# HELP %s Count of successfully processed requests.\n# TYPE %s counter\n", succ, succ)
	for _, m := range models {
		for _, r := range []string{"abort", "length", "stop"} {
			fmt.Fprintf(bw, "%s{%s,finished_reason=%q} %s\n", succ, labels(m), r, fmtFloat(float64(m.success[r])))
		}
	}
	for _, f := range histFamilies {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s histogram\n", f.name, f.help, f.name)
		for _, m := range models {
			h := m.hist[f.name]
			var cum uint64
			for i, ub := range h.buckets {
				cum += h.counts[i]
				fmt.Fprintf(bw, "%s_bucket{%s,le=\"%s\"} %d\n", f.name, labels(m), fmtFloat(ub), cum)
			}
			fmt.Fprintf(bw, "%s_bucket{%s,le=\"+Inf\"} %d\n", f.name, labels(m), h.count)
			fmt.Fprintf(bw, "%s_sum{%s} %s\n", f.name, labels(m), fmtFloat(h.sum))
			fmt.Fprintf(bw, "%s_count{%s} %d\n", f.name, labels(m), h.count)
		}
	}
	return bw.Flush()
}

func fmtFloat(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func escapeLabel(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// writeLlamaMetrics writes llama-server's /metrics (started with --metrics)
// for its one model, with the names and help texts of llama.cpp's server
// (as build b6xxx-b11xxx expose them: no KV-cache usage gauge any more).
func writeLlamaMetrics(w io.Writer, m *modelMetrics) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	bw := bufio.NewWriter(w)
	one := func(typ, name, help string, v float64) {
		fmt.Fprintf(bw, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %s\n", name, help, name, typ, name, strconv.FormatFloat(v, 'f', -1, 64))
	}
	perSec := func(n uint64, secs float64) float64 {
		if secs <= 0 {
			return 0
		}
		return float64(n) / secs
	}
	computed := m.promptTokens - m.cachedTokens
	one("counter", "prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", float64(computed))
	one("counter", "prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", float64(m.cachedTokens))
	one("counter", "prompt_seconds_total", "Total time spent processing prompts", m.promptSecs)
	one("counter", "tokens_predicted_total", "Number of generation tokens processed", float64(m.genTokens))
	one("counter", "tokens_predicted_seconds_total", "Total time spent generating tokens", m.decodeSecs)
	one("counter", "n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding", float64(m.decodeSteps))
	one("counter", "n_tokens_max", "Largest observed sequence length (prompt + generation)", float64(m.maxTokens))
	one("gauge", "prompt_tokens_seconds", "Average prompt throughput in tokens/s", perSec(computed, m.promptSecs))
	one("gauge", "predicted_tokens_seconds", "Average generation throughput in tokens/s", perSec(m.genTokens, m.decodeSecs))
	one("gauge", "requests_processing", "Number of requests processing", float64(m.running))
	one("gauge", "requests_deferred", "Number of requests deferred", float64(m.waiting))
	return bw.Flush()
}
