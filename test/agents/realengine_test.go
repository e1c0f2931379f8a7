//go:build unix

package agents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"llmgate/internal/testenv"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The real-engine suite (issue 29): Claude Code, Codex and opencode, each
// configured only by llmgate connect, through `llmgate serve -c` to llama.cpp's
// real llama-server, which the gateway starts from its engines: section. The
// model is test/real-engine's 46 MB Qwen3-architecture model with random
// weights and the real Qwen3 tokenizer and chat template: its words are
// gibberish, but every token count, context check, chat template and prefix
// cache is llama.cpp's own. Its context is 14,336 tokens, tight for Claude
// Code's prompt (about 11,500 tokens), and the end-of-turn token has a small
// logit bias so that answers end after a few tokens.
//
// A run passes when the client exits 0 and no request it sent was refused:
// every exchange answered below 400 without an error event in its stream
// (a refusal by the gateway, such as context_length_exceeded, or by the
// engine). The test also reports, for Claude Code's first request, the
// gateway's prompt count (message_start input_tokens, and count_tokens
// asked afterwards) against llama.cpp's own (prompt_tokens in the ledger),
// and the cached share of a second session's first request with and
// without Claude Code's billing line (anthropic_billing_header).

const (
	// realContext is llama-server's context: it caps -c at the GGUF's 2,048
	// unless the model's context_length is overridden to match.
	realContext = 14336
	// realModel is the model the clients use; realKeepModel is served by a
	// second llama-server whose requests keep Claude Code's billing line.
	realModel     = "qwen3"
	realKeepModel = "qwen3-keep-billing"
	// defaultRealRunTimeout bounds a client run on the real engine: a cold
	// prefill of Claude Code's prompt takes seconds on two idle cores, and
	// minutes on a busy machine.
	defaultRealRunTimeout = 5 * time.Minute
)

// realRun is one invocation of a client on the real engine.
type realRun struct {
	name   string
	model  string   // connect --model before the run, when it changes
	args   []string // before the prompt, which comes last
	prompt string
}

// realClients are the clients of the suite and their runs, in order. Claude
// Code's first run starts the engine; its second continues the first
// session (-c); its third is a new session, whose first request can reuse
// the cached prompt of the first only without the billing line; the last
// two are two sessions on the engine that keeps the line.
var realClients = []struct {
	c    *client
	runs []realRun
}{
	{claudeCode, []realRun{
		{name: "first", model: realModel, args: []string{"-p", "--output-format", "json"}, prompt: "Say hello in one short sentence."},
		{name: "continued", args: []string{"-p", "-c", "--output-format", "json"}, prompt: "Now say goodbye."},
		{name: "second-session", args: []string{"-p", "--output-format", "json"}, prompt: "Name a colour."},
		{name: "keep-billing-first", model: realKeepModel, args: []string{"-p", "--output-format", "json"}, prompt: "Say hello in one short sentence."},
		{name: "keep-billing-second-session", args: []string{"-p", "--output-format", "json"}, prompt: "Name a colour."},
	}},
	{codex, []realRun{{name: "exec", model: realModel, args: codexArgs, prompt: "Say hello in one short sentence."}}},
	{opencode, []realRun{{name: "run", model: realModel, args: []string{"run", "--format", "json"}, prompt: "Say hello in one short sentence."}}},
}

