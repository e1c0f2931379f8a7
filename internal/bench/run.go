package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Options configure a benchmark run: the targets, the load matrix and the
// workload. The zero value is not usable; cmd/llmgate fills it from flags.
type Options struct {
	Targets []Target
	// Concurrencies are closed-loop cells; Rates are open-loop cells
	// (math.Inf(1) for "inf"). At least one cell is required.
	Concurrencies []int
	Rates         []float64
	// MaxConcurrency caps in-flight requests in open-loop cells.
	MaxConcurrency int
	// Burstiness shapes open-loop arrivals (1 = Poisson, +Inf = constant).
	Burstiness float64
	// NumRequests per cell, or Duration per cell when NumRequests is 0.
	NumRequests int
	Duration    time.Duration
	// Warmup requests per cell before measuring; -1 means one per
	// connection of the cell's pool, so every connection is open before the
	// clock starts.
	Warmup   int
	Workload Workload
	Request  RequestOptions
	Goodput  Goodput
	// Sweep runs closed-loop cells at 1, 2, 4, ... up to SweepMax and stops
	// once doubling the concurrency raises output throughput by less than
	// SweepGain (default 0.10), reporting the saturation point.
	Sweep     bool
	SweepMax  int
	SweepGain float64
	// Progress receives live progress lines (usually os.Stderr); nil is
	// silent.
	Progress io.Writer
	// KeepRequests keeps per-request results in the report for JSONL.
	KeepRequests bool
	// Runs repeats the whole matrix this many times (default 1), to show
	// how much runs disagree; see Run.
	Runs int
}

// Report is a whole run: settings, client facts and one result per
// target × cell.
type Report struct {
	Tool     string     `json:"tool"`
	Version  string     `json:"version"`
	Date     string     `json:"date"`
	Settings Settings   `json:"settings"`
	Client   ClientInfo `json:"client"`
	// Results has one entry per target × cell: the cell's only run, or
	// its median over Runs.
	Results []*CellResult `json:"results"`
	// Runs holds every run of a --runs N matrix (N > 1), each with its own
	// results, in the order they ran.
	Runs []RunResults `json:"runs,omitempty"`
	// Pairs are the gateway/direct target pairs, and Added what each
	// gateway added per cell (see PairTargets and gatewayAdded);
	// PairNotes say why a gateway target has no pair.
	Pairs     []Pair   `json:"pairs,omitempty"`
	Added     []Added  `json:"gateway_added,omitempty"`
	PairNotes []string `json:"pair_notes,omitempty"`
	// EngineStarts are the engine starts bench waited for, kept out of
	// every latency figure.
	EngineStarts []EngineStart `json:"engine_starts,omitempty"`
	Saturation   []Saturation  `json:"saturation,omitempty"`
	// Agent holds the agent workload's results, one per target (see
	// RunAgent); Results is empty then.
	Agent    []*AgentResult `json:"agent,omitempty"`
	Requests []RequestRow   `json:"-"`
}

// Settings records the run's parameters in the JSON report.
type Settings struct {
	Targets        []Target `json:"targets"`
	Runs           int      `json:"runs"`
	Concurrencies  []int    `json:"concurrencies,omitempty"`
	RequestRates   []Rate   `json:"request_rates,omitempty"`
	MaxConcurrency int      `json:"max_concurrency,omitempty"`
	Burstiness     Rate     `json:"burstiness"`
	NumRequests    int      `json:"num_requests,omitempty"`
	DurationS      float64  `json:"duration_s,omitempty"`
	Warmup         int      `json:"warmup"`
	Dataset        string   `json:"dataset"`
	DatasetPath    string   `json:"dataset_path,omitempty"`
	InputLen       int      `json:"input_len,omitempty"`
	OutputLen      int      `json:"output_len,omitempty"`
	RangeRatio     float64  `json:"range_ratio,omitempty"`
	Seed           uint64   `json:"seed"`
	Temperature    float64  `json:"temperature"`
	IgnoreEOS      bool     `json:"ignore_eos"`
	Goodput        *Goodput `json:"goodput,omitempty"`
	Sweep          bool     `json:"sweep,omitempty"`
	TimeoutS       float64  `json:"timeout_s"`
	// Agent is the agent workload's shape (--workload agent).
	Agent *AgentWorkload `json:"agent_workload,omitempty"`
}

// ClientInfo describes the machine that ran the client, since every figure
// depends on it.
type ClientInfo struct {
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
	Protocol   string `json:"protocol"`
}

