package bench

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// AgentWorkload is the coding-agent workload (--workload agent): Sessions
// conversations at once, each Turns requests in sequence. A session has its
// own system prompt of SystemPromptWords words (distinct per session, as
// agents for different repositories or users have), a task, and a history
// that grows every turn by the previous answer and a tool result of
// ToolResultWords words, so every turn's prompt starts with the whole of
// the previous turn's: what an engine's prefix cache and cache-aware
// routing are for.
//
// With SharedPrefix false (the control), every turn is a fresh prompt of
// random words of the same length as the shared-prefix turn would have, and
// no two prompts share a prefix.
type AgentWorkload struct {
	Sessions          int  `json:"sessions"`
	Turns             int  `json:"turns"`
	SystemPromptWords int  `json:"system_prompt_words"`
	ToolResultWords   int  `json:"tool_result_words"`
	UserWords         int  `json:"user_words"`
	SharedPrefix      bool `json:"shared_prefix"`
	// OutputLen is max_tokens of each turn.
	OutputLen int    `json:"output_len"`
	Seed      uint64 `json:"seed"`
}

// agentMsg is one chat message of an agent session.
type agentMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// agentSession produces the prompts of one session, turn by turn.
type agentSession struct {
	w       *AgentWorkload
	index   int
	rng     *rand.Rand
	history []agentMsg
	turn    int
}

func (w *AgentWorkload) validate() error {
	switch {
	case w.Sessions < 1:
		return errors.New("--sessions must be at least 1")
	case w.Turns < 1:
		return errors.New("--turns must be at least 1")
	case w.SystemPromptWords < 0 || w.ToolResultWords < 0 || w.UserWords < 0:
		return errors.New("--system-prompt-words and --tool-result-words must not be negative")
	case w.OutputLen < 1:
		return errors.New("--output-len must be at least 1")
	}
	return nil
}

// session returns session i's prompt generator; the same seed and index
// give the same prompts.
func (w *AgentWorkload) session(i int) *agentSession {
	return &agentSession{w: w, index: i, rng: rand.New(rand.NewPCG(w.Seed, 0x6167656e74+uint64(i)))}
}

// randomWords appends n words drawn from words to b.
func randomWords(b *strings.Builder, rng *rand.Rand, n int) {
	for j := range n {
		if j > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[rng.IntN(len(words))])
	}
}

// next returns the messages of the session's next turn. prevAnswer is the
// answer to the previous turn (ignored on the first).
func (s *agentSession) next(prevAnswer string) []agentMsg {
	var b strings.Builder
	if s.turn == 0 {
		fmt.Fprintf(&b, "You are coding agent %d. Follow the project rules below.\n", s.index)
		randomWords(&b, s.rng, s.w.SystemPromptWords)
		s.history = append(s.history, agentMsg{"system", b.String()})
		b.Reset()
		fmt.Fprintf(&b, "Task %d: ", s.index)
		randomWords(&b, s.rng, max(s.w.UserWords, 1))
		s.history = append(s.history, agentMsg{"user", b.String()})
	} else {
		if prevAnswer == "" {
			prevAnswer = "(no answer)"
		}
		s.history = append(s.history, agentMsg{"assistant", prevAnswer})
		fmt.Fprintf(&b, "Tool result %d:\n", s.turn)
		randomWords(&b, s.rng, s.w.ToolResultWords)
		s.history = append(s.history, agentMsg{"user", b.String()})
	}
	s.turn++
	if s.w.SharedPrefix {
		return append([]agentMsg(nil), s.history...)
	}
	// The control: the same lengths, nothing shared with any other prompt.
	sys := len(strings.Fields(s.history[0].Content))
	rest := 0
	for _, m := range s.history[1:] {
		rest += len(strings.Fields(m.Content))
	}
	b.Reset()
	fmt.Fprintf(&b, "%d ", s.rng.Uint64())
	randomWords(&b, s.rng, sys)
	fresh := []agentMsg{{"system", b.String()}}
	b.Reset()
	fmt.Fprintf(&b, "%d ", s.rng.Uint64())
	randomWords(&b, s.rng, rest)
	return append(fresh, agentMsg{"user", b.String()})
}

