package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Config describes one simulator instance: the models it serves, the API
// key it requires, and the faults it injects.
type Config struct {
	// Models are served side by side, each with its own engine loop, as if
	// each ran on its own GPU.
	Models []ModelConfig
	// APIKey, when set, is required as "Authorization: Bearer <key>" on /v1
	// routes; a wrong or missing key gets vLLM's 401 {"error": "Unauthorized"}.
	APIKey string
	// StartupDelay keeps /health at 503 (and the API at 503) for this long
	// after New, as if weights were loading.
	StartupDelay time.Duration
	// Faults injects errors at the given rates.
	Faults Faults
	// Seed makes fault injection and unseeded sampling reproducible; 0 picks
	// a seed from the clock.
	Seed int64
	// QueueFullStatus is the HTTP status for requests rejected because a
	// model's waiting queue is full: 503 (default; what vLLM's
	// --max-num-queued-reqs admission control answers, and what RFC #18826
	// proposed) or 429 (as in vLLM PR #49330).
	QueueFullStatus int
	// Version is reported by /version; empty means DefaultVLLMVersion.
	Version string
	// ToolCallRate is the probability that a chat request offering tools
	// with tool_choice "auto" (or none given) is answered with a tool call.
	// 0 (the default) never calls a tool unless tool_choice requires one.
	// The draw is seeded like the text, so a request's seed (or greedy
	// sampling) makes it reproducible. Answers to a tool result (a "tool"
	// message after the last assistant message) are text.
	ToolCallRate float64
	// MaxParallelToolCalls lets a tool-calling answer hold 1 to this many
	// calls when the request does not set parallel_tool_calls to false; 0
	// or 1 means one call per answer. A named tool_choice always gets one.
	MaxParallelToolCalls int
	// Engine is the engine the simulator answers as where engines differ:
	// EngineVLLM ("" too) or EngineLlamaCpp (see llamaCpp for what
	// changes). A llama.cpp simulator serves one model.
	Engine string
	// HidePromptTokensDetails answers usage.prompt_tokens_details as a vLLM
	// started without --enable-prompt-tokens-details does (null, or absent
	// in streams). By default the simulator reports
	// {"cached_tokens": N}, the prompt tokens its prefix cache served, as
	// vLLM with that flag and llama-server do.
	HidePromptTokensDetails bool
	// Script, when set, answers chat requests with canned turns (see
	// LoadScript); requests no turn matches fall back to the generator or
	// get an error, as the script says.
	Script *Script
}

// Faults are injected failure rates, each a probability in [0, 1].
type Faults struct {
	// Fail429Rate answers this fraction of generation requests with 429.
	Fail429Rate float64
	// Fail500Rate answers this fraction of generation requests with 500.
	Fail500Rate float64
	// CutStreamRate aborts this fraction of streams mid-way: the connection
	// is dropped after some tokens, without a finish chunk or [DONE].
	CutStreamRate float64
}