func TestAgents_RealClientsOnLlamaServer(t *testing.T) {
	if os.Getenv("LLMGATE_AGENTS") != "1" {
		t.Skip("SKIPPED: real-client runs need LLMGATE_AGENTS=1 and `npm ci --prefix test/agents` (.ci/agents.sh does both)")
	}
	server, model := os.Getenv("LLMGATE_TEST_LLAMA_SERVER"), os.Getenv("LLMGATE_TEST_LLAMA_MODEL")
	if server == "" || model == "" {
		t.Skip("SKIPPED: the real-engine runs need llama.cpp's llama-server and its test model: " +
			`eval "$(test/real-engine/setup.sh)" sets LLMGATE_TEST_LLAMA_SERVER and LLMGATE_TEST_LLAMA_MODEL (.ci/agents.sh does)`)
	}
	e := newEnv(t, "real-engine", defaultRealRunTimeout)
	cfg, data := filepath.Join(e.out, "llmgate.yaml"), filepath.Join(e.tmp, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(realConfig(server, model, data)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.gateway = startGateway(t, e.bin, []string{"serve", "-c", cfg}, "sk-lg-agents-"+randomHex(16), false, filepath.Join(e.out, "gateway.log"))
	t.Cleanup(func() { // before the gateway stops: the engines' own logs (slot choice, prompt cache)
		for _, name := range []string{"llama", "llama-keep"} {
			_ = os.WriteFile(filepath.Join(e.out, "engine-"+name+".log"), []byte(engineLog(e.gateway, name)), 0o644)
		}
	})

	rep := &realReport{}
	for _, rc := range realClients {
		t.Run(rc.c.name, func(t *testing.T) { runReal(t, e, rc.c, rc.runs, rep) })
	}
	summary := rep.String()
	_ = os.WriteFile(filepath.Join(e.out, "summary.txt"), []byte(summary), 0o644)
	t.Logf("real-engine summary:\n%s", summary)
	// Without the billing line a new session starts with the previous
	// one's system prompt and tools: llama-server reuses most of it.
	if f := rep.first(claudeCode.name, "second-session"); f != nil && f.ledger.prompt > 0 && 2*f.ledger.cached < f.ledger.prompt {
		t.Errorf("a second Claude Code session's first request had %d of %d prompt tokens cached: want most of them (the billing line left out)",
			f.ledger.cached, f.ledger.prompt)
	}
}

// realConfig is the gateway's config: two llama-servers (-t 2: CI has two
// cores), the second keeping Claude Code's billing line. No -np: it would
// switch the unified KV cache off and divide the context among the slots.
func realConfig(server, model, data string) string {
	engine := func(name, alias, extra string) string {
		return fmt.Sprintf(`  %s:
    cmd: [%q, -m, %q, --alias, %s, --host, 127.0.0.1, --port, "${PORT}", -t, "2",
          --override-kv, "qwen3.context_length=int:%d", -c, "%d", --logit-bias, "151645+1.5"]
    models: [%s]
    stop_signal: SIGINT
    startup_timeout: 2m
%s`, name, server, model, alias, realContext, realContext, alias, extra)
	}
	return fmt.Sprintf("listen: 127.0.0.1:0\ndatabase: %s\nengines:\n%s%s", filepath.Join(data, "llmgate.db"),
		engine("llama", realModel, ""), engine("llama-keep", realKeepModel, "    anthropic_billing_header: keep\n"))
}

// runReal configures one client with llmgate connect and runs its runs.
func runReal(t *testing.T, e *env, c *client, runs []realRun, rep *realReport) {
	sb := sandboxFor(e.tmp, c)
	out := filepath.Join(e.out, c.name)
	for _, d := range []string{sb.home, sb.work, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rec := startRecorder(t, e.gateway.base)
	trap := startEgressTrap(t)
	t.Cleanup(func() {
		if err := rec.writeJSONL(filepath.Join(out, "exchanges.jsonl")); err != nil {
			t.Error(err)
		}
		var b strings.Builder
		for _, ex := range rec.snapshot(0) {
			b.WriteString(describe(ex) + "\n")
		}
		fmt.Fprintf(&b, "egress attempts (refused): %v\n", trap.hosts())
		_ = os.WriteFile(filepath.Join(out, "requests.txt"), []byte(b.String()), 0o644)
	})
	env := append(sb.baseEnv(), trap.proxyEnv()...)
	env = append(env, c.env(e)...)
	bin, _ := filepath.Abs(filepath.Join("node_modules", ".bin", c.bin))
	for _, r := range runs {
		if r.model != "" {
			connectClient(t, e, sb, out, c.name, rec.url, r.model)
		}
		ok := t.Run(r.name, func(t *testing.T) {
			from := rec.count()
			res := execClient(bin, append(append([]string{}, r.args...), r.prompt), env, sb.work, e.timeout)
			res.exchanges = rec.snapshot(from)
			_ = os.WriteFile(filepath.Join(out, r.name+".stdout"), res.stdout, 0o644)
			_ = os.WriteFile(filepath.Join(out, r.name+".stderr"), res.stderr, 0o644)
			line := realLine{client: c.name, run: r.name, exit: exitCode(res.err), took: res.took, requests: len(res.exchanges)}
			defer func() {
				rep.add(line)
				if t.Failed() {
					dumpFailure(t, e, res)
				}
			}()
			t.Logf("%s %s: exit %d after %v, %d requests to the gateway", c.bin, strings.Join(r.args, " "), line.exit,
				res.took.Round(100*time.Millisecond), len(res.exchanges))
			line.refused = refusals(res.exchanges)
			for _, why := range line.refused {
				t.Errorf("refused: %s", why)
			}
			if res.err != nil {
				t.Errorf("%s exited %d (%v), want 0", c.bin, line.exit, res.err)
			}
			if len(res.exchanges) == 0 {
				t.Errorf("%s sent the gateway no request", c.bin)
			}
			if c == claudeCode {
				line.first = claudeFirstRequest(t, e, res.exchanges)
			}
		})
		if !ok && r.name == "first" {
			break // the later runs continue or compare with this one
		}
	}
	if unexpected := unexpectedEgress(trap.hosts(), c.allowedEgress); len(unexpected) > 0 {
		t.Errorf("%s tried to reach %v (refused by the test's proxy)", c.name, unexpected)
	}
}

// refusals lists the exchanges that were refused: a status of 400 or more
// (or none), or an error event inside a 200 stream, with what they said.
func refusals(exs []exchange) []string {
	var out []string
	for _, ex := range exs {
		switch {
		case ex.Err != "" || ex.Status == 0:
			out = append(out, fmt.Sprintf("#%d %s %s: no answer (%s)", ex.Seq, ex.Method, ex.URL, ex.Err))
		case ex.Status >= 400:
			out = append(out, fmt.Sprintf("#%d %s %s: %d %s", ex.Seq, ex.Method, ex.URL, ex.Status, clip(ex.RespBody, 400)))
		default:
			if ev := errorEvent(ex.RespBody); ev != "" {
				out = append(out, fmt.Sprintf("#%d %s %s: 200 with an error event %s", ex.Seq, ex.Method, ex.URL, clip(ev, 400)))
			}
		}
	}
	return out
}

// errorEvent returns the first error a response body carries: an SSE data
// line or a JSON body whose type is error or response.failed, or that has
// an error member (OpenAI's in-stream error).
func errorEvent(body string) string {
	isErr := func(raw []byte) bool {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return false
		}
		var typ string
		_ = json.Unmarshal(m["type"], &typ)
		return typ == "error" || typ == "response.failed" || len(m["error"]) > 0 && string(m["error"]) != "null"
	}
	if isErr([]byte(strings.TrimSpace(body))) {
		return body
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok && isErr([]byte(strings.TrimSpace(data))) {
			return data
		}
	}
	return ""
}

// firstFigures are the counts of Claude Code's first request of a run.
type firstFigures struct {
	requestID    string
	messageStart int // the gateway's message_start usage.input_tokens
	countTokens  int // the gateway's count_tokens of the same body, asked afterwards
	ledger       ledgerLine
}

// claudeFirstRequest reads the counts of a run's first Messages request:
// what the gateway said at message_start and says to count_tokens now,
// and what llama.cpp reported (the ledger's prompt_tokens and
// cached_tokens, from the gateway's access log).
func claudeFirstRequest(t *testing.T, e *env, exs []exchange) *firstFigures {
	t.Helper()
	var ex *exchange
	for i := range exs {
		if exs[i].Method == http.MethodPost && strings.HasPrefix(exs[i].URL, "/v1/messages") && !strings.Contains(exs[i].URL, "count_tokens") {
			ex = &exs[i]
			break
		}
	}
	if ex == nil {
		t.Error("no POST /v1/messages among the run's requests")
		return nil
	}
	f := &firstFigures{requestID: ex.RespHeader["X-Request-Id"], messageStart: messageStartInput(ex.RespBody)}
	f.ledger = waitLedgerLine(e.gateway.log, f.requestID)
	f.countTokens = countTokens(t, e.gateway, ex.Body)
	t.Logf("first request %s: message_start input_tokens %d, count_tokens %d, llama.cpp prompt_tokens %d (cached %d), ttft %.0f ms",
		f.requestID, f.messageStart, f.countTokens, f.ledger.prompt, f.ledger.cached, f.ledger.ttftMS)
	if f.ledger.prompt == 0 {
		t.Errorf("no access-log line with the prompt_tokens of request %s", f.requestID)
		return f
	}
	if f.messageStart != f.ledger.prompt {
		t.Errorf("message_start input_tokens %d, llama.cpp counted %d: the gateway's count is not the engine's", f.messageStart, f.ledger.prompt)
	}
	if f.countTokens != f.ledger.prompt {
		t.Errorf("count_tokens %d, llama.cpp counted %d: the gateway's count is not the engine's", f.countTokens, f.ledger.prompt)
	}
	return f
}

// messageStartInput is message_start's usage.input_tokens in a recorded
// Messages stream (0 when absent).
func messageStartInput(body string) int {
	for _, line := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		var ev struct {
			Type    string `json:"type"`
			Message struct {
				Usage struct {
					InputTokens int `json:"input_tokens"`
				} `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(data)), &ev) == nil && ev.Type == "message_start" {
			return ev.Message.Usage.InputTokens
		}
	}
	return 0
}

// countTokens asks the gateway's count_tokens for a Messages body (its
// generation-only fields left out), as Claude Code would.
func countTokens(t *testing.T, g *gateway, body json.RawMessage) int {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Errorf("count_tokens: the recorded body is not JSON: %v", err)
		return 0
	}
	for _, k := range []string{"max_tokens", "stream", "metadata", "temperature", "context_management", "output_config"} {
		delete(m, k)
	}
	b, _ := json.Marshal(m)
	req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/messages/count_tokens", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+g.key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("count_tokens: %v", err)
		return 0
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		InputTokens int `json:"input_tokens"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil {
		t.Errorf("count_tokens: %d %s", resp.StatusCode, clip(string(raw), 400))
	}
	t.Logf("count_tokens answered by %s", resp.Header.Get("Llmgate-Token-Count"))
	return out.InputTokens
}

// ledgerLine is what the access log says of one request.
type ledgerLine struct {
	prompt, cached int
	ttftMS         float64
}

var (
	promptField = regexp.MustCompile(` prompt_tokens=(\d+)`)
	cachedField = regexp.MustCompile(` cached_tokens=(\d+)`)
	ttftField   = regexp.MustCompile(` ttft_ms=([0-9.]+)`)
)

// waitLedgerLine finds the access-log line of request id (written once the
// answer was flushed, so shortly after the client has it).
func waitLedgerLine(logPath, id string) ledgerLine {
	var l ledgerLine
	within := 10 * time.Second
	if id == "" {
		within = 0 // look once
	}
	testenv.Poll(within, func() bool {
		for _, line := range strings.Split(readFile(logPath), "\n") {
			if !strings.Contains(line, "msg=request ") || !strings.Contains(line, " request_id="+id+" ") {
				continue
			}
			if m := promptField.FindStringSubmatch(line); m != nil {
				l.prompt, _ = strconv.Atoi(m[1])
			}
			if m := cachedField.FindStringSubmatch(line); m != nil {
				l.cached, _ = strconv.Atoi(m[1])
			}
			if m := ttftField.FindStringSubmatch(line); m != nil {
				l.ttftMS, _ = strconv.ParseFloat(m[1], 64)
			}
			return true
		}
		return false
	})
	return l // zero when not found
}

// engineLog fetches an engine's recent output from the admin API.
func engineLog(g *gateway, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/admin/engines/"+name+"/logs?lines=1000", nil)
	req.Header.Set("Authorization", "Bearer "+g.master)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var out struct {
		Lines []struct {
			Text string `json:"text"`
		} `json:"lines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Sprintf("status %d: %v", resp.StatusCode, err)
	}
	var b strings.Builder
	for _, l := range out.Lines {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	default:
		return -1 // killed at the time-out, or not started
	}
}

// realLine is one run's row of the summary.
type realLine struct {
	client, run string
	exit        int
	took        time.Duration
	requests    int
	refused     []string
	first       *firstFigures
}

// realReport collects the runs' figures for the summary.
type realReport struct{ lines []realLine }

func (r *realReport) add(l realLine) { r.lines = append(r.lines, l) }

// first returns the first-request figures of a run (nil when it has none).
func (r *realReport) first(client, run string) *firstFigures {
	for _, l := range r.lines {
		if l.client == client && l.run == run {
			return l.first
		}
	}
	return nil
}

func (r *realReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "llama-server, context %d; each client configured only by llmgate connect\n", realContext)
	fmt.Fprintf(&b, "%-12s %-28s %4s %8s %8s %8s  %s\n", "client", "run", "exit", "seconds", "requests", "refused", "first request: message_start / count_tokens / llama.cpp prompt_tokens, cached, ttft")
	for _, l := range r.lines {
		fmt.Fprintf(&b, "%-12s %-28s %4d %8.1f %8d %8d", l.client, l.run, l.exit, l.took.Seconds(), l.requests, len(l.refused))
		if f := l.first; f != nil {
			fmt.Fprintf(&b, "  %d / %d / %d, cached %d (%s), ttft %.0f ms", f.messageStart, f.countTokens, f.ledger.prompt, f.ledger.cached,
				share(f.ledger.cached, f.ledger.prompt), f.ledger.ttftMS)
		}
		b.WriteString("\n")
	}
	for _, pair := range [][2]string{{"second-session", "without the billing line (default)"}, {"keep-billing-second-session", "with the billing line (anthropic_billing_header: keep)"}} {
		if f := r.first(claudeCode.name, pair[0]); f != nil {
			fmt.Fprintf(&b, "Claude Code, a second session's first request %s: %d of %d prompt tokens cached (%s), ttft %.0f ms\n",
				pair[1], f.ledger.cached, f.ledger.prompt, share(f.ledger.cached, f.ledger.prompt), f.ledger.ttftMS)
		}
	}
	return b.String()
}

func share(part, whole int) string {
	if whole == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f %%", 100*float64(part)/float64(whole))
}