// AgentResult is the agent workload's outcome on one target.
type AgentResult struct {
	Target       string  `json:"target"`
	SharedPrefix bool    `json:"shared_prefix"`
	Sessions     int     `json:"sessions"`
	Turns        int     `json:"turns"`
	Completed    int     `json:"completed"`
	Failed       int     `json:"failed"`
	DurationS    float64 `json:"duration_s"`
	// Throughputs over the run's wall time, as vLLM defines them.
	RequestThroughput    float64 `json:"request_throughput"`
	OutputThroughput     float64 `json:"output_throughput"`
	TotalTokenThroughput float64 `json:"total_token_throughput"`
	TTFT                 Summary `json:"ttft_ms"`
	E2EL                 Summary `json:"e2el_ms"`
	PromptTokens         int     `json:"total_input_tokens"`
	OutputTokens         int     `json:"total_output_tokens"`
	// CachedTokens sums usage.prompt_tokens_details.cached_tokens; the
	// share is CachedTokens / PromptTokens, null when the server reported
	// no cached tokens in any answer (unknown, not zero).
	CachedTokens int      `json:"total_cached_tokens"`
	CachedShare  *float64 `json:"cached_share"`
	// TTFTP50ByTurn is the median TTFT of each turn across sessions.
	TTFTP50ByTurn []float64        `json:"ttft_p50_ms_by_turn"`
	PerSession    []AgentSessionFP `json:"sessions_detail"`
	Errors        map[string]int   `json:"errors,omitempty"`
	ErrorSamples  []string         `json:"error_samples,omitempty"`
}

// AgentSessionFP are one session's figures.
type AgentSessionFP struct {
	Session      int      `json:"session"`
	Completed    int      `json:"completed"`
	Failed       int      `json:"failed"`
	PromptTokens int      `json:"input_tokens"`
	CachedTokens int      `json:"cached_tokens"`
	CachedShare  *float64 `json:"cached_share"`
	OutputTokens int      `json:"output_tokens"`
	TTFTMeanMs   float64  `json:"mean_ttft_ms"`
	TTFTP50Ms    float64  `json:"p50_ttft_ms"`
	TTFTMaxMs    float64  `json:"max_ttft_ms"`
}

// agentTurn is one measured request of the agent workload.
type agentTurn struct {
	session, turn int
	res           Result
}

// cachedShare is cached / prompt, or nil when no answer reported cached
// tokens.
func cachedShare(cached, prompt int, reported bool) *float64 {
	if !reported || prompt <= 0 {
		return nil
	}
	v := round3(float64(cached) / float64(prompt))
	return &v
}

// computeAgent turns the measured turns into the result's figures.
func computeAgent(target string, w *AgentWorkload, turns []agentTurn, dur time.Duration) *AgentResult {
	r := &AgentResult{Target: target, SharedPrefix: w.SharedPrefix, Sessions: w.Sessions, Turns: w.Turns,
		DurationS: round3(dur.Seconds()), Errors: map[string]int{}}
	per := make([]AgentSessionFP, w.Sessions)
	perTTFT := make([][]float64, w.Sessions)
	byTurn := make([][]float64, w.Turns)
	var ttft, e2el []float64
	reported := false
	perReported := make([]bool, w.Sessions)
	for i := range per {
		per[i].Session = i
	}
	for _, t := range turns {
		p := &per[t.session]
		if !t.res.OK() {
			r.Failed++
			p.Failed++
			r.Errors[t.res.Err]++
			if len(r.ErrorSamples) < 3 {
				r.ErrorSamples = append(r.ErrorSamples, t.res.Err+": "+t.res.ErrDetail)
			}
			continue
		}
		r.Completed++
		p.Completed++
		r.PromptTokens += t.res.InputTokens
		r.OutputTokens += t.res.OutputTokens
		r.CachedTokens += t.res.CachedTokens
		p.PromptTokens += t.res.InputTokens
		p.OutputTokens += t.res.OutputTokens
		p.CachedTokens += t.res.CachedTokens
		if t.res.CachedReported {
			reported = true
			perReported[t.session] = true
		}
		v := ms(t.res.TTFT)
		ttft = append(ttft, v)
		e2el = append(e2el, ms(t.res.E2EL))
		perTTFT[t.session] = append(perTTFT[t.session], v)
		if t.turn < len(byTurn) {
			byTurn[t.turn] = append(byTurn[t.turn], v)
		}
	}
	r.TTFT, r.E2EL = Summarize(ttft), Summarize(e2el)
	r.CachedShare = cachedShare(r.CachedTokens, r.PromptTokens, reported)
	if s := dur.Seconds(); s > 0 {
		r.RequestThroughput = round3(float64(r.Completed) / s)
		r.OutputThroughput = round3(float64(r.OutputTokens) / s)
		r.TotalTokenThroughput = round3(float64(r.PromptTokens+r.OutputTokens) / s)
	}
	for i := range per {
		s := Summarize(perTTFT[i])
		per[i].TTFTMeanMs, per[i].TTFTP50Ms, per[i].TTFTMaxMs = round3(s.Mean), round3(s.P50), round3(s.Max)
		per[i].CachedShare = cachedShare(per[i].CachedTokens, per[i].PromptTokens, perReported[i])
	}
	r.PerSession = per
	for _, v := range byTurn {
		r.TTFTP50ByTurn = append(r.TTFTP50ByTurn, round3(Summarize(v).P50))
	}
	if len(r.Errors) == 0 {
		r.Errors = nil
	}
	return r
}