func clientInfo() ClientInfo {
	return ClientInfo{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(), Protocol: "HTTP/1.1"}
}

// Saturation is the sweep's finding for one target.
type Saturation struct {
	Target      string  `json:"target"`
	Concurrency int     `json:"concurrency"`
	Throughput  float64 `json:"output_throughput"`
	Reason      string  `json:"reason"`
}

// RequestRow is one line of the optional per-request JSONL.
type RequestRow struct {
	Target      string    `json:"target"`
	Cell        string    `json:"cell"`
	Run         int       `json:"run,omitempty"`
	Index       int       `json:"index"`
	OK          bool      `json:"ok"`
	Error       string    `json:"error,omitempty"`
	ErrorDetail string    `json:"error_detail,omitempty"`
	Status      int       `json:"status"`
	TTFTMs      float64   `json:"ttft_ms"`
	E2ELMs      float64   `json:"e2el_ms"`
	ITLMs       []float64 `json:"itl_ms,omitempty"`
	InputTokens int       `json:"input_tokens"`
	CachedTok   int       `json:"cached_tokens,omitempty"`
	OutputTok   int       `json:"output_tokens"`
	Estimated   bool      `json:"output_tokens_estimated,omitempty"`
	ConnRetries int       `json:"conn_retries,omitempty"`
	DispatchMs  float64   `json:"dispatch_lag_ms"`
	QueueMs     float64   `json:"client_queue_time_ms"`
	StartUnixMs float64   `json:"start_unix_ms"`
	// GatewayMs is the gateway's own time before the answer began, as an
	// llmgate gateway said in Server-Timing (absent: it said nothing).
	GatewayMs *float64 `json:"gateway_overhead_ms,omitempty"`
}

// Version is written into reports; cmd/llmgate sets it.
var Version = "dev"

func (o *Options) validate() error {
	if len(o.Targets) == 0 {
		return errors.New("no targets: pass --base-url and --model, or --config")
	}
	if !o.Sweep && len(o.Concurrencies) == 0 && len(o.Rates) == 0 {
		return errors.New("no load given: pass --concurrency, --request-rate or --sweep")
	}
	for _, c := range o.Concurrencies {
		if c <= 0 {
			return fmt.Errorf("concurrency %d must be positive", c)
		}
	}
	for _, r := range o.Rates {
		if !(r > 0) {
			return fmt.Errorf("request rate %g must be positive or inf", r)
		}
	}
	if o.NumRequests <= 0 && o.Duration <= 0 {
		return errors.New("give --num-requests or --duration per cell")
	}
	for _, r := range o.Rates {
		if math.IsInf(r, 1) && o.NumRequests <= 0 {
			return errors.New("--request-rate inf sends every request at once, so it needs --num-requests, not --duration")
		}
	}
	if o.Burstiness <= 0 {
		return errors.New("--burstiness must be positive (1 = Poisson, inf = constant rate)")
	}
	if o.Sweep && o.Runs > 1 {
		return errors.New("--sweep finds one saturation point and does not repeat: run it without --runs")
	}
	return nil
}

