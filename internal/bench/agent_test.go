package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"llmgate/internal/sim"
)

func agentTestWorkload() AgentWorkload {
	return AgentWorkload{Sessions: 3, Turns: 4, SystemPromptWords: 200, ToolResultWords: 30, UserWords: 10, SharedPrefix: true, OutputLen: 8, Seed: 7}
}

func wordsIn(msgs []agentMsg) int {
	n := 0
	for _, m := range msgs {
		n += len(strings.Fields(m.Content))
	}
	return n
}

func TestAgentWorkload_HistoriesGrowTurnByTurn(t *testing.T) {
	w := agentTestWorkload()
	s := w.session(0)
	prev := s.next("")
	if len(prev) != 2 || prev[0].Role != "system" || prev[1].Role != "user" {
		t.Fatalf("first turn: %+v, want a system prompt and a task", prev)
	}
	if n := len(strings.Fields(prev[0].Content)); n < w.SystemPromptWords {
		t.Errorf("system prompt of %d words, want at least %d", n, w.SystemPromptWords)
	}
	for turn := 1; turn < w.Turns; turn++ {
		answer := "answer to turn " + string(rune('0'+turn))
		cur := s.next(answer)
		if len(cur) != len(prev)+2 {
			t.Fatalf("turn %d: %d messages, want %d (the previous ones, the answer, a tool result)", turn, len(cur), len(prev)+2)
		}
		if !reflect.DeepEqual(cur[:len(prev)], prev) {
			t.Fatalf("turn %d does not start with turn %d's messages", turn, turn-1)
		}
		if cur[len(prev)] != (agentMsg{"assistant", answer}) {
			t.Errorf("turn %d: message %d is %+v, want the previous answer", turn, len(prev), cur[len(prev)])
		}
		if n := len(strings.Fields(cur[len(cur)-1].Content)); n < w.ToolResultWords {
			t.Errorf("turn %d: tool result of %d words, want at least %d", turn, n, w.ToolResultWords)
		}
		prev = cur
	}
}

func TestAgentWorkload_SessionsDistinctAndSeedReproducible(t *testing.T) {
	w := agentTestWorkload()
	a, b := w.session(0).next(""), w.session(1).next("")
	if a[0].Content == b[0].Content || strings.HasPrefix(b[0].Content, a[0].Content[:40]) && a[0].Content[:60] == b[0].Content[:60] {
		t.Errorf("sessions 0 and 1 share their system prompt:\n%.80s\n%.80s", a[0].Content, b[0].Content)
	}
	if again := w.session(0).next(""); !reflect.DeepEqual(again, a) {
		t.Error("the same seed and session gave different prompts")
	}
	w2 := w
	w2.Seed++
	if other := w2.session(0).next(""); other[0].Content == a[0].Content {
		t.Error("another seed gave the same system prompt")
	}
}

func TestAgentWorkload_ControlSharesNoPrefixAndKeepsTheLength(t *testing.T) {
	shared := agentTestWorkload()
	control := shared
	control.SharedPrefix = false
	seen := map[string]bool{}
	for si := range 2 {
		ss, cs := shared.session(si), control.session(si)
		for turn := range control.Turns {
			sm, cm := ss.next("the answer"), cs.next("the answer")
			if len(cm) != 2 {
				t.Fatalf("control turn %d: %d messages, want a system prompt and one user message", turn, len(cm))
			}
			head := cm[0].Content[:12]
			if seen[head] {
				t.Errorf("session %d turn %d starts like an earlier control prompt: %q", si, turn, head)
			}
			seen[head] = true
			// The same words as the shared turn, plus the two leading numbers.
			if got, want := wordsIn(cm), wordsIn(sm); got < want || got > want+2 {
				t.Errorf("session %d turn %d: control has %d words, shared %d", si, turn, got, want)
			}
		}
	}
}