// agentBody is the chat request of one turn.
func agentBody(t *Target, msgs []agentMsg, w *AgentWorkload, o *RequestOptions) ([]byte, error) {
	raw, err := json.Marshal(msgs)
	if err != nil {
		return nil, err
	}
	return buildBody(t, &Prompt{Messages: raw}, o, w.OutputLen)
}

// RunAgent runs the agent workload against every target, one target after
// another: all sessions at once, each session's turns in sequence, the next
// turn sent when the previous answer has arrived (with that answer in its
// history). Targets must use the chat endpoint.
func RunAgent(ctx context.Context, o Options, w AgentWorkload) (*Report, error) {
	if len(o.Targets) == 0 {
		return nil, errors.New("no targets: pass --base-url and --model, or --config")
	}
	if err := w.validate(); err != nil {
		return nil, err
	}
	for _, t := range o.Targets {
		if t.Endpoint == EndpointCompletions {
			return nil, fmt.Errorf("target %s: the agent workload sends chat conversations; use --endpoint chat", t.Name)
		}
	}
	rep := &Report{
		Tool: "llmgate bench", Version: Version, Date: time.Now().UTC().Format(time.RFC3339),
		Settings: o.settings(),
		Client:   clientInfo(),
	}
	rep.Settings.Dataset = "agent"
	rep.Settings.Agent = &w
	probeTr := newTransport(1)
	defer probeTr.CloseIdleConnections()
	probe := &http.Client{Transport: probeTr}
	for ti := range o.Targets {
		t := &o.Targets[ti]
		t.detectServer(ctx, probe)
		t.detectGateway(ctx, probe)
	}
	rep.Settings.Targets = o.Targets
	for ti := range o.Targets {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.EngineStarts = append(rep.EngineStarts, o.waitReady(ctx, &o.Targets[ti], probe, ti)...)
		res, turns, err := runAgentTarget(ctx, &o, &o.Targets[ti], &w, ti)
		if res != nil {
			rep.Agent = append(rep.Agent, res)
		}
		if o.KeepRequests {
			run := &CellRun{Target: &o.Targets[ti]}
			for i := range turns {
				row := requestRow(run, &turns[i].res)
				row.Cell = fmt.Sprintf("agent session %d turn %d", turns[i].session, turns[i].turn+1)
				rep.Requests = append(rep.Requests, row)
			}
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func runAgentTarget(ctx context.Context, o *Options, t *Target, w *AgentWorkload, ti int) (*AgentResult, []agentTurn, error) {
	tr := newTransport(w.Sessions)
	defer tr.CloseIdleConnections()
	freshTr := newTransport(w.Sessions)
	freshTr.DisableKeepAlives = true
	defer freshTr.CloseIdleConnections()
	q := &requester{client: &http.Client{Transport: tr}, fresh: &http.Client{Transport: freshTr}, target: t, url: t.URL(),
		timeout: o.Request.Timeout, idBase: "llmgate-bench-agent-" + strconv.Itoa(ti) + "-", keepText: true}
	pr := startProgress(o.Progress, fmt.Sprintf("[%s agent %d×%d]", t.Name, w.Sessions, w.Turns), w.Sessions*w.Turns)
	pr.begin()
	var (
		mu    sync.Mutex
		turns []agentTurn
		wg    sync.WaitGroup
		bErr  error
	)
	start := time.Now()
	for si := range w.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := w.session(si)
			answer := ""
			for turn := range w.Turns {
				if ctx.Err() != nil {
					return
				}
				body, err := agentBody(t, s.next(answer), w, &o.Request)
				if err != nil {
					mu.Lock()
					bErr = err
					mu.Unlock()
					return
				}
				var at agentTurn
				at.session, at.turn = si, turn
				q.do(ctx, body, &Prompt{}, si*w.Turns+turn, time.Time{}, &at.res)
				answer = string(at.res.text)
				at.res.text = nil
				mu.Lock()
				turns = append(turns, at)
				mu.Unlock()
				pr.done(&at.res)
			}
		}()
	}
	wg.Wait()
	dur := time.Since(start)
	sort.Slice(turns, func(i, j int) bool {
		if turns[i].session != turns[j].session {
			return turns[i].session < turns[j].session
		}
		return turns[i].turn < turns[j].turn
	})
	r := computeAgent(t.Name, w, turns, dur)
	summary := fmt.Sprintf("| %.2f req/s  TTFT p50 %.1f ms  p95 %.1f ms  cached %s", r.RequestThroughput, r.TTFT.P50, r.TTFT.P95, formatShare(r.CachedShare))
	pr.finish(summary)
	if bErr != nil {
		return r, turns, fmt.Errorf("build request: %w", bErr)
	}
	return r, turns, ctx.Err()
}

// formatShare prints a cached share as a percentage, or "unknown".
func formatShare(v *float64) string {
	if v == nil {
		return "unknown"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

// writeAgentTable prints the agent workload's figures: one line per target,
// then per session.
func writeAgentTable(w io.Writer, r *Report) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "target\tworkload\tok\tfail\treq/s\tout tok/s\ttotal tok/s\tTTFT ms p50 / p95 / p99\tE2EL ms p50 / p95 / p99\tcached share\tTTFT p50 by turn (ms)\t")
	for _, a := range r.Agent {
		kind := "agent"
		if !a.SharedPrefix {
			kind = "agent, no shared prefix"
		}
		byTurn := make([]string, len(a.TTFTP50ByTurn))
		for i, v := range a.TTFTP50ByTurn {
			byTurn[i] = fmtFig(v)
		}
		if a.Completed == 0 {
			fmt.Fprintf(tw, "%s\t%s %d×%d\t%d\t%d\t-\t-\t-\t-\t-\t-\t-\t\n", a.Target, kind, a.Sessions, a.Turns, a.Completed, a.Failed)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s %d×%d\t%d\t%d\t%.2f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t\n", a.Target, kind, a.Sessions, a.Turns,
			a.Completed, a.Failed, a.RequestThroughput, a.OutputThroughput, a.TotalTokenThroughput,
			triple(&a.TTFT), triple(&a.E2EL), formatShare(a.CachedShare), strings.Join(byTurn, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "cached share = Σ usage.prompt_tokens_details.cached_tokens / Σ prompt_tokens (unknown: the server reported no cached tokens)")
	for _, a := range r.Agent {
		fmt.Fprintf(w, "\nsessions of %s:\n", a.Target)
		tw := newTable(w)
		fmt.Fprintln(tw, "session\tok\tfail\tprompt tok\tcached tok\tcached share\tTTFT ms mean / p50 / max\t")
		for _, s := range a.PerSession {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\t%s / %s / %s\t\n", s.Session, s.Completed, s.Failed, s.PromptTokens, s.CachedTokens,
				formatShare(s.CachedShare), fmtFig(s.TTFTMeanMs), fmtFig(s.TTFTP50Ms), fmtFig(s.TTFTMaxMs))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(a.Errors) > 0 {
			fmt.Fprintf(w, "errors %s: %s\n", a.Target, formatErrors(a.Errors))
			for _, s := range a.ErrorSamples {
				fmt.Fprintf(w, "  e.g. %s\n", s)
			}
		}
	}
	writeEngineStarts(w, r)
	return nil
}

// agentCSVHeader lists the agent workload's CSV columns: one row per target
// (session "all") and one per session.
var agentCSVHeader = []string{"target", "shared_prefix", "session", "completed", "failed", "input_tokens", "cached_tokens",
	"cached_share", "output_tokens", "duration_s", "request_throughput", "output_throughput", "total_token_throughput",
	"mean_ttft_ms", "p50_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "max_ttft_ms"}

func writeAgentCSV(cw *csv.Writer, r *Report) error {
	if err := cw.Write(agentCSVHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	share := func(v *float64) string {
		if v == nil {
			return ""
		}
		return f(*v)
	}
	for _, a := range r.Agent {
		sp := strconv.FormatBool(a.SharedPrefix)
		row := []string{a.Target, sp, "all", strconv.Itoa(a.Completed), strconv.Itoa(a.Failed), strconv.Itoa(a.PromptTokens),
			strconv.Itoa(a.CachedTokens), share(a.CachedShare), strconv.Itoa(a.OutputTokens), f(a.DurationS), f(a.RequestThroughput),
			f(a.OutputThroughput), f(a.TotalTokenThroughput), f(round3(a.TTFT.Mean)), f(round3(a.TTFT.P50)), f(round3(a.TTFT.P95)),
			f(round3(a.TTFT.P99)), f(round3(a.TTFT.Max))}
		if err := cw.Write(row); err != nil {
			return err
		}
		for _, s := range a.PerSession {
			row := []string{a.Target, sp, strconv.Itoa(s.Session), strconv.Itoa(s.Completed), strconv.Itoa(s.Failed), strconv.Itoa(s.PromptTokens),
				strconv.Itoa(s.CachedTokens), share(s.CachedShare), strconv.Itoa(s.OutputTokens), "", "", "", "",
				f(s.TTFTMeanMs), f(s.TTFTP50Ms), "", "", f(s.TTFTMaxMs)}
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