// Run executes the matrix Runs times. Within a run each load cell is
// measured for every target before the next cell, the targets one after
// another (so they never compete for the client or a shared server) and in
// an order that rotates from run to run, so that drift (a server warming
// up, a neighbour's load) falls on every target alike. The report's Results
// are one per target × cell: the run itself, or the median over the runs
// (Runs holds every run). The sweep, if asked, follows.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Burstiness == 0 {
		o.Burstiness = 1
	}
	if o.Runs <= 0 {
		o.Runs = 1
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.SweepGain <= 0 {
		o.SweepGain = 0.10
	}
	if o.SweepMax <= 0 {
		o.SweepMax = 256
	}
	n := o.NumRequests
	if n <= 0 {
		// Duration mode cycles through a pool of prompts.
		n = 1000
	}
	prompts, err := o.Workload.Prompts(n)
	if err != nil {
		return nil, err
	}
	rep := &Report{
		Tool: "llmgate bench", Version: Version, Date: time.Now().UTC().Format(time.RFC3339),
		Settings: o.settings(),
		Client:   clientInfo(),
	}
	probeTr := newTransport(1)
	defer probeTr.CloseIdleConnections()
	probe := &http.Client{Transport: probeTr}
	bodies := make([][][]byte, len(o.Targets))
	for ti := range o.Targets {
		t := &o.Targets[ti]
		t.detectServer(ctx, probe)
		t.detectGateway(ctx, probe)
		bodies[ti] = make([][]byte, len(prompts))
		for i := range prompts {
			if bodies[ti][i], err = buildBody(t, &prompts[i], &o.Request, prompts[i].MaxTokens); err != nil {
				return nil, fmt.Errorf("build request: %w", err)
			}
		}
	}
	rep.Settings.Targets = o.Targets
	for ti := range o.Targets {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.EngineStarts = append(rep.EngineStarts, o.waitReady(ctx, &o.Targets[ti], probe, ti)...)
	}
	var cells []Cell
	for _, c := range o.Concurrencies {
		cells = append(cells, Cell{Concurrency: c})
	}
	for _, r := range o.Rates {
		cells = append(cells, Cell{Rate: r, MaxConcurrency: o.MaxConcurrency})
	}
	var runErr error
	for run := 1; run <= o.Runs && runErr == nil; run++ {
		rr := RunResults{Run: run, Started: time.Now().UTC().Format(time.RFC3339)}
		for ci, cell := range cells {
			for k := range o.Targets {
				if runErr = ctx.Err(); runErr != nil {
					break
				}
				ti := (k + run - 1) % len(o.Targets)
				c := o.runOne(ctx, rep, &o.Targets[ti], cell, prompts, bodies[ti], ti, ci, run)
				rr.Results = append(rr.Results, c)
			}
		}
		if len(rr.Results) > 0 {
			sortResults(rr.Results, o.Targets)
			rep.Runs = append(rep.Runs, rr)
		}
	}
	if len(rep.Runs) > 0 {
		rep.Results = aggregateRuns(rep.Runs)
		rep.Pairs, rep.PairNotes = PairTargets(o.Targets)
		rep.Added = gatewayAdded(rep, rep.Pairs)
	}
	if len(rep.Runs) <= 1 {
		rep.Runs = nil // the one run is the results
	}
	if runErr != nil {
		return rep, runErr
	}
	if o.Sweep {
		for ti := range o.Targets {
			sat, err := o.sweep(ctx, &o.Targets[ti], prompts, bodies[ti], ti, rep)
			if err != nil {
				return rep, err
			}
			rep.Saturation = append(rep.Saturation, sat)
		}
	}
	return rep, nil
}

// runOne measures one target at one cell in one run (0 for the sweep).
func (o *Options) runOne(ctx context.Context, rep *Report, t *Target, cell Cell, prompts []Prompt, bodies [][]byte, ti, ci, run int) *CellResult {
	warm := o.Warmup
	if warm < 0 {
		warm = cell.conns(o.NumRequests)
		if cell.Open() && cell.MaxConcurrency == 0 {
			warm = min(warm, 64)
		}
	}
	label := fmt.Sprintf("[%s %s]", t.Name, cell)
	if o.Runs > 1 && run > 0 {
		label = fmt.Sprintf("[%s %s run %d/%d]", t.Name, cell, run, o.Runs)
	}
	pr := startProgress(o.Progress, label, o.NumRequests)
	plan := &cellPlan{
		bodies: bodies, prompts: prompts, numRequests: o.NumRequests, duration: o.Duration,
		warmup: warm, burstiness: o.Burstiness, seed: o.Workload.Seed + uint64(ci)*7919, progress: pr,
	}
	idBase := "llmgate-bench-" + strconv.Itoa(ti) + "-" + strconv.Itoa(ci) + "-"
	if run > 1 {
		idBase += "r" + strconv.Itoa(run) + "-"
	}
	cr := runCell(ctx, t, cell, plan, &o.Request, idBase)
	c := Compute(cr, o.Goodput, o.Burstiness)
	if o.Runs > 1 {
		c.Run = run
	}
	where := cell.String()
	if o.Runs > 1 && run > 0 {
		where += fmt.Sprintf(" run %d", run)
	}
	if cr.WarmupEngineWait > 0 {
		rep.EngineStarts = append(rep.EngineStarts, EngineStart{Target: t.Name, Seconds: round3(cr.WarmupEngineWait.Seconds()),
			Source: EngineStartGateway, When: "in the warm-up of " + where})
	}
	if c.EngineWaits > 0 {
		rep.EngineStarts = append(rep.EngineStarts, EngineStart{Target: t.Name, Seconds: c.EngineWaitMaxS,
			Source: EngineStartGateway, When: "in " + where, Requests: c.EngineWaits})
	}
	summary := fmt.Sprintf("| %.1f req/s  %.0f tok/s  TTFT p50 %.1f ms  p95 %.1f ms  ITL p50 %.1f ms",
		c.RequestThroughput, c.OutputThroughput, c.TTFT.P50, c.TTFT.P95, c.ITL.P50)
	if c.Unreliable {
		summary += "  UNRELIABLE: " + strings.Join(c.UnreliableReasons, "; ")
	}
	pr.finish(summary)
	if o.KeepRequests {
		for i := range cr.Results {
			row := requestRow(cr, &cr.Results[i])
			row.Run = c.Run
			rep.Requests = append(rep.Requests, row)
		}
	}
	return c
}

