package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"llmgate/internal/bench"
)

// benchFlags holds the bench command's flags before they become Options.
type benchFlags struct {
	config, baseURL, apiKey, endpoint string
	models, headers, rates, goodput   []string
	concurrency                       []int
	maxConcurrency, numRequests       int
	runs                              int
	warmup                            int
	duration, timeout                 time.Duration
	burstiness                        string
	dataset, datasetPath, prompt      string
	inputLen, outputLen               int
	rangeRatio, temperature           float64
	ignoreEOS, continuousUsage        bool
	extraBody                         string
	seed                              uint64
	sweep                             bool
	sweepMax                          int
	sweepGain                         float64
	outDir, csvPath, jsonPath         string
	htmlPath, requestsPath            string
	format                            string
	quiet                             bool
	workload                          string
	agent                             bench.AgentWorkload
}

// newBenchCmd measures latency and throughput of OpenAI-compatible
// endpoints with vLLM's metric definitions.
func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark OpenAI-compatible endpoints: TTFT, TPOT, ITL, E2EL and throughput across a load matrix",
		Long: `Benchmark any OpenAI-compatible endpoint (llmgate, vLLM, SGLang, llama.cpp,
TensorRT-LLM, Ollama, hosted APIs) over a matrix of targets × load cells.

Metrics use the definitions of vLLM's "bench serve": TTFT (first streamed chunk
with choices), TPOT = (E2EL − TTFT)/(output tokens − 1), ITL per streamed chunk,
E2EL, request/output/total-token throughput, goodput under --goodput SLOs; mean,
median, std, p50/p90/p95/p99 each. A per-token ITL is reported separately.
Token counts come from the server's usage (stream_options.include_usage); when
a server sends none they are estimated and labelled so.

Honest measurement: chunks are timestamped when their bytes are read, before
any JSON parsing; open-loop latency starts at the scheduled send time; the
dispatch lag and the client's CPU and wake-up lag are recorded and a cell is
flagged UNRELIABLE when the client itself may have been the bottleneck.
The connection pool is sized to the concurrency, HTTP/1.1 only; proxies from
HTTP_PROXY/HTTPS_PROXY/NO_PROXY are used and shown in the report.

Load: --concurrency 1,4,8,16 (closed loop) and/or --request-rate 2,8,inf (open
loop, Poisson by default, --burstiness as vLLM defines it, "inf" = constant
rate), each cell for --num-requests or --duration; --sweep doubles concurrency
until output throughput stops growing and reports the saturation point.

Agent workload: --workload agent runs --sessions coding-agent conversations at
once, each --turns requests in sequence with its own --system-prompt-words system
prompt and a history that grows by the answer and --tool-result-words each turn;
it reports TTFT, throughput, the share of prompt tokens served from the server's
prefix cache (usage.prompt_tokens_details.cached_tokens) and per-session figures.
--shared-prefix=false is the control: fresh prompts of the same lengths.

Targets: --base-url with one or more --model, or --config FILE (YAML or JSON):
  targets:
    - name: qwen-direct
      base_url: http://127.0.0.1:8000/v1
      model: Qwen/Qwen2.5-7B-Instruct
    - name: qwen-gateway
      base_url: http://127.0.0.1:4000/v1
      api_key_env: LLMGATE_API_KEY
      model: qwen2.5-7b
      endpoint: chat          # or completions
      direct: qwen-direct     # the same model without the gateway
The API key defaults to LLMGATE_API_KEY, then OPENAI_API_KEY.

What the gateway adds: for a gateway target paired with its direct twin
(direct: in the file, or inferred when one target is an llmgate gateway and
exactly one other serves a model of the same name), bench prints the added
TTFT and E2EL at p50 and p95 per cell with 95% intervals (paired by run with
--runs).

Runs: --runs N repeats the matrix, targets interleaved; each figure is then
the median of the runs with its min–max and 95% interval, and a cell whose
runs disagree beyond their own intervals is flagged RUNS DISAGREE.

Exit status: 0 when every cell measured at least one successful request, 1
otherwise (results are still written).`,
		Example: `  llmgate bench --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct --concurrency 1,4,8,16 --out results/
  llmgate bench --config targets.yaml --request-rate 2,4,8 --burstiness 1 --num-requests 200 --goodput ttft:500,tpot:50
  llmgate bench --base-url http://127.0.0.1:8000/v1 --model m --sweep --num-requests 64
  llmgate bench --base-url http://127.0.0.1:8000/v1 --model m --workload agent --sessions 8 --turns 4
  llmgate bench compare before/results.json after/results.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "YAML or JSON file listing targets")
	fl.StringVar(&f.baseURL, "base-url", "", "Base URL of the OpenAI-compatible API to benchmark, e.g. http://127.0.0.1:8000/v1; when not given, $LLMGATE_BASE_URL, else $OPENAI_BASE_URL")
	fl.StringVar(&f.apiKey, "api-key", "", "API key sent as a bearer token; when not given, $LLMGATE_API_KEY, else $OPENAI_API_KEY")
	fl.StringSliceVar(&f.models, "model", nil, "Model to benchmark; repeat or comma-separate for several targets; when not given, the first the server lists")
	fl.StringVar(&f.endpoint, "endpoint", "chat", "Chat or completions")
	fl.StringArrayVar(&f.headers, "header", nil, "Extra request header KEY=VALUE (repeatable)")
	fl.IntSliceVar(&f.concurrency, "concurrency", nil, "Closed-loop concurrency levels, e.g. 1,4,8,16")
	fl.StringSliceVar(&f.rates, "request-rate", nil, "Open-loop request rates in req/s, e.g. 2,8,inf")
	fl.IntVar(&f.maxConcurrency, "max-concurrency", 0, "Cap on in-flight requests in open-loop cells (0 = none)")
	fl.StringVar(&f.burstiness, "burstiness", "1", "Open-loop arrival shape: 1 = Poisson, <1 burstier, >1 smoother, inf = constant rate")
	fl.IntVar(&f.numRequests, "num-requests", 100, "Requests per cell (0 with --duration)")
	fl.IntVar(&f.runs, "runs", 1, "Repeat the whole matrix this many times, targets interleaved; figures become medians with their spread, and cells whose runs disagree are flagged")
	fl.DurationVar(&f.duration, "duration", 0, "Run each cell this long instead of --num-requests")
	fl.IntVar(&f.warmup, "warmup", -1, "Warm-up requests per cell, discarded (-1 = one per connection)")
	fl.StringVar(&f.dataset, "dataset", "random", "Random, fixed, sharegpt or jsonl")
	fl.StringVar(&f.datasetPath, "dataset-path", "", "ShareGPT JSON or JSONL file")
	fl.StringVar(&f.prompt, "prompt", "", "Prompt for --dataset fixed")
	fl.IntVar(&f.inputLen, "input-len", 256, "Random prompts: input length in tokens (approximate)")
	fl.IntVar(&f.outputLen, "output-len", 128, "Output tokens (max_tokens) per request")
	fl.Float64Var(&f.rangeRatio, "range-ratio", 0, "Random prompts: lengths drawn from [len·(1−r), len·(1+r)]")
	fl.Float64Var(&f.temperature, "temperature", 0, "Sampling temperature")
	fl.BoolVar(&f.ignoreEOS, "ignore-eos", false, "Send ignore_eos so vLLM-compatible servers generate exactly max_tokens")
	fl.BoolVar(&f.continuousUsage, "continuous-usage", false, "Ask vLLM for usage in every chunk (exact per-token ITL)")
	fl.StringVar(&f.extraBody, "extra-body", "", "JSON object merged into every request body")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "Per-request timeout")
	fl.StringSliceVar(&f.goodput, "goodput", nil, "SLOs for goodput in ms, comma-separated or repeated, e.g. ttft:500,tpot:50,e2el:10000")
	fl.Uint64Var(&f.seed, "seed", 0, "Seed for prompts and arrivals")
	fl.BoolVar(&f.sweep, "sweep", false, "Closed-loop sweep 1,2,4,... until throughput saturates")
	fl.IntVar(&f.sweepMax, "sweep-max", 256, "Highest concurrency the sweep tries")
	fl.Float64Var(&f.sweepGain, "sweep-gain", 0.10, "Sweep stops when doubling concurrency adds less than this fraction of throughput")
	fl.StringVar(&f.outDir, "out", "", "Directory for results.csv, results.json, report.html and requests.jsonl (--csv-file, --json-file, --html-file and --requests-jsonl name them one by one)")
	fl.StringVar(&f.csvPath, "csv-file", "", "Write the CSV here")
	fl.StringVar(&f.jsonPath, "json-file", "", "Write the JSON report here")
	fl.StringVar(&f.htmlPath, "html-file", "", "Write the HTML report here")
	deprecatedAlias(fl, &f.csvPath, "csv", "csv-file")
	deprecatedAlias(fl, &f.jsonPath, "json", "json-file")
	deprecatedAlias(fl, &f.htmlPath, "html", "html-file")
	fl.StringVar(&f.format, "format", "table", "What to print on stdout at the end: table, json (the JSON report) or csv")
	fl.StringVar(&f.requestsPath, "requests-jsonl", "", "Write one JSON line per request here")
	fl.StringVar(&f.workload, "workload", "standard", "Standard (the load matrix over --dataset prompts) or agent (coding-agent sessions with growing histories; --sessions, --turns, …; load flags do not apply)")
	fl.IntVar(&f.agent.Sessions, "sessions", 16, "Agent workload: sessions at once, each with its own system prompt")
	fl.IntVar(&f.agent.Turns, "turns", 6, "Agent workload: turns per session, sent one after another")
	fl.IntVar(&f.agent.SystemPromptWords, "system-prompt-words", 3000, "Agent workload: words in each session's system prompt")
	fl.IntVar(&f.agent.ToolResultWords, "tool-result-words", 300, "Agent workload: words of tool result appended to the history each turn")
	fl.IntVar(&f.agent.UserWords, "user-words", 40, "Agent workload: words in each session's task message")
	fl.BoolVar(&f.agent.SharedPrefix, "shared-prefix", true, "Agent workload: each turn extends the session's history; =false sends a fresh random prompt of the same length every turn (the control, no prefix shared)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "No live progress on stderr")
	cmd.AddCommand(newBenchCompareCmd(), newBenchSelfTestCmd())
	return cmd
}

func runBench(cmd *cobra.Command, f *benchFlags) error {
	bench.Version = currentBuild().String()
	if f.format != "table" && f.format != "json" && f.format != "csv" {
		return fmt.Errorf("--format must be table, json or csv, not %q", f.format)
	}
	o, err := f.options(cmd.Context(), cmd.Flags().Changed("num-requests"))
	if err != nil {
		return err
	}
	if !f.quiet {
		o.Progress = cmd.ErrOrStderr()
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	var (
		rep    *bench.Report
		runErr error
	)
	switch f.workload {
	case "", "standard":
		rep, runErr = bench.Run(ctx, o)
	case "agent":
		aw := f.agent
		aw.OutputLen, aw.Seed = f.outputLen, f.seed
		rep, runErr = bench.RunAgent(ctx, o, aw)
	default:
		return fmt.Errorf("--workload must be standard or agent, not %q", f.workload)
	}
	if rep == nil {
		return runErr
	}
	if len(rep.Results) > 0 || len(rep.Agent) > 0 {
		var err error
		switch f.format {
		case "json":
			err = bench.WriteJSON(cmd.OutOrStdout(), rep)
		case "csv":
			err = bench.WriteCSV(cmd.OutOrStdout(), rep)
		default:
			fmt.Fprintln(cmd.OutOrStdout())
			err = bench.WriteTable(cmd.OutOrStdout(), rep)
		}
		if err != nil {
			return err
		}
		if err := f.writeOutputs(cmd, rep); err != nil {
			return err
		}
	}
	if runErr != nil && errors.Is(runErr, context.Canceled) {
		return errors.New("interrupted; partial results written")
	}
	if runErr != nil {
		return runErr
	}
	// A cell where nothing succeeded measured nothing: fail so that scripts
	// and CI notice, after the results (with the error samples) are out.
	var dead []string
	for _, a := range rep.Agent {
		if a.Completed == 0 {
			msg := a.Target + " (agent workload)"
			if len(a.ErrorSamples) > 0 {
				msg += " (" + a.ErrorSamples[0] + ")"
			}
			dead = append(dead, msg)
		}
	}
	for _, c := range rep.Results {
		if c.Completed == 0 {
			msg := c.Target
			if len(c.ErrorSamples) > 0 {
				msg += " (" + c.ErrorSamples[0] + ")"
			}
			dead = append(dead, msg)
		}
	}
	if len(dead) > 0 {
		msg := fmt.Sprintf("every request failed in %d cell(s): %s", len(dead), strings.Join(dead, "; "))
		if noAPIKey(o.Targets) {
			msg += " (no API key was sent: pass --api-key KEY or set LLMGATE_API_KEY)"
		}
		return errors.New(msg)
	}
	return nil
}

// options turns flags into bench.Options. numRequestsSet tells whether
// --num-requests was given, since --duration alone replaces its default.
func (f *benchFlags) options(ctx context.Context, numRequestsSet bool) (bench.Options, error) {
	var o bench.Options
	getenv := os.Getenv
	var err error
	if f.config != "" {
		file, err := os.Open(f.config)
		if err != nil {
			return o, fmt.Errorf("open config: %w", err)
		}
		o.Targets, err = bench.LoadTargets(file, getenv)
		file.Close()
		if err != nil {
			return o, fmt.Errorf("%s: %w", f.config, err)
		}
	} else {
		base := f.baseURL
		for _, k := range []string{"LLMGATE_BASE_URL", "OPENAI_BASE_URL"} {
			if base == "" {
				base = os.Getenv(k)
			}
		}
		if base == "" {
			return o, errors.New("no endpoint: pass --base-url http://HOST:PORT/v1 (or --config), or set LLMGATE_BASE_URL")
		}
		models := f.models
		if len(models) == 0 {
			// Like vLLM's bench: without --model, use the first served one.
			key := f.apiKey
			for _, k := range []string{"LLMGATE_API_KEY", "OPENAI_API_KEY"} {
				if key == "" {
					key = os.Getenv(k)
				}
			}
			ids, err := bench.ListModels(ctx, base, key)
			var se *bench.StatusError
			if errors.As(err, &se) && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden) {
				if key == "" {
					return o, fmt.Errorf("%s wants an API key (%w): pass --api-key KEY or set LLMGATE_API_KEY", base, err)
				}
				return o, fmt.Errorf("%s refused the API key (%w): pass a valid one with --api-key or LLMGATE_API_KEY", base, err)
			}
			if err != nil {
				return o, fmt.Errorf("no --model given and %w; pass --model to name the models", err)
			}
			if len(ids) == 0 {
				return o, errors.New("no --model given and the server lists no models; pass --model")
			}
			models = ids[:1]
		}
		if o.Targets, err = bench.TargetsFromFlags(base, f.apiKey, models, f.endpoint, getenv); err != nil {
			return o, err
		}
	}
	if len(f.headers) > 0 {
		hdr := map[string]string{}
		for _, h := range f.headers {
			k, v, ok := strings.Cut(h, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return o, fmt.Errorf("--header %q: use KEY=VALUE", h)
			}
			hdr[strings.TrimSpace(k)] = v
		}
		for i := range o.Targets {
			if o.Targets[i].Headers == nil {
				o.Targets[i].Headers = map[string]string{}
			}
			for k, v := range hdr {
				o.Targets[i].Headers[k] = v
			}
		}
	}
	o.Concurrencies = f.concurrency
	for _, r := range f.rates {
		v, err := parseRate(r)
		if err != nil {
			return o, fmt.Errorf("--request-rate %q: %w", r, err)
		}
		o.Rates = append(o.Rates, v)
	}
	if o.Burstiness, err = parseRate(f.burstiness); err != nil {
		return o, fmt.Errorf("--burstiness %q: %w", f.burstiness, err)
	}
	o.MaxConcurrency = f.maxConcurrency
	o.NumRequests, o.Duration, o.Warmup = f.numRequests, f.duration, f.warmup
	if f.duration > 0 && !numRequestsSet {
		o.NumRequests = 0
	}
	o.Workload = bench.Workload{Dataset: f.dataset, Path: f.datasetPath, FixedPrompt: f.prompt,
		InputLen: f.inputLen, OutputLen: f.outputLen, RangeRatio: f.rangeRatio, Seed: f.seed}
	o.Request = bench.RequestOptions{Temperature: f.temperature, IgnoreEOS: f.ignoreEOS,
		ContinuousUsage: f.continuousUsage, Timeout: f.timeout}
	if f.extraBody != "" {
		if err := json.Unmarshal([]byte(f.extraBody), &o.Request.ExtraBody); err != nil {
			return o, fmt.Errorf("--extra-body must be a JSON object: %w", err)
		}
	}
	if o.Goodput, err = bench.ParseGoodput(f.goodput); err != nil {
		return o, fmt.Errorf("--goodput: %w", err)
	}
	o.Sweep, o.SweepMax, o.SweepGain = f.sweep, f.sweepMax, f.sweepGain
	if f.runs < 1 {
		return o, errors.New("--runs must be at least 1")
	}
	o.Runs = f.runs
	o.KeepRequests = f.requestsPath != "" || f.outDir != ""
	return o, nil
}

// noAPIKey reports whether no target sends an API key.
func noAPIKey(ts []bench.Target) bool {
	for _, t := range ts {
		if t.APIKey != "" {
			return false
		}
	}
	return true
}

func parseRate(s string) (float64, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "inf" || s == "+inf" || s == "infinity" {
		return math.Inf(1), nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) {
		return 0, errors.New("must be a positive number or inf")
	}
	return v, nil
}

func (f *benchFlags) writeOutputs(cmd *cobra.Command, rep *bench.Report) error {
	type out struct {
		path  string
		write func(io.Writer, *bench.Report) error
	}
	outs := []out{{f.csvPath, bench.WriteCSV}, {f.jsonPath, bench.WriteJSON}, {f.htmlPath, bench.WriteHTML}, {f.requestsPath, bench.WriteRequestsJSONL}}
	if f.outDir != "" {
		if err := os.MkdirAll(f.outDir, 0o755); err != nil {
			return err
		}
		names := []string{"results.csv", "results.json", "report.html", "requests.jsonl"}
		for i := range outs {
			if outs[i].path == "" {
				outs[i].path = filepath.Join(f.outDir, names[i])
			}
		}
	}
	for _, o := range outs {
		if o.path == "" {
			continue
		}
		file, err := os.Create(o.path)
		if err != nil {
			return err
		}
		if err := o.write(file, rep); err != nil {
			file.Close()
			return fmt.Errorf("write %s: %w", o.path, err)
		}
		if err := file.Close(); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", o.path)
	}
	return nil
}

func newBenchCompareCmd() *cobra.Command {
	var threshold float64
	cmd := &cobra.Command{
		Use:   "compare A.json B.json",
		Short: "Show the change of every metric between two bench JSON reports, and whether it is significant",
		Long: `Match the cells of two JSON reports (by target and load; by load alone when
the target names differ, e.g. direct versus via the gateway) and print A, B, the
change of each metric and its p-value. A change is called better or worse only
when it is significant (p < 0.05) and at least --threshold percent (lower
latency and higher throughput are better); otherwise it says "no significant
difference" (or "significant but small"). When both reports have several runs
(--runs), the runs' figures are compared (Welch's t-test); otherwise each
figure's 95% interval over its requests is used, and a throughput measured in
one run is not tested.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reps [2]*bench.Report
			for i, p := range args {
				file, err := os.Open(p)
				if err != nil {
					return err
				}
				reps[i], err = bench.ReadReport(file)
				file.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "A = %s\nB = %s\n\n", args[0], args[1])
			return bench.WriteComparison(cmd.OutOrStdout(), reps[0], reps[1], threshold)
		},
	}
	cmd.Flags().Float64Var(&threshold, "threshold", 5, "Smallest change, in percent, called better or worse when it is significant")
	return cmd
}

