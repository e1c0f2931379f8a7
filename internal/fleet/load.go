package fleet

import (
	"bytes"
	"math"
	"strconv"
)

// Load is what an engine's /metrics says about its queue and KV cache.
type Load struct {
	// Waiting is the number of requests queued in the engine, not yet
	// scheduled; Running those being generated.
	Waiting, Running float64
	// KVUsage is the share of the KV cache in use, 0–1; -1 when the
	// engine does not say.
	KVUsage float64
	// CacheTokens is the engine's KV capacity in tokens when it tells
	// (vLLM cache_config_info, SGLang max_total_num_tokens), else 0.
	CacheTokens int
}

// The metric names each engine exposes, as their sources spell them:
// vLLM (vllm/v1/metrics/loggers.py; kv_cache_usage_perc replaced
// gpu_cache_usage_perc in v1), SGLang (sglang/srt/metrics/collector.py,
// with --enable-metrics) and llama.cpp's server (with --metrics, which
// does not report KV use in recent versions).
var (
	waitingNames = [][]byte{[]byte("vllm:num_requests_waiting"), []byte("sglang:num_queue_reqs"), []byte("llamacpp:requests_deferred")}
	runningNames = [][]byte{[]byte("vllm:num_requests_running"), []byte("sglang:num_running_reqs"), []byte("llamacpp:requests_processing")}
	kvNames      = [][]byte{[]byte("vllm:kv_cache_usage_perc"), []byte("vllm:gpu_cache_usage_perc"), []byte("sglang:token_usage"), []byte("llamacpp:kv_cache_usage_ratio")}
)

// ParseLoad reads the Prometheus text exposition of an engine's
// /metrics. ok is false when none of the known queue metrics is there
// (not an engine, or metrics turned off). A metric given once per label
// set (one per model, or per data-parallel rank) is summed for queues and
// averaged for KV use.
func ParseLoad(text []byte) (l Load, ok bool) {
	l.KVUsage = -1
	var kvSum float64
	var kvN int
	var blocks, blockSize int
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, labels, value, good := splitSample(line)
		if !good {
			continue
		}
		switch {
		case oneOf(name, waitingNames):
			l.Waiting += value
			ok = true
		case oneOf(name, runningNames):
			l.Running += value
			ok = true
		case oneOf(name, kvNames):
			kvSum += value
			kvN++
		case string(name) == "sglang:max_total_num_tokens":
			l.CacheTokens = int(value)
		case string(name) == "vllm:cache_config_info":
			blocks = labelInt(labels, "num_gpu_blocks")
			blockSize = labelInt(labels, "block_size")
		}
	}
	if kvN > 0 {
		l.KVUsage = min(max(kvSum/float64(kvN), 0), 1)
	}
	if blocks > 0 && blockSize > 0 {
		l.CacheTokens = blocks * blockSize
	}
	return l, ok
}

func oneOf(name []byte, names [][]byte) bool {
	for _, n := range names {
		if bytes.Equal(name, n) {
			return true
		}
	}
	return false
}

// splitSample splits `name{labels} value [timestamp]`.
func splitSample(line []byte) (name, labels []byte, value float64, ok bool) {
	line = bytes.TrimRight(line, " \r\t")
	end := bytes.IndexAny(line, "{ ")
	if end <= 0 {
		return nil, nil, 0, false
	}
	name, rest := line[:end], line[end:]
	if rest[0] == '{' {
		close := bytes.LastIndexByte(rest, '}')
		if close < 0 {
			return nil, nil, 0, false
		}
		labels, rest = rest[1:close], rest[close+1:]
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 {
		return nil, nil, 0, false
	}
	v, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, nil, 0, false
	}
	return name, labels, v, true
}

// labelInt reads an integer label value (`key="123"`).
func labelInt(labels []byte, key string) int {
	k := []byte(key + `="`)
	for {
		i := bytes.Index(labels, k)
		if i < 0 {
			return 0
		}
		if i == 0 || labels[i-1] == ',' || labels[i-1] == ' ' {
			rest := labels[i+len(k):]
			j := bytes.IndexByte(rest, '"')
			if j < 0 {
				return 0
			}
			n, err := strconv.ParseFloat(string(rest[:j]), 64)
			if err != nil || n < 0 || n > 1<<40 {
				return 0
			}
			return int(n)
		}
		labels = labels[i+len(k):]
	}
}