func requestRow(run *CellRun, res *Result) RequestRow {
	row := RequestRow{
		Target: run.Target.Name, Cell: run.Cell.String(), Index: res.Index, OK: res.OK(),
		Error: res.Err, ErrorDetail: res.ErrDetail, Status: res.Status,
		TTFTMs: round3(ms(res.TTFT)), E2ELMs: round3(ms(res.E2EL)),
		InputTokens: res.InputTokens, CachedTok: res.CachedTokens, OutputTok: res.OutputTokens, Estimated: res.OutputEstimated,
		DispatchMs: round3(ms(res.DispatchLag)), QueueMs: round3(ms(res.QueueWait)), ConnRetries: res.ConnRetries,
	}
	if !res.Sent.IsZero() {
		row.StartUnixMs = float64(res.Sent.UnixMicro()) / 1000
	}
	if res.GatewayTimed {
		v := round3(ms(res.GatewayOverhead))
		row.GatewayMs = &v
	}
	for k := 1; k < len(res.Chunks); k++ {
		row.ITLMs = append(row.ITLMs, round3(ms(res.Chunks[k]-res.Chunks[k-1])))
	}
	return row
}

// sweep doubles the concurrency until throughput stops growing.
func (o *Options) sweep(ctx context.Context, t *Target, prompts []Prompt, bodies [][]byte, ti int, rep *Report) (Saturation, error) {
	var prev *CellResult
	sat := Saturation{Target: t.Name}
	for c, ci := 1, 1000; c <= o.SweepMax; c, ci = c*2, ci+1 {
		if err := ctx.Err(); err != nil {
			return sat, err
		}
		res := o.runOne(ctx, rep, t, Cell{Concurrency: c}, prompts, bodies, ti, ci, 0)
		rep.Results = append(rep.Results, res)
		if res.Completed == 0 || res.Failed > res.Completed/10 {
			if prev != nil {
				sat.Concurrency, sat.Throughput = prev.Concurrency, prev.OutputThroughput
			}
			sat.Reason = fmt.Sprintf("errors at concurrency %d (%d of %d failed)", c, res.Failed, res.Failed+res.Completed)
			return sat, nil
		}
		if prev != nil && res.OutputThroughput < prev.OutputThroughput*(1+o.SweepGain) {
			sat.Concurrency, sat.Throughput = prev.Concurrency, prev.OutputThroughput
			sat.Reason = fmt.Sprintf("doubling to %d raised output throughput by %.1f%% (< %.0f%%)",
				c, 100*(res.OutputThroughput/math.Max(prev.OutputThroughput, 1e-9)-1), 100*o.SweepGain)
			return sat, nil
		}
		prev = res
	}
	if prev != nil {
		sat.Concurrency, sat.Throughput = prev.Concurrency, prev.OutputThroughput
	}
	sat.Reason = fmt.Sprintf("still scaling at the sweep maximum %d; raise --sweep-max", o.SweepMax)
	return sat, nil
}

func (o *Options) settings() Settings {
	s := Settings{
		Targets: o.Targets, Runs: max(o.Runs, 1), Concurrencies: o.Concurrencies, MaxConcurrency: o.MaxConcurrency,
		Burstiness: Rate(o.Burstiness), NumRequests: o.NumRequests, DurationS: o.Duration.Seconds(), Warmup: o.Warmup,
		Dataset: o.Workload.Dataset, DatasetPath: o.Workload.Path, InputLen: o.Workload.InputLen,
		OutputLen: o.Workload.OutputLen, RangeRatio: o.Workload.RangeRatio, Seed: o.Workload.Seed,
		Temperature: o.Request.Temperature, IgnoreEOS: o.Request.IgnoreEOS, Sweep: o.Sweep,
		TimeoutS: o.Request.Timeout.Seconds(),
	}
	if s.Dataset == "" {
		s.Dataset = "random"
	}
	for _, r := range o.Rates {
		s.RequestRates = append(s.RequestRates, Rate(r))
	}
	if o.Goodput.Set() {
		g := o.Goodput
		s.Goodput = &g
	}
	return s
}
