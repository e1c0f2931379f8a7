package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Goodput holds service-level objectives in milliseconds; a zero field is
// not checked. A request is "good" when it meets every objective given,
// exactly as vLLM's --goodput ttft:MS tpot:MS e2el:MS.
type Goodput struct {
	TTFT float64 `json:"ttft_ms,omitempty"`
	TPOT float64 `json:"tpot_ms,omitempty"`
	E2EL float64 `json:"e2el_ms,omitempty"`
}

// Set reports whether any objective is given.
func (g Goodput) Set() bool { return g.TTFT > 0 || g.TPOT > 0 || g.E2EL > 0 }

// ParseGoodput parses "ttft:500 tpot:50" style pairs.
func ParseGoodput(pairs []string) (Goodput, error) {
	var g Goodput
	for _, raw := range pairs {
		for _, pair := range strings.Fields(strings.ReplaceAll(raw, ",", " ")) {
			name, val, ok := strings.Cut(pair, ":")
			var v float64
			if _, err := fmt.Sscanf(val, "%g", &v); !ok || err != nil || v < 0 {
				return g, fmt.Errorf("goodput %q: use KEY:MILLISECONDS with KEY ttft, tpot or e2el", pair)
			}
			switch strings.ToLower(name) {
			case "ttft":
				g.TTFT = v
			case "tpot":
				g.TPOT = v
			case "e2el":
				g.E2EL = v
			default:
				return g, fmt.Errorf("goodput %q: unknown metric %q; use ttft, tpot or e2el", pair, name)
			}
		}
	}
	return g, nil
}

// Client-bottleneck thresholds. A cell is flagged unreliable when any is
// crossed, because then the client, not the server, may have set the
// figures:
//   - the client process used at least 80% of the CPU cores it may run on
//     (getrusage user+system time over the cell's wall time);
//   - the p99 wake-up delay of a probe goroutine blocked on a pipe (woken by
//     the same network poller as the stream readers) exceeded 1 ms, meaning
//     a reader whose bytes had arrived could wait that long before stamping
//     them;
//   - in an open loop, the p99 dispatch lag (actual minus intended send
//     time) exceeded 1 ms.
const (
	UnreliableCPUFraction = 0.80
	UnreliableLag         = time.Millisecond
)