// ModelConfig is the timing model and limits of one served model.
//
// Timing of one engine step (see the package documentation for the
// scheduling rules):
//
//	step = DecodeBase + DecodePerSeq*B                 (B = sequences in the batch)
//	     + PrefillBase + PrefillPerToken*T             (only if T > 0 prompt tokens are prefilled)
//
// so at batch size 1 a request with P prompt tokens sees
//
//	TTFT = PrefillBase + PrefillPerToken*P + DecodeBase + DecodePerSeq
//	ITL  = DecodeBase + DecodePerSeq
type ModelConfig struct {
	// Name is the served model name clients send as "model".
	Name string
	// Preset names the preset this configuration started from, if any. A
	// ModelConfig that sets only Name (and optionally Preset) takes every
	// figure from the preset: Preset if set, else the preset matching Name
	// (see PresetFor).
	Preset string
	// Root is the model path vLLM reports as "root" in /v1/models
	// (a Hugging Face repository id); empty means Name.
	Root string
	// MaxNumSeqs is the most sequences running at once (vLLM --max-num-seqs).
	MaxNumSeqs int
	// MaxQueue bounds the FIFO of waiting requests; beyond it requests are
	// rejected with QueueFullStatus. 0 means unbounded (vLLM's default).
	MaxQueue int
	// MaxModelLen is the context length: prompt + max_tokens must fit.
	MaxModelLen int
	// MaxNumBatchedTokens is the per-step token budget (vLLM
	// --max-num-batched-tokens): decodes take one token each, prefills take
	// the rest, and long prompts are prefilled in chunks over several steps.
	// 0 means no budget (a whole prompt is prefilled in one step).
	MaxNumBatchedTokens int
	// PrefillBase is the fixed cost added to a step that prefills anything.
	PrefillBase time.Duration
	// PrefillPerToken is the cost of each prompt token prefilled in a step.
	PrefillPerToken time.Duration
	// DecodeBase is the fixed cost of every step (one forward pass).
	DecodeBase time.Duration
	// DecodePerSeq is the extra step cost per sequence in the batch.
	DecodePerSeq time.Duration
	// MeanOutputTokens is the mean length of a natural (EOS) ending when the
	// request does not set ignore_eos; lengths are exponentially distributed.
	MeanOutputTokens int
	// EmbeddingDim is the length of /v1/embeddings vectors.
	EmbeddingDim int
	// Reasoning makes chat answers start with reasoning_content, as a vLLM
	// server started with a --reasoning-parser for the model returns it
	// (Qwen3: chat_template_kwargs {"enable_thinking": false} turns it off).
	Reasoning bool
	// MeanReasoningTokens is the mean length of the reasoning before the
	// answer (exponentially distributed); 0 means 192.
	MeanReasoningTokens int
	// KVCacheTokens is the KV cache's capacity in tokens (vLLM logs it at
	// start as "GPU KV cache size: N tokens"): the prompts and outputs of
	// the running sequences, and the cached prefixes nobody uses, share it
	// (see kvcache.go); when decoding outgrows it, the most recently
	// admitted request is preempted. It must hold at least one MaxModelLen
	// sequence, so that a request running alone always fits.
	// 0 means the preset's figure, or DefaultKVCacheTokens.
	KVCacheTokens int
	// BlockSize is the KV cache's block size in tokens (vLLM --block-size):
	// prefixes are cached and reused in whole blocks. 0 means 16, or 1 for
	// the llama.cpp face (llama-server reuses a prompt's cached prefix token
	// by token).
	BlockSize int
	// NoPrefixCaching turns the prefix cache off (vLLM
	// --no-enable-prefix-caching): every prompt token is prefilled, and the
	// cache only bounds how many sequences fit.
	NoPrefixCaching bool
	// Watermark is the fraction of the KV cache's blocks that admitting a
	// waiting or preempted request leaves free while other requests run, so
	// that running ones can grow into them (vLLM --watermark; 0, vLLM's
	// default, keeps none).
	Watermark float64
	// NoReserveFullISL admits a waiting request when blocks for its first
	// prefill chunk are free, as vLLM did before admission checked the
	// whole input (vLLM --scheduler-reserve-full-isl=false). By default
	// the whole prompt (and, for a preempted request, its generated tokens)
	// must fit, beyond its prefix-cache hits.
	NoReserveFullISL bool

	// minPrefixShare is the least share of a prompt a cached prefix must
	// cover to be reused: llama-server's --slot-prompt-similarity (0.1) for
	// the llama.cpp face, whose request lands in a fresh slot otherwise.
	minPrefixShare float64
	// reserveOutput makes the KV cache reserve a request's prompt and its
	// whole output at admission, so nothing is ever preempted: the
	// llama.cpp face, whose slots each own their context.
	reserveOutput bool
}

// DefaultKVCacheTokens is the KV-cache capacity of a model configuration
// that sets none and matches no preset: the 7B preset's.
const DefaultKVCacheTokens = 938192

// presetKVCacheTokens is what each preset's GPU holds of KV cache after
// the weights (see the package documentation). It is applied when a
// configuration sets no KVCacheTokens, so that the llama.cpp face can tell
// "not set" from a figure.
var presetKVCacheTokens = map[string]int{
	"qwen2.5-7b-instruct":  DefaultKVCacheTokens,
	"qwen2.5-32b-instruct": 49152,
	"qwen3-32b":            43520,
}