func TestComputeAgent_CachedShareFromUsage(t *testing.T) {
	w := AgentWorkload{Sessions: 2, Turns: 2, SharedPrefix: true}
	ok := func(s, turn, in, cached int, reported bool, ttft time.Duration) agentTurn {
		return agentTurn{session: s, turn: turn, res: Result{InputTokens: in, OutputTokens: 10, CachedTokens: cached, CachedReported: reported, TTFT: ttft, E2EL: 2 * ttft}}
	}
	turns := []agentTurn{
		ok(0, 0, 1000, 0, false, 100*time.Millisecond), // vLLM leaves the details out when nothing was cached
		ok(0, 1, 1200, 992, true, 20*time.Millisecond),
		ok(1, 0, 1000, 0, false, 300*time.Millisecond),
		{session: 1, turn: 1, res: Result{Err: ErrTransport, ErrDetail: "connection refused"}},
	}
	r := computeAgent("t", &w, turns, 2*time.Second)
	if r.Completed != 3 || r.Failed != 1 || r.Errors[ErrTransport] != 1 {
		t.Errorf("completed %d failed %d errors %v", r.Completed, r.Failed, r.Errors)
	}
	if r.PromptTokens != 3200 || r.CachedTokens != 992 || r.CachedShare == nil || *r.CachedShare != 0.31 {
		t.Errorf("prompt %d cached %d share %v, want 3200, 992, 0.31", r.PromptTokens, r.CachedTokens, r.CachedShare)
	}
	if s := r.PerSession[0]; s.CachedShare == nil || *s.CachedShare != round3(992.0/2200) || s.TTFTMaxMs != 100 {
		t.Errorf("session 0: %+v", s)
	}
	if s := r.PerSession[1]; s.CachedShare != nil || s.Failed != 1 || s.Completed != 1 {
		t.Errorf("session 1 (nothing reported): share %v, %+v; want unknown", s.CachedShare, s)
	}
	if !reflect.DeepEqual(r.TTFTP50ByTurn, []float64{200, 20}) {
		t.Errorf("TTFT p50 by turn %v, want [200 20]", r.TTFTP50ByTurn)
	}
	if r.RequestThroughput != 1.5 || r.OutputThroughput != 15 {
		t.Errorf("throughput %g req/s, %g tok/s; want 1.5 and 15", r.RequestThroughput, r.OutputThroughput)
	}
	none := computeAgent("t", &w, turns[:1], time.Second)
	if none.CachedShare != nil {
		t.Errorf("no answer reported cached tokens, share %v, want unknown", *none.CachedShare)
	}
}

func agentReport() *Report {
	share, sshare := 0.532, 0.5
	return &Report{Settings: Settings{Dataset: "agent", Agent: &AgentWorkload{Sessions: 1, Turns: 2}}, Agent: []*AgentResult{
		{Target: "sim", SharedPrefix: true, Sessions: 1, Turns: 2, Completed: 2, RequestThroughput: 1.25, OutputThroughput: 40,
			TTFT: Summary{P50: 61.5, P95: 140, P99: 150}, PromptTokens: 4000, CachedTokens: 2128, CachedShare: &share,
			TTFTP50ByTurn: []float64{140, 33.3}, PerSession: []AgentSessionFP{{Session: 0, Completed: 2, PromptTokens: 4000, CachedTokens: 2000, CachedShare: &sshare, TTFTP50Ms: 61.5}}},
		{Target: "other", Sessions: 1, Turns: 2, Completed: 2, TTFT: Summary{P50: 300}, PerSession: []AgentSessionFP{{Session: 0, Completed: 2}}},
	}}
}