// CellResult is the computed outcome of one target × cell. Its JSON form
// flattens the metric summaries into vLLM's field names
// (mean_ttft_ms, p99_itl_ms, ...).
type CellResult struct {
	Target         string `json:"target"`
	Model          string `json:"model"`
	Backend        string `json:"backend"`
	BaseURL        string `json:"base_url"`
	Endpoint       string `json:"endpoint"`
	Mode           string `json:"mode"`
	Concurrency    int    `json:"concurrency,omitempty"`
	RequestRate    *Rate  `json:"request_rate,omitempty"`
	MaxConcurrency int    `json:"max_concurrency,omitempty"`
	Burstiness     *Rate  `json:"burstiness,omitempty"`

	Duration          float64        `json:"duration"`
	Completed         int            `json:"completed"`
	Failed            int            `json:"failed"`
	Errors            map[string]int `json:"errors"`
	ErrorSamples      []string       `json:"error_samples,omitempty"`
	TotalInputTokens  int            `json:"total_input_tokens"`
	TotalOutputTokens int            `json:"total_output_tokens"`
	// InputTokensEstimated / OutputTokensEstimated are true when at least
	// one request's count was estimated because the server sent no usage.
	InputTokensEstimated  bool     `json:"input_tokens_estimated"`
	OutputTokensEstimated bool     `json:"output_tokens_estimated"`
	ITLPerTokenEstimated  bool     `json:"itl_per_token_estimated"`
	RequestThroughput     float64  `json:"request_throughput"`
	RequestGoodput        *float64 `json:"request_goodput"`
	OutputThroughput      float64  `json:"output_throughput"`
	TotalTokenThroughput  float64  `json:"total_token_throughput"`
	MaxConcurrentRequests int      `json:"max_concurrent_requests"`
	// EngineWaits counts successful requests that waited for an engine to
	// start (see Result.EngineWait): they count as completed and in the
	// throughput, but not in any latency; EngineWaitMaxS is the longest.
	EngineWaits    int     `json:"engine_start_waits,omitempty"`
	EngineWaitMaxS float64 `json:"engine_start_wait_max_s,omitempty"`
	// ConnRetries counts requests resent on a fresh connection because
	// the server had closed the pooled one before answering (llama.cpp's
	// server does after every stream); they are not failures.
	ConnRetries int `json:"conn_retries"`

	TTFT        Summary `json:"-"`
	TPOT        Summary `json:"-"`
	ITL         Summary `json:"-"`
	E2EL        Summary `json:"-"`
	ITLPerToken Summary `json:"-"`
	DispatchLag Summary `json:"-"`
	ClientQueue Summary `json:"-"`
	// GatewayOverhead is the gateway's own time before each answer
	// began, as an llmgate gateway reported it (Server-Timing's gateway
	// entry); empty for a target that sends none.
	GatewayOverhead Summary `json:"-"`

	ClientCPUPercent  float64  `json:"client_cpu_percent"`
	ClientCores       int      `json:"client_cores"`
	SchedLagP99Ms     float64  `json:"client_wake_lag_p99_ms"`
	Unreliable        bool     `json:"unreliable"`
	UnreliableReasons []string `json:"unreliable_reasons,omitempty"`
	Proxy             string   `json:"proxy,omitempty"`

	// Dist holds TTFT and ITL quantiles at every percent (0..100), the
	// distributions the HTML report draws.
	Dist Distributions `json:"distributions"`

	// Run is the 1-based run of a per-run result (--runs), 0 for a cell's
	// result over all its runs.
	Run int `json:"run,omitempty"`
	// Runs is how many runs a cell's result summarizes (set when > 1):
	// each figure is then the median of the runs' figures.
	Runs int `json:"runs,omitempty"`
	// Intervals hold the spread of the main figures, keyed like their JSON
	// fields (p95_ttft_ms, output_throughput): see Interval.
	Intervals map[string]Interval `json:"intervals,omitempty"`
	// Disagree is set when two runs of the cell disagree beyond their own
	// intervals (see runsDisagree); DisagreeReasons say where.
	Disagree        bool     `json:"runs_disagree,omitempty"`
	DisagreeReasons []string `json:"runs_disagree_reasons,omitempty"`
}

// Distributions are per-percent quantiles in milliseconds.
type Distributions struct {
	TTFT []float64 `json:"ttft_ms"`
	ITL  []float64 `json:"itl_ms"`
}

// Rate is a request rate that encodes +Inf as the string "inf".
type Rate float64

// MarshalJSON writes "inf" for an unbounded rate.
func (r Rate) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(r), 1) {
		return []byte(`"inf"`), nil
	}
	return json.Marshal(float64(r))
}