// KVCacheTokensFor is the KV-cache capacity a model configuration gets
// when answering as engine: its KVCacheTokens when set; otherwise, for
// vLLM, its preset's figure (DefaultKVCacheTokens for none), and for
// llama.cpp, MaxModelLen × MaxNumSeqs up to 262144 tokens; never less
// than MaxModelLen.
func KVCacheTokensFor(mc ModelConfig, engine string) int {
	if mc.KVCacheTokens != 0 {
		return mc.KVCacheTokens
	}
	if engine == EngineLlamaCpp {
		return max(mc.MaxModelLen, min(mc.MaxModelLen*mc.MaxNumSeqs, llamaCacheTokensMax))
	}
	kv, ok := presetKVCacheTokens[strings.ToLower(mc.Preset)]
	if !ok {
		kv = DefaultKVCacheTokens
	}
	return max(kv, mc.MaxModelLen)
}

// llamaCacheTokensMax bounds the llama.cpp face's default cache, which is
// kept token by token.
const llamaCacheTokensMax = 262144

// DefaultBlockSize is vLLM's KV-cache block size on GPUs.
const DefaultBlockSize = 16

// DefaultVLLMVersion is the vLLM release whose response shapes the
// simulator reproduces.
const DefaultVLLMVersion = "0.11.0"

// DefaultPreset is the preset used for model names that match no preset:
// a 7B model in bf16 on one 80 GB data-centre GPU.
const DefaultPreset = "qwen2.5-7b-instruct"

// Presets returns the built-in timing profiles by preset name. The figures
// and their sources are documented in the package documentation.
func Presets() map[string]ModelConfig {
	return map[string]ModelConfig{
		"qwen2.5-7b-instruct": {
			Name: "qwen2.5-7b-instruct", Preset: "qwen2.5-7b-instruct", Root: "Qwen/Qwen2.5-7B-Instruct",
			MaxNumSeqs: 256, MaxQueue: 1024, MaxModelLen: 32768, MaxNumBatchedTokens: 8192,
			PrefillBase: 8 * time.Millisecond, PrefillPerToken: 80 * time.Microsecond,
			DecodeBase: 12 * time.Millisecond, DecodePerSeq: 150 * time.Microsecond,
			MeanOutputTokens: 256, EmbeddingDim: 1024,
		},
		"qwen2.5-32b-instruct": {
			Name: "qwen2.5-32b-instruct", Preset: "qwen2.5-32b-instruct", Root: "Qwen/Qwen2.5-32B-Instruct",
			MaxNumSeqs: 64, MaxQueue: 1024, MaxModelLen: 32768, MaxNumBatchedTokens: 8192,
			PrefillBase: 15 * time.Millisecond, PrefillPerToken: 120 * time.Microsecond,
			DecodeBase: 24 * time.Millisecond, DecodePerSeq: 400 * time.Microsecond,
			MeanOutputTokens: 256, EmbeddingDim: 1024,
		},
		"qwen3-32b": {
			Name: "qwen3-32b", Preset: "qwen3-32b", Root: "Qwen/Qwen3-32B",
			MaxNumSeqs: 64, MaxQueue: 1024, MaxModelLen: 40960, MaxNumBatchedTokens: 8192,
			PrefillBase: 16 * time.Millisecond, PrefillPerToken: 125 * time.Microsecond,
			DecodeBase: 25 * time.Millisecond, DecodePerSeq: 450 * time.Microsecond,
			MeanOutputTokens: 384, EmbeddingDim: 1024, Reasoning: true, MeanReasoningTokens: 192,
		},
	}
}

// PresetNames returns the preset names in sorted order.
func PresetNames() []string {
	p := Presets()
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PresetFor returns the profile for a served model name: the preset whose
// name equals the model name, or its last path element (so
// "Qwen/Qwen2.5-7B-Instruct" finds "qwen2.5-7b-instruct"), case-insensitively;
// otherwise DefaultPreset. The returned config carries name as its Name, and
// ok reports whether a preset matched.
func PresetFor(name string) (mc ModelConfig, ok bool) {
	key := strings.ToLower(name)
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		key = key[i+1:]
	}
	presets := Presets()
	mc, ok = presets[key]
	if !ok {
		mc = presets[DefaultPreset]
		mc.Root = name
	} else if strings.Contains(name, "/") {
		mc.Root = name
	}
	mc.Name = name
	return mc, ok
}