func newBenchSelfTestCmd() *cobra.Command {
	var (
		streams int
		step    time.Duration
		allCore bool
		rates   []string
	)
	cmd := &cobra.Command{
		Use:   "self-test",
		Short: "Measure how many streamed chunks per second this client ingests with ≤ 1 ms timing error",
		Long: `Start a streaming test server with known timing in a child process and offer
rising chunk rates (10k to 200k chunks/s, or --rates) over --streams connections. For each
rate print the chunks per second the client ingested and its timestamp error
against the server's recorded write time of every chunk. The client runs on one
core (GOMAXPROCS=1) unless --all-cores. Run it on the machine you benchmark
from: above the reported figure, timings from that machine are not trustworthy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Getenv(bench.UpstreamChildEnv) == "1" {
				return bench.ServeUpstreamChild()
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			base, stopChild, err := bench.StartUpstreamChild(ctx, exe, "bench", "self-test")
			if err != nil {
				return err
			}
			defer stopChild()
			var rs []float64
			for _, r := range rates {
				v, err := parseRate(r)
				if err != nil || math.IsInf(v, 1) {
					return fmt.Errorf("--rates %q: must be positive numbers of chunks per second", r)
				}
				rs = append(rs, v)
			}
			_, best, err := bench.MeasureCapacity(ctx, bench.CapacityOptions{
				BaseURL: base, Streams: streams, Rates: rs, Step: step, OneCore: !allCore, Progress: cmd.OutOrStdout(),
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "client capacity: %.0f chunks/s with p99 timestamp error ≤ 1 ms\n", best)
			return nil
		},
	}
	cmd.Flags().IntVar(&streams, "streams", 64, "Concurrent streams")
	cmd.Flags().DurationVar(&step, "step", 2*time.Second, "Time per offered rate")
	cmd.Flags().BoolVar(&allCore, "all-cores", false, "Let the client use every core instead of one")
	cmd.Flags().StringSliceVar(&rates, "rates", nil, "Offered chunk rates to try; when not given, 10000,25000,50000,75000,100000,150000,200000")
	return cmd
}