// UnmarshalJSON accepts a number or "inf".
func (r *Rate) UnmarshalJSON(b []byte) error {
	if string(b) == `"inf"` {
		*r = Rate(math.Inf(1))
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*r = Rate(f)
	return nil
}

// summaryMetrics lists the flattened metric families in report order.
var summaryMetrics = []struct {
	Key string
	Get func(*CellResult) *Summary
	// Optional figures are left out of the JSON when nothing measured
	// them (not written as zeros). "Nothing measured" is a zero Summary,
	// not Count == 0: Count is not in the JSON, so a cell read back from
	// results.json has figures and no count.
	Optional bool
}{
	{"ttft", func(c *CellResult) *Summary { return &c.TTFT }, false},
	{"tpot", func(c *CellResult) *Summary { return &c.TPOT }, false},
	{"itl", func(c *CellResult) *Summary { return &c.ITL }, false},
	{"e2el", func(c *CellResult) *Summary { return &c.E2EL }, false},
	{"itl_per_token", func(c *CellResult) *Summary { return &c.ITLPerToken }, false},
	{"dispatch_lag", func(c *CellResult) *Summary { return &c.DispatchLag }, false},
	{"client_queue_time", func(c *CellResult) *Summary { return &c.ClientQueue }, false},
	{"gateway_overhead", func(c *CellResult) *Summary { return &c.GatewayOverhead }, true},
}

var statNames = []string{"mean", "median", "std", "p50", "p90", "p95", "p99"}

func statValue(s *Summary, name string) float64 {
	switch name {
	case "mean":
		return s.Mean
	case "median":
		return s.Median
	case "std":
		return s.Std
	case "p50":
		return s.P50
	case "p90":
		return s.P90
	case "p95":
		return s.P95
	case "p99":
		return s.P99
	}
	return 0
}

func setStat(s *Summary, name string, v float64) {
	switch name {
	case "mean":
		s.Mean = v
	case "median":
		s.Median = v
	case "std":
		s.Std = v
	case "p50":
		s.P50 = v
	case "p90":
		s.P90 = v
	case "p95":
		s.P95 = v
	case "p99":
		s.P99 = v
	}
}

type cellAlias CellResult

// MarshalJSON flattens summaries into vLLM-style keys.
func (c *CellResult) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal((*cellAlias)(c))
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for _, sm := range summaryMetrics {
		s := sm.Get(c)
		if sm.Optional && *s == (Summary{}) {
			continue
		}
		for _, st := range statNames {
			m[st+"_"+sm.Key+"_ms"] = round3(statValue(s, st))
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the flattened form back.
func (c *CellResult) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, (*cellAlias)(c)); err != nil {
		return err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for _, sm := range summaryMetrics {
		s := sm.Get(c)
		for _, st := range statNames {
			if v, ok := m[st+"_"+sm.Key+"_ms"].(float64); ok {
				setStat(s, st, v)
			}
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Compute turns one cell's raw results into metrics with vLLM's
// definitions: TTFT and E2EL per successful request, ITL one sample per
// chunk after the first, TPOT = (E2EL − TTFT)/(output tokens − 1) only when
// more than one token came back, throughputs over the cell's wall time, and
// failed requests excluded from every latency.
func Compute(run *CellRun, goodput Goodput, burstiness float64) *CellResult {
	t := run.Target
	c := &CellResult{
		Target: t.Name, Model: t.Model, Backend: t.Backend(), BaseURL: t.BaseURL, Endpoint: t.Endpoint,
		Errors: map[string]int{}, Proxy: run.Proxy, ClientCores: runtime.GOMAXPROCS(0),
	}
	if run.Cell.Open() {
		c.Mode = "rate"
		r := Rate(run.Cell.Rate)
		c.RequestRate = &r
		c.MaxConcurrency = run.Cell.MaxConcurrency
		b := Rate(burstiness)
		c.Burstiness = &b
	} else {
		c.Mode = "concurrency"
		c.Concurrency = run.Cell.Concurrency
	}
	dur := run.Duration.Seconds()
	c.Duration = dur

	var ttfts, tpots, itls, e2els, perTok, lags, queues, overheads []float64
	good := 0
	samples := map[string]bool{}
	for i := range run.Results {
		r := &run.Results[i]
		c.ConnRetries += r.ConnRetries
		if !r.OK() {
			c.Failed++
			c.Errors[r.Err]++
			if len(c.ErrorSamples) < 5 && !samples[r.Err] {
				samples[r.Err] = true
				c.ErrorSamples = append(c.ErrorSamples, r.Err+": "+r.ErrDetail)
			}
			continue
		}
		c.Completed++
		c.TotalInputTokens += r.InputTokens
		c.TotalOutputTokens += r.OutputTokens
		c.InputTokensEstimated = c.InputTokensEstimated || r.InputEstimated
		c.OutputTokensEstimated = c.OutputTokensEstimated || r.OutputEstimated
		if r.EngineWait > 0 {
			// It measured an engine's start, not the server.
			c.EngineWaits++
			c.EngineWaitMaxS = math.Max(c.EngineWaitMaxS, round3(r.EngineWait.Seconds()))
			continue
		}
		ttft, e2el := ms(r.TTFT), ms(r.E2EL)
		ttfts = append(ttfts, ttft)
		e2els = append(e2els, e2el)
		tpot := 0.0
		if r.OutputTokens > 1 {
			tpot = (e2el - ttft) / float64(r.OutputTokens-1)
			tpots = append(tpots, tpot)
		}
		for k := 1; k < len(r.Chunks); k++ {
			itls = append(itls, ms(r.Chunks[k]-r.Chunks[k-1]))
		}
		var est bool
		perTok, est = appendPerTokenITL(perTok, r)
		c.ITLPerTokenEstimated = c.ITLPerTokenEstimated || est
		lags = append(lags, ms(r.DispatchLag))
		queues = append(queues, ms(r.QueueWait))
		if r.GatewayTimed {
			overheads = append(overheads, ms(r.GatewayOverhead))
		}
		// As in vLLM, a request with one output token has TPOT 0 for the
		// goodput check.
		if goodput.Set() &&
			(goodput.TTFT == 0 || ttft <= goodput.TTFT) &&
			(goodput.TPOT == 0 || tpot <= goodput.TPOT) &&
			(goodput.E2EL == 0 || e2el <= goodput.E2EL) {
			good++
		}
	}
	if dur > 0 {
		c.RequestThroughput = float64(c.Completed) / dur
		c.OutputThroughput = float64(c.TotalOutputTokens) / dur
		c.TotalTokenThroughput = float64(c.TotalInputTokens+c.TotalOutputTokens) / dur
		if goodput.Set() {
			g := float64(good) / dur
			c.RequestGoodput = &g
		}
	}
	c.TTFT = Summarize(ttfts)
	c.Dist.TTFT = Quantiles(ttfts, 1)
	c.TPOT = Summarize(tpots)
	c.ITL = Summarize(itls)
	c.Dist.ITL = Quantiles(itls, 1)
	c.E2EL = Summarize(e2els)
	c.Intervals = map[string]Interval{}
	for _, m := range []struct {
		key    string
		sorted []float64
		s      *Summary
	}{{"ttft", ttfts, &c.TTFT}, {"tpot", tpots, &c.TPOT}, {"itl", itls, &c.ITL}, {"e2el", e2els, &c.E2EL}} {
		sampleIntervals(c.Intervals, m.key, m.sorted, m.s)
	}
	c.ITLPerToken = Summarize(perTok)
	c.DispatchLag = Summarize(lags)
	c.ClientQueue = Summarize(queues)
	c.GatewayOverhead = Summarize(overheads)
	c.MaxConcurrentRequests = peakConcurrency(run.Results)
	judgeClient(c, run)
	return c
}

// intervalStats are the statistics of each latency metric that carry an
// Interval, keyed like the JSON fields ("p95_ttft_ms").
var intervalStats = []string{"mean", "p50", "p95", "p99"}

// intervalMetrics are the latency metrics that carry intervals.
var intervalMetrics = []string{"ttft", "tpot", "itl", "e2el"}

// sampleIntervals sets the 95% intervals of one run's statistics from its
// sorted samples. ITL samples are chunks, which are not independent within
// a request, so its intervals are narrower than the truth; several runs
// (--runs) give the honest spread.
func sampleIntervals(dst map[string]Interval, metric string, sorted []float64, s *Summary) {
	if len(sorted) == 0 {
		return
	}
	for _, st := range intervalStats {
		v := statValue(s, st)
		iv := Interval{Min: v, Max: v}
		if st == "mean" {
			iv.Low, iv.High = meanCI(sorted, v)
			iv.Low = max(iv.Low, 0)
		} else {
			q, _ := strconv.Atoi(st[1:])
			iv.Low, iv.High, iv.Open = quantileCI(sorted, float64(q)/100)
		}
		dst[st+"_"+metric+"_ms"] = roundInterval(iv)
	}
}

// appendPerTokenITL adds one sample per token after the first chunk: a
// chunk that arrived gap ms after the previous one and carried k tokens
// contributes k samples of gap/k (SGLang's convention). Token counts per
// chunk are exact when the server sent usage in every chunk; otherwise the
// request's output tokens are shared across chunks by text length and the
// result is reported as an estimate.
func appendPerTokenITL(dst []float64, r *Result) ([]float64, bool) {
	n := len(r.Chunks)
	if n < 2 {
		return dst, false
	}
	tokens := make([]int, n)
	estimated := r.ChunkTokens == nil
	if !estimated {
		prev := 0
		for i, cum := range r.ChunkTokens {
			tokens[i] = max(int(cum)-prev, 0)
			prev = int(cum)
		}
	} else {
		total := 0
		for _, b := range r.ChunkBytes {
			total += int(b)
		}
		if total == 0 || r.OutputTokens == n {
			for i := range tokens {
				tokens[i] = 1
			}
		} else {
			// Cumulative rounding keeps the shares summing to the total.
			acc, given := 0, 0
			for i, b := range r.ChunkBytes {
				acc += int(b)
				upto := int(math.Round(float64(r.OutputTokens) * float64(acc) / float64(total)))
				tokens[i] = upto - given
				given = upto
			}
		}
	}
	carry := 0.0
	for i := 1; i < n; i++ {
		g := ms(r.Chunks[i]-r.Chunks[i-1]) + carry
		if tokens[i] <= 0 {
			// A chunk without tokens (e.g. a role-only delta) folds its
			// gap into the next token-bearing chunk.
			carry = g
			continue
		}
		carry = 0
		per := g / float64(tokens[i])
		for k := 0; k < tokens[i]; k++ {
			dst = append(dst, per)
		}
	}
	return dst, estimated
}

// peakConcurrency is the largest number of successful requests in flight
// at once, from a sweep over [send, last chunk) intervals.
func peakConcurrency(rs []Result) int {
	type ev struct {
		t time.Time
		d int
	}
	var evs []ev
	for i := range rs {
		if !rs[i].OK() {
			continue
		}
		evs = append(evs, ev{rs[i].Sent, 1}, ev{rs[i].Origin.Add(rs[i].E2EL), -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t.Equal(evs[j].t) {
			return evs[i].d < evs[j].d
		}
		return evs[i].t.Before(evs[j].t)
	})
	cur, peak := 0, 0
	for _, e := range evs {
		cur += e.d
		peak = max(peak, cur)
	}
	return peak
}

// judgeClient applies the client-bottleneck rule documented at
// UnreliableCPUFraction.
func judgeClient(c *CellResult, run *CellRun) {
	cores := runtime.GOMAXPROCS(0)
	if run.CPUKnown && run.Duration > 0 {
		c.ClientCPUPercent = round3(100 * run.CPU.Seconds() / run.Duration.Seconds())
		if c.ClientCPUPercent >= 100*UnreliableCPUFraction*float64(cores) {
			c.UnreliableReasons = append(c.UnreliableReasons,
				fmt.Sprintf("client CPU %.0f%% of %d core(s) (limit %.0f%%)", c.ClientCPUPercent, cores, 100*UnreliableCPUFraction*float64(cores)))
		}
	}
	lags := make([]float64, len(run.SchedLag))
	for i, l := range run.SchedLag {
		lags[i] = ms(l)
	}
	sort.Float64s(lags)
	c.SchedLagP99Ms = round3(Percentile(lags, 99))
	if c.SchedLagP99Ms > ms(UnreliableLag) {
		c.UnreliableReasons = append(c.UnreliableReasons,
			fmt.Sprintf("client wake-up lag p99 %.2f ms > %.0f ms: chunk timestamps may be late", c.SchedLagP99Ms, ms(UnreliableLag)))
	}
	if run.Cell.Open() && c.DispatchLag.P99 > ms(UnreliableLag) {
		c.UnreliableReasons = append(c.UnreliableReasons,
			fmt.Sprintf("dispatch lag p99 %.2f ms > %.0f ms: requests left later than scheduled", c.DispatchLag.P99, ms(UnreliableLag)))
	}
	c.Unreliable = len(c.UnreliableReasons) > 0
}