// ModelsFor returns one model configuration per name via PresetFor, so
// ModelsFor("qwen2.5-7b-instruct", "qwen2.5-32b-instruct", "qwen3-32b")
// gives the three preset engines of the demo.
func ModelsFor(names ...string) []ModelConfig {
	out := make([]ModelConfig, len(names))
	for i, n := range names {
		out[i], _ = PresetFor(n)
	}
	return out
}

// unconfigured reports whether no figure is set, only names.
func (m *ModelConfig) unconfigured() bool {
	return m.MaxNumSeqs == 0 && m.MaxQueue == 0 && m.MaxModelLen == 0 && m.MaxNumBatchedTokens == 0 &&
		m.PrefillBase == 0 && m.PrefillPerToken == 0 && m.DecodeBase == 0 && m.DecodePerSeq == 0 &&
		m.MeanOutputTokens == 0 && m.EmbeddingDim == 0
}

// validate checks one model's parameters and fills unset optional ones.
func (m *ModelConfig) validate() error {
	if strings.TrimSpace(m.Name) == "" {
		return fmt.Errorf("model name is empty")
	}
	if m.unconfigured() {
		name, root := m.Name, m.Root
		reasoning, meanReasoning := m.Reasoning, m.MeanReasoningTokens
		kvTokens, blockSize, noCaching := m.KVCacheTokens, m.BlockSize, m.NoPrefixCaching
		watermark, noFullISL := m.Watermark, m.NoReserveFullISL
		base, _ := PresetFor(name)
		if m.Preset != "" {
			p, ok := Presets()[strings.ToLower(m.Preset)]
			if !ok {
				return fmt.Errorf("model %q: unknown preset %q (presets: %s)", name, m.Preset, strings.Join(PresetNames(), ", "))
			}
			base = p
		}
		*m = base
		m.Name = name
		if root != "" {
			m.Root = root
		}
		// Behaviour set next to a bare name is kept over the preset's.
		m.Reasoning = m.Reasoning || reasoning
		if meanReasoning > 0 {
			m.MeanReasoningTokens = meanReasoning
		}
		if kvTokens != 0 {
			m.KVCacheTokens = kvTokens
		}
		m.BlockSize, m.NoPrefixCaching = blockSize, noCaching
		m.Watermark, m.NoReserveFullISL = watermark, noFullISL
	}
	if !(m.Watermark >= 0 && m.Watermark < 1) {
		return fmt.Errorf("model %q: watermark is a fraction of the KV cache's blocks: at least 0 and below 1, got %v", m.Name, m.Watermark)
	}
	if m.MaxNumSeqs < 1 {
		return fmt.Errorf("model %q: max-num-seqs must be at least 1, got %d", m.Name, m.MaxNumSeqs)
	}
	if m.MaxQueue < 0 {
		return fmt.Errorf("model %q: max-queue must be 0 (unbounded) or positive, got %d", m.Name, m.MaxQueue)
	}
	if m.MaxModelLen < 2 {
		return fmt.Errorf("model %q: max-model-len must be at least 2, got %d", m.Name, m.MaxModelLen)
	}
	if m.MaxNumBatchedTokens < 0 {
		return fmt.Errorf("model %q: max-num-batched-tokens must be 0 (no budget) or positive", m.Name)
	}
	if m.MaxNumBatchedTokens > 0 && m.MaxNumBatchedTokens <= m.MaxNumSeqs {
		return fmt.Errorf("model %q: max-num-batched-tokens (%d) must exceed max-num-seqs (%d) so prefills can progress",
			m.Name, m.MaxNumBatchedTokens, m.MaxNumSeqs)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"prefill-base", m.PrefillBase}, {"prefill-per-token", m.PrefillPerToken},
		{"decode-base", m.DecodeBase}, {"decode-per-seq", m.DecodePerSeq}} {
		if d.v < 0 {
			return fmt.Errorf("model %q: %s must not be negative", m.Name, d.name)
		}
	}
	if m.DecodeBase+m.DecodePerSeq <= 0 {
		return fmt.Errorf("model %q: decode-base + decode-per-seq must be positive, or the engine would spin", m.Name)
	}
	if m.MeanOutputTokens <= 0 {
		m.MeanOutputTokens = 256
	}
	if m.EmbeddingDim <= 0 {
		m.EmbeddingDim = 1024
	}
	if m.MeanReasoningTokens <= 0 {
		m.MeanReasoningTokens = 192
	}
	if m.Root == "" {
		m.Root = m.Name
	}
	if m.BlockSize == 0 {
		m.BlockSize = DefaultBlockSize
	}
	if m.BlockSize < 0 {
		return fmt.Errorf("model %q: block-size must be positive, got %d", m.Name, m.BlockSize)
	}
	m.KVCacheTokens = KVCacheTokensFor(*m, EngineVLLM)
	if m.KVCacheTokens < m.MaxModelLen {
		return fmt.Errorf("model %q: kv-cache-tokens (%d) must hold at least one sequence of max-model-len (%d) tokens, as vLLM refuses to start otherwise; raise --kv-cache-tokens or lower --max-model-len",
			m.Name, m.KVCacheTokens, m.MaxModelLen)
	}
	if m.KVCacheTokens/m.BlockSize*m.BlockSize < m.MaxModelLen {
		return fmt.Errorf("model %q: kv-cache-tokens (%d) in blocks of %d tokens hold fewer than max-model-len (%d) tokens; raise --kv-cache-tokens",
			m.Name, m.KVCacheTokens, m.BlockSize, m.MaxModelLen)
	}
	return nil
}

