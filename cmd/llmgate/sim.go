package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"llmgate/internal/sim"
)

// newSimCmd builds `llmgate sim`: a vLLM-compatible engine simulator with a
// continuous-batching timing model.
func newSimCmd() *cobra.Command {
	var (
		models    []string
		listen    string
		preset    string
		cfg       sim.Config
		m         sim.ModelConfig
		listAll   bool
		script    string
		replicas  int
		noPrefix  bool
		prefix    bool
		details   bool
		fullISL   bool
		noFullISL bool
	)
	cmd := &cobra.Command{
		Use:   "sim --model NAME [--model NAME2 ...] [--listen 127.0.0.1:8000]",
		Short: "Run a simulated vLLM (or llama.cpp) server (continuous batching timing model, no GPU)",
		Long: `Run an OpenAI-compatible server that answers like vLLM, field for field, with the
timing of a continuous-batching engine: at most --max-num-seqs sequences run at once, the
rest wait in a FIFO queue; prefill cost grows with prompt tokens; each decode step costs
--decode-base + --decode-per-seq x (sequences in the batch) and gives every running
sequence one token.

Model names that match a preset (` + strings.Join(sim.PresetNames(), ", ") + `, also as
Hugging Face ids such as Qwen/Qwen2.5-7B-Instruct) take that preset's figures; other names
take --preset (default ` + sim.DefaultPreset + `). Timing flags given explicitly override
the preset for every model.

Chat requests that offer tools get tool calls with schema-valid arguments when
tool_choice requires one, and at --tool-call-rate with tool_choice "auto". Reasoning
models (qwen3-32b; --reasoning for others) send reasoning_content before the answer.

--script FILE answers chat requests with canned turns (YAML or JSON) so agent runs are
deterministic:

  on_unmatched: generate            # or error
  turns:
    - match: "read the file hello.txt"   # substring of the new user/tool messages
      tool_calls:                        # used only if the request offers the tool
        - name: Read
          arguments: {file_path: /work/hello.txt}
    - match: "SENTINEL-42"               # e.g. the tool's output
      text: "The file says SENTINEL-42."

Turns without match: answer in order, once each. Other keys: when_tool, model,
after_tool, reasoning, id (of a call). See the sim package documentation.`,
		Example: `  llmgate sim --model qwen2.5-7b-instruct
  llmgate sim --model qwen2.5-7b-instruct --model qwen3-32b --listen 127.0.0.1:9000
  llmgate sim --model my-model --decode-base 20ms --max-num-seqs 8 --fail-429-rate 0.05
  llmgate sim --model qwen2.5-7b-instruct --tool-call-rate 0.3 --max-parallel-tool-calls 2
  llmgate sim --model qwen2.5-7b-instruct --script agent-turns.yaml
  llmgate sim --engine llamacpp --model qwen3-tiny --max-model-len 2048 --max-num-seqs 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listAll {
				for _, n := range sim.PresetNames() {
					printModel(cmd, sim.Presets()[n], sim.EngineVLLM)
				}
				return nil
			}
			if len(models) == 0 {
				return fmt.Errorf("give at least one --model NAME (presets: %s)", strings.Join(sim.PresetNames(), ", "))
			}
			base, ok := sim.Presets()[strings.ToLower(preset)]
			if !ok {
				return fmt.Errorf("unknown --preset %q (presets: %s)", preset, strings.Join(sim.PresetNames(), ", "))
			}
			fl := cmd.Flags()
			for _, name := range models {
				mc, matched := sim.PresetFor(name)
				if !matched {
					mc = base
					mc.Name, mc.Root = name, name
				}
				override := func(flag string, apply func()) {
					if fl.Changed(flag) {
						apply()
					}
				}
				override("max-num-seqs", func() { mc.MaxNumSeqs = m.MaxNumSeqs })
				override("max-queue", func() { mc.MaxQueue = m.MaxQueue })
				override("max-model-len", func() { mc.MaxModelLen = m.MaxModelLen })
				override("max-num-batched-tokens", func() { mc.MaxNumBatchedTokens = m.MaxNumBatchedTokens })
				override("prefill-base", func() { mc.PrefillBase = m.PrefillBase })
				override("prefill-per-token", func() { mc.PrefillPerToken = m.PrefillPerToken })
				override("decode-base", func() { mc.DecodeBase = m.DecodeBase })
				override("decode-per-seq", func() { mc.DecodePerSeq = m.DecodePerSeq })
				override("mean-output-tokens", func() { mc.MeanOutputTokens = m.MeanOutputTokens })
				override("embedding-dim", func() { mc.EmbeddingDim = m.EmbeddingDim })
				override("reasoning", func() { mc.Reasoning = m.Reasoning })
				override("mean-reasoning-tokens", func() { mc.MeanReasoningTokens = m.MeanReasoningTokens })
				override("kv-cache-tokens", func() { mc.KVCacheTokens = m.KVCacheTokens })
				override("block-size", func() { mc.BlockSize = m.BlockSize })
				mc.NoPrefixCaching = noPrefix || !prefix
				mc.NoReserveFullISL = noFullISL || !fullISL
				mc.Watermark = m.Watermark
				cfg.Models = append(cfg.Models, mc)
			}
			if cfg.APIKey == "" {
				cfg.APIKey = os.Getenv("VLLM_API_KEY")
			}
			if script != "" {
				sc, err := sim.LoadScript(script)
				if err != nil {
					return err
				}
				cfg.Script = sc
			}
			cfg.HidePromptTokensDetails = !details
			addrs, err := replicaAddrs(listen, replicas)
			if err != nil {
				return err
			}
			ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			var bound []string
			for i, a := range addrs {
				rc := cfg
				rc.Models = append([]sim.ModelConfig(nil), cfg.Models...)
				if rc.Seed != 0 {
					rc.Seed += int64(i) // replicas draw differently, reproducibly
				}
				addr, stop, err := sim.Listen(ctx, a, rc)
				if err != nil {
					return err
				}
				defer stop()
				bound = append(bound, addr)
			}
			addr := bound[0]
			out := cmd.OutOrStdout()
			face := "vLLM"
			if cfg.Engine == sim.EngineLlamaCpp {
				face = "llama.cpp (llama-server)"
			}
			if len(bound) == 1 {
				fmt.Fprintf(out, "llmgate sim: %s-compatible simulator on http://%s/v1\n", face, addr)
			} else {
				fmt.Fprintf(out, "llmgate sim: %d %s-compatible simulator replicas (each its own engine and KV cache):\n", len(bound), face)
				for _, a := range bound {
					fmt.Fprintf(out, "  http://%s/v1\n", a)
				}
			}
			for _, mc := range cfg.Models {
				printModel(cmd, mc, cfg.Engine)
			}
			if cfg.StartupDelay > 0 {
				fmt.Fprintf(out, "  /health turns 200 after the startup delay of %s\n", cfg.StartupDelay)
			}
			if cfg.APIKey != "" {
				fmt.Fprintln(out, "  API key required: Authorization: Bearer <key> (the try line below sends it)")
			}
			if cfg.Script != nil {
				fmt.Fprintf(out, "  chat answers scripted by %s (%d turns; unmatched requests: %s)\n",
					script, len(cfg.Script.Turns()), cfg.Script.OnUnmatched())
			}
			if cfg.ToolCallRate > 0 {
				fmt.Fprintf(out, "  tool_choice \"auto\" calls a tool in %.0f%% of answers\n", 100*cfg.ToolCallRate)
			}
			fmt.Fprintf(out, "  try: %s\n", tryCurl(addr, cfg.Models[0].Name, cfg.APIKey))
			<-ctx.Done()
			fmt.Fprintln(out, "llmgate sim: shutting down")
			return nil
		},
	}
	d, _ := sim.PresetFor(sim.DefaultPreset)
	f := cmd.Flags()
	f.StringArrayVar(&models, "model", nil, "Served model name (repeat for several models, one engine each)")
	f.StringVar(&listen, "listen", "127.0.0.1:8000", "Address to listen on")
	f.StringVar(&preset, "preset", sim.DefaultPreset, "Preset for model names that match none")
	f.BoolVar(&listAll, "list-presets", false, "Print the presets and exit")
	f.StringVar(&cfg.APIKey, "api-key", "", "Require this API key on /v1 routes; when not given, $VLLM_API_KEY")
	f.DurationVar(&cfg.StartupDelay, "startup-delay", 0, "Answer /health with 503 for this long, as if loading weights")
	f.Float64Var(&cfg.Faults.Fail429Rate, "fail-429-rate", 0, "Fraction of requests answered with 429")
	f.Float64Var(&cfg.Faults.Fail500Rate, "fail-500-rate", 0, "Fraction of requests answered with 500")
	f.Float64Var(&cfg.Faults.CutStreamRate, "cut-stream-rate", 0, "Fraction of streams dropped mid-way without [DONE]")
	f.Int64Var(&cfg.Seed, "seed", 0, "Seed for fault injection and unseeded sampling (0 = random)")
	f.IntVar(&cfg.QueueFullStatus, "queue-full-status", 503, "Status for requests beyond --max-queue: 503 or 429")
	f.IntVar(&m.MaxNumSeqs, "max-num-seqs", d.MaxNumSeqs, "Most sequences running at once")
	f.IntVar(&m.MaxQueue, "max-queue", d.MaxQueue, "Most requests waiting; 0 = unbounded")
	f.IntVar(&m.MaxModelLen, "max-model-len", d.MaxModelLen, "Context length (prompt + max_tokens)")
	f.IntVar(&m.MaxNumBatchedTokens, "max-num-batched-tokens", d.MaxNumBatchedTokens, "Token budget per step (chunked prefill); 0 = none")
	f.DurationVar(&m.PrefillBase, "prefill-base", d.PrefillBase, "Fixed cost of a step that prefills")
	f.DurationVar(&m.PrefillPerToken, "prefill-per-token", d.PrefillPerToken, "Cost per prompt token prefilled")
	f.DurationVar(&m.DecodeBase, "decode-base", d.DecodeBase, "Fixed cost of every step")
	f.DurationVar(&m.DecodePerSeq, "decode-per-seq", d.DecodePerSeq, "Extra step cost per sequence in the batch")
	f.IntVar(&m.MeanOutputTokens, "mean-output-tokens", d.MeanOutputTokens, "Mean length of a natural ending (without ignore_eos)")
	f.IntVar(&m.EmbeddingDim, "embedding-dim", d.EmbeddingDim, "Length of embedding vectors")
	f.BoolVar(&m.Reasoning, "reasoning", false, "Answer with reasoning_content first, as with --reasoning-parser; when not given, the preset's (qwen3-32b reasons)")
	f.IntVar(&m.MeanReasoningTokens, "mean-reasoning-tokens", 192, "Mean length of the reasoning of reasoning models")
	f.Float64Var(&cfg.ToolCallRate, "tool-call-rate", 0, "Fraction of tool_choice \"auto\" requests with tools answered by a tool call")
	f.IntVar(&cfg.MaxParallelToolCalls, "max-parallel-tool-calls", 0, "Allow up to this many calls per answer (unless parallel_tool_calls is false); 0 or 1 = one")
	f.StringVar(&script, "script", "", "Answer chat requests with the canned turns of this YAML or JSON file")
	f.IntVar(&m.KVCacheTokens, "kv-cache-tokens", 0, "KV-cache capacity in tokens (running sequences and cached prefixes share it; requests wait when it is full, and the newest running one is preempted when decoding outgrows it); 0 = the preset's (--list-presets shows it), or max-model-len x max-num-seqs (at most 262144) for --engine llamacpp")
	f.IntVar(&m.BlockSize, "block-size", 0, "KV-cache block size in tokens: prefixes are cached in whole blocks; 0 = 16 (vLLM), 1 for --engine llamacpp")
	f.BoolVar(&noPrefix, "no-enable-prefix-caching", false, "Turn the prefix cache off: every prompt token is prefilled (vLLM's flag)")
	f.BoolVar(&prefix, "enable-prefix-caching", true, "Reuse cached prompt prefixes (automatic prefix caching); =false is --no-enable-prefix-caching")
	f.Float64Var(&m.Watermark, "watermark", 0, "Fraction of the KV cache's blocks that admitting a waiting or preempted request leaves free while others run, room for running requests to grow into (vLLM's flag; 0 = none, vLLM's default)")
	f.BoolVar(&fullISL, "scheduler-reserve-full-isl", true, "Admit a waiting request only when its whole prompt fits in the KV cache, not just its first prefill chunk (vLLM's flag and default); =false is --no-scheduler-reserve-full-isl")
	f.BoolVar(&noFullISL, "no-scheduler-reserve-full-isl", false, "Admit a waiting request when its first prefill chunk fits (vLLM's rule before the whole-input check)")
	f.BoolVar(&details, "enable-prompt-tokens-details", true, "Report usage.prompt_tokens_details.cached_tokens (vLLM's flag; vLLM's default is off, and it leaves the details out when nothing was cached)")
	f.IntVar(&replicas, "replicas", 1, "Run this many independent replicas (each its own engine and KV cache) on consecutive ports from --listen's")
	f.StringVar(&cfg.Engine, "engine", sim.EngineVLLM, "Answer as this engine where engines differ: vllm or llamacpp (llama-server: /props, /apply-template, its /tokenize, its errors, one model served whatever the name, connection closed after each stream)")
	return cmd
}

// replicaAddrs returns the listen addresses of n replicas: listen's port
// and the n-1 after it, or n random ports when listen's port is 0.
func replicaAddrs(listen string, n int) ([]string, error) {
	if n < 1 {
		return nil, fmt.Errorf("--replicas must be at least 1, got %d", n)
	}
	if n == 1 {
		return []string{listen}, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %v (give host:port)", listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p+n-1 > 65535 {
		return nil, fmt.Errorf("--listen %q: the port and the %d after it must be valid ports", listen, n-1)
	}
	addrs := make([]string, n)
	for i := range addrs {
		q := p + i
		if p == 0 {
			q = 0
		}
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(q))
	}
	return addrs, nil
}

// tryCurl is a curl command that works against the simulator as printed:
// with the API key it requires, when it requires one.
func tryCurl(addr, model, apiKey string) string {
	body, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": "Hello"}}})
	line := "curl -s http://" + addr + "/v1/chat/completions -H 'Content-Type: application/json'"
	if apiKey != "" {
		line += " -H " + shellQuote("Authorization: Bearer "+apiKey)
	}
	return line + " -d " + shellQuote(string(body))
}

func printModel(cmd *cobra.Command, mc sim.ModelConfig, engine string) {
	itl := mc.DecodeBase + mc.DecodePerSeq
	reasoning := ""
	if mc.Reasoning {
		reasoning = ", reasoning"
	}
	cache := fmt.Sprintf(", KV cache %d tokens", sim.KVCacheTokensFor(mc, engine))
	if mc.NoPrefixCaching {
		cache += ", prefix caching off"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "  %-24s max-num-seqs %d, max-model-len %d, decode %s/token at batch 1, prefill %s + %s/token%s%s\n",
		mc.Name, mc.MaxNumSeqs, mc.MaxModelLen, itl.Round(10*time.Microsecond), mc.PrefillBase, mc.PrefillPerToken, cache, reasoning)
}