func TestAgentReport_TableCSVAndHTMLCarryTheFigures(t *testing.T) {
	r := agentReport()
	var tb bytes.Buffer
	if err := WriteTable(&tb, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"agent 1×2", "53.2%", "unknown", "140 33.3", "agent, no shared prefix", "sessions of sim:", "50.0%"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
	var cb bytes.Buffer
	if err := WriteCSV(&cb, r); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(cb.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "target,shared_prefix,session,") ||
		!strings.HasPrefix(lines[1], "sim,true,all,2,0,4000,2128,0.532,") || !strings.HasPrefix(lines[2], "sim,true,0,2,0,4000,2000,0.5,") ||
		!strings.HasPrefix(lines[3], "other,false,all,2,0,0,0,,") {
		t.Errorf("CSV:\n%s", cb.String())
	}
	var hb bytes.Buffer
	if err := WriteHTML(&hb, r); err != nil {
		t.Fatal(err)
	}
	page := hb.String()
	for _, want := range []string{`id="agent-section"`, `id="agent-sessions"`, `"cached_share":0.532`, `"ttft_p50_ms_by_turn":[140,33.3]`, "Cached share"} {
		if !strings.Contains(page, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	var jb bytes.Buffer
	if err := WriteJSON(&jb, r); err != nil {
		t.Fatal(err)
	}
	var back Report
	err := json.Unmarshal(jb.Bytes(), &back)
	if err != nil || len(back.Agent) != 2 || back.Agent[1].CachedShare != nil || *back.Agent[0].CachedShare != 0.532 {
		t.Errorf("JSON round trip: %v %+v", err, back)
	}
}

// TestRunAgent_AgainstTheSimulatorServesLaterTurnsFromCache runs the agent
// workload against the simulator: later turns find their history in the
// prefix cache, the control finds nothing.
func TestRunAgent_AgainstTheSimulatorServesLaterTurnsFromCache(t *testing.T) {
	mc, _ := sim.PresetFor(sim.DefaultPreset)
	mc.DecodeBase, mc.DecodePerSeq, mc.PrefillBase, mc.PrefillPerToken = time.Millisecond, 0, time.Millisecond, 20*time.Microsecond
	for _, engine := range []string{sim.EngineVLLM, sim.EngineLlamaCpp} {
		ctx, cancel := context.WithCancel(context.Background())
		addr, stop, err := sim.Listen(ctx, "127.0.0.1:0", sim.Config{Models: []sim.ModelConfig{mc}, Seed: 1, Engine: engine})
		if err != nil {
			t.Fatal(err)
		}
		targets := []Target{{Name: "sim", BaseURL: "http://" + addr + "/v1", Model: mc.Name, Endpoint: EndpointChat}}
		w := AgentWorkload{Sessions: 2, Turns: 3, SystemPromptWords: 300, ToolResultWords: 50, UserWords: 10, SharedPrefix: true, OutputLen: 8, Seed: 3}
		rep, err := RunAgent(ctx, Options{Targets: targets, Request: RequestOptions{Timeout: 30 * time.Second}, KeepRequests: true}, w)
		if err != nil {
			t.Fatal(err)
		}
		a := rep.Agent[0]
		if len(rep.Requests) != 6 || rep.Requests[5].Cell != "agent session 1 turn 3" || rep.Requests[5].CachedTok == 0 {
			t.Errorf("%s: per-request rows %+v, want 6, the last one session 1's third turn with cached tokens", engine, rep.Requests)
		}
		if a.Completed != 6 || a.Failed != 0 {
			t.Fatalf("%s: completed %d failed %d: %v", engine, a.Completed, a.Failed, a.ErrorSamples)
		}
		// Turns 2 and 3 repeat at least the system prompt (about 300 of
		// each turn's tokens).
		if a.CachedShare == nil || *a.CachedShare < 0.3 {
			t.Errorf("%s: cached share %v, want most of turns 2 and 3 from the cache", engine, formatShare(a.CachedShare))
		}
		for _, s := range a.PerSession {
			if s.CachedTokens == 0 {
				t.Errorf("%s: session %d had nothing cached", engine, s.Session)
			}
		}
		w.SharedPrefix = false
		rep, err = RunAgent(ctx, Options{Targets: targets, Request: RequestOptions{Timeout: 30 * time.Second}}, w)
		if err != nil {
			t.Fatal(err)
		}
		c := rep.Agent[0]
		if c.CachedTokens > c.PromptTokens/50 {
			t.Errorf("%s: the control had %d of %d prompt tokens cached", engine, c.CachedTokens, c.PromptTokens)
		}
		if engine == sim.EngineLlamaCpp && c.CachedShare == nil {
			t.Errorf("llama.cpp reports cached_tokens 0; the control's share should be known")
		}
		js, _ := json.Marshal(rep)
		if !bytes.Contains(js, []byte(`"agent_workload"`)) {
			t.Errorf("the report's settings lack the agent workload: %s", js[:200])
		}
		stop()
		cancel()
	}
}

// TestAgentReport_RendersInHeadlessChromium draws the agent tables in a
// real browser (skipped where chromium is not installed, required in CI).
func TestAgentReport_RendersInHeadlessChromium(t *testing.T) {
	bin := chromiumPath()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; CI must install Debian's chromium package (apt-get install -y chromium)")
		}
		t.Skip("chromium not installed (apt-get install -y chromium); CI unset, skipping")
	}
	path := filepath.Join(t.TempDir(), "report.html")
	var b bytes.Buffer
	if err := WriteHTML(&b, agentReport()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, chromeLog := renderInChromium(t, bin, path)
	if !strings.Contains(dom, `data-status="ok"`) {
		t.Fatalf("the page script failed; stderr:\n%s", tail(chromeLog, 3000))
	}
	for _, want := range []string{"53.2%", "unknown", "agent, no shared prefix 1×2", "140 33.3"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	checkConsole(t, chromeLog)
}