func (c *Config) validate() error {
	if len(c.Models) == 0 {
		return fmt.Errorf("no models configured: give at least one model")
	}
	switch c.Engine {
	case "", EngineVLLM:
	case EngineLlamaCpp:
		if len(c.Models) != 1 {
			return fmt.Errorf("engine %s serves one model (llama-server loads one), got %d", c.Engine, len(c.Models))
		}
	default:
		return fmt.Errorf("engine must be %s or %s, got %q", EngineVLLM, EngineLlamaCpp, c.Engine)
	}
	seen := map[string]bool{}
	for i := range c.Models {
		if mc := &c.Models[i]; c.Engine == EngineLlamaCpp {
			// llama-server reuses a slot's cached prompt token by token, and
			// each of its slots may fill the context.
			if mc.BlockSize == 0 {
				mc.BlockSize = 1
			}
			kv := mc.KVCacheTokens
			if err := mc.validate(); err != nil { // fills the rest of the figures
				return err
			}
			if kv == 0 {
				mc.KVCacheTokens = 0
				mc.KVCacheTokens = KVCacheTokensFor(*mc, EngineLlamaCpp)
			}
			mc.minPrefixShare = 0.1
			mc.reserveOutput = true
		}
		if err := c.Models[i].validate(); err != nil {
			return err
		}
		if seen[c.Models[i].Name] {
			return fmt.Errorf("model %q is configured twice", c.Models[i].Name)
		}
		seen[c.Models[i].Name] = true
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"fail-429-rate", c.Faults.Fail429Rate}, {"fail-500-rate", c.Faults.Fail500Rate}, {"cut-stream-rate", c.Faults.CutStreamRate},
		{"tool-call-rate", c.ToolCallRate}} {
		if r.v < 0 || r.v > 1 {
			return fmt.Errorf("%s must be between 0 and 1, got %g", r.name, r.v)
		}
	}
	if c.MaxParallelToolCalls < 0 {
		return fmt.Errorf("max-parallel-tool-calls must not be negative, got %d", c.MaxParallelToolCalls)
	}
	if c.StartupDelay < 0 {
		return fmt.Errorf("startup delay must not be negative")
	}
	switch c.QueueFullStatus {
	case 0:
		c.QueueFullStatus = 503
	case 429, 503:
	default:
		return fmt.Errorf("queue-full status must be 429 or 503, got %d", c.QueueFullStatus)
	}
	if c.Version == "" {
		c.Version = DefaultVLLMVersion
	}
	return nil
}
