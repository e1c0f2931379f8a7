//go:build unix

package engines_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"llmgate/internal/codec"
	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/ledger"
	"llmgate/internal/sim"
	"llmgate/internal/testenv"
	"llmgate/internal/usage"
)

// The engine conformance suite: the same checks, through an llmgate
// gateway that starts the engine on demand, against each engine the
// gateway must read correctly — the simulator answering as vLLM, the
// simulator answering as llama.cpp, and (when LLMGATE_TEST_LLAMA_SERVER and
// LLMGATE_TEST_LLAMA_MODEL name them; CI sets them from
// test/real-engine/setup.sh) llama.cpp's real llama-server. Each check
// prints one line: "check <engine>: <name>: ok (<figures>)".

const (
	master    = "sk-lg-conformance-master"
	model     = "qwen3-tiny"
	contextN  = 2048
	simArg    = "conformance-sim"
	engineKey = "eng"
)

// TestMain doubles as the simulated engine: the gateway starts this test
// binary with "conformance-sim <face> <port>" as an engine's command.
func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == simArg {
		runSim(os.Args[2], os.Args[3])
		return
	}
	os.Exit(m.Run())
}

func runSim(face, port string) {
	mc, _ := sim.PresetFor(sim.DefaultPreset)
	mc.Name, mc.Root = model, model
	mc.MaxModelLen, mc.MaxNumSeqs = contextN, 4
	// Fast, but slow enough that a stream is still in flight when it is cut.
	mc.DecodeBase, mc.DecodePerSeq, mc.PrefillBase, mc.PrefillPerToken = 2*time.Millisecond, 0, time.Millisecond, 0
	cfg := sim.Config{Models: []sim.ModelConfig{mc}, Engine: face, Seed: 1}
	ctx, cancel := context.WithCancel(context.Background())
	addr, stop, err := sim.Listen(ctx, "127.0.0.1:"+port, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(1)
	}
	fmt.Printf("simulated %s engine listening on %s\n", face, addr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	cancel()
	stop()
}

// target is one engine the suite runs against.
type target struct {
	name string
	cmd  []string // with ${PORT}
	// ignoreEOS is the request field that makes the engine generate up to
	// max_tokens.
	real bool
}

func targets(t *testing.T) []target {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ts := []target{
		{name: "sim-vllm", cmd: []string{self, simArg, sim.EngineVLLM, "${PORT}"}},
		{name: "sim-llamacpp", cmd: []string{self, simArg, sim.EngineLlamaCpp, "${PORT}"}},
	}
	server, gguf := os.Getenv("LLMGATE_TEST_LLAMA_SERVER"), os.Getenv("LLMGATE_TEST_LLAMA_MODEL")
	switch {
	case server != "" && gguf != "":
		// The model's context (2048) and llama-server's default slots
		// (4, sharing one unified KV cache: each slot may use it all).
		// "-np 4" would switch the unified cache off and give each slot 512.
		ts = append(ts, target{name: "llama-server", real: true, cmd: []string{server, "-m", gguf, "--host", "127.0.0.1", "--port", "${PORT}",
			"-a", model, "-t", "1"}})
	case os.Getenv("CI") == "true":
		t.Fatal("CI=true but LLMGATE_TEST_LLAMA_SERVER and LLMGATE_TEST_LLAMA_MODEL are not set: run test/real-engine/setup.sh (.ci/run does) so the suite also runs against llama.cpp's llama-server")
	default:
		t.Log("!!! the real llama-server is not part of this run: set LLMGATE_TEST_LLAMA_SERVER and LLMGATE_TEST_LLAMA_MODEL (test/real-engine/setup.sh prints both)")
	}
	return ts
}

// TestEngineConformance runs every check against every engine.
func TestEngineConformance(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			c := startConformance(t, tg)
			c.run(t)
		})
	}
}

// conf is one gateway in front of one engine started on demand.
type conf struct {
	tg   target
	g    *gateway.Gateway
	base string // the gateway's base URL, without /v1
	logs *testenv.SyncBuffer
	dir  string
}

func startConformance(t *testing.T, tg target) *conf {
	dir := t.TempDir()
	cmd, _ := json.Marshal(tg.cmd)
	yaml := fmt.Sprintf(`database: %s
engines:
  %s:
    cmd: %s
    models: [%s]
    startup_timeout: 60s
    health_interval: 100ms
    stop_grace: 5s
`, filepath.Join(dir, "gw.db"), engineKey, cmd, model)
	cfg, err := config.Load(strings.NewReader(yaml), "conformance.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	g, err := gateway.Start(context.Background(), gateway.Options{Config: cfg, Listener: ln, MasterKey: master, Notice: io.Discard,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), LedgerOptions: ledger.Options{Interval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = g.Close(ctx)
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	return &conf{tg: tg, g: g, base: "http://" + g.Addr, logs: logs, dir: dir}
}

// check runs one named check and prints its line.
func (c *conf) check(t *testing.T, name string, f func(t *testing.T) string) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		got := f(t)
		if !t.Failed() {
			fmt.Printf("check %s: %s: ok (%s)\n", c.tg.name, name, got)
		}
	})
}

func (c *conf) run(t *testing.T) {
	var firstAnswer time.Time
	c.check(t, "engine started on demand, context learned within 5 s of its first answer", func(t *testing.T) string {
		if st, _ := c.g.Engines.Get(engineKey); st.State != "stopped" {
			t.Fatalf("the engine runs before any request: %s", st.State)
		}
		t0 := time.Now()
		r := c.post(t, "/v1/chat/completions", chatBody("Say hello.", 8, false), nil)
		if r.status != 200 {
			t.Fatalf("first request: %d %s", r.status, r.body)
		}
		firstAnswer = time.Now()
		if _, ok := testenv.Poll(time.Until(firstAnswer.Add(5*time.Second)), func() bool { return c.listedContext(t) == contextN }); !ok {
			t.Fatalf("GET /v1/models shows max_model_len %d five seconds after the first answer, want %d", c.listedContext(t), contextN)
		}
		learned := time.Since(firstAnswer)
		return fmt.Sprintf("first answer after %s (start included); max_model_len %d listed %s after it", firstAnswer.Sub(t0).Round(time.Millisecond), contextN, learned.Round(time.Millisecond))
	})
	if t.Failed() {
		return
	}
	c.check(t, "chat, usage in the ledger", func(t *testing.T) string {
		r := c.post(t, "/v1/chat/completions", chatBody("Name three colours.", 12, false), nil)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var resp struct {
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal([]byte(r.body), &resp)
		u := resp.Usage
		rec := c.record(t, r.id)
		if u.PromptTokens == 0 || rec.PromptTokens != u.PromptTokens || rec.CompletionTokens != u.CompletionTokens || rec.Estimated {
			t.Fatalf("ledger %d+%d (estimated %v), engine %d+%d", rec.PromptTokens, rec.CompletionTokens, rec.Estimated, u.PromptTokens, u.CompletionTokens)
		}
		return fmt.Sprintf("prompt %d, completion %d, as the engine reported", u.PromptTokens, u.CompletionTokens)
	})
	c.check(t, "chat stream, usage in the ledger", func(t *testing.T) string {
		r := c.post(t, "/v1/chat/completions", chatBody("Count to five.", 12, true), nil)
		if r.status != 200 || !strings.Contains(r.body, "data: [DONE]") {
			t.Fatalf("%d %s", r.status, r.body)
		}
		rec := c.record(t, r.id)
		if rec.PromptTokens == 0 || rec.CompletionTokens == 0 || rec.Estimated {
			t.Fatalf("ledger %+v", rec)
		}
		return fmt.Sprintf("prompt %d, completion %d, from the engine's usage", rec.PromptTokens, rec.CompletionTokens)
	})
	if c.tg.real {
		// llama.cpp reports one choice's output for n > 1 (the simulator
		// refuses n > 1, as its doc says).
		c.check(t, "several choices (n=2, a prompt list): every sequence's output and every prompt in the ledger", func(t *testing.T) string {
			body := func(stream bool) string {
				return fmt.Sprintf(`{"model":%q,"max_tokens":4,"n":2,"ignore_eos":true,"stream":%v,"messages":[{"role":"user","content":"Say hi."}]}`, model, stream)
			}
			r := c.post(t, "/v1/chat/completions", body(true), nil)
			if r.status != 200 || strings.Count(r.body, `"index":1`) == 0 {
				t.Fatalf("stream: %d %s", r.status, r.body)
			}
			if rec := c.record(t, r.id); rec.CompletionTokens != 8 || rec.Estimated {
				t.Fatalf("stream of 2 choices of 4 tokens: ledger has %d output tokens (estimated %v), want 8", rec.CompletionTokens, rec.Estimated)
			}
			w := c.post(t, "/v1/chat/completions", body(false), nil)
			var resp struct {
				Choices []json.RawMessage `json:"choices"`
				Usage   struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if w.status != 200 || json.Unmarshal([]byte(w.body), &resp) != nil || len(resp.Choices) != 2 {
				t.Fatalf("whole answer: %d %s", w.status, w.body)
			}
			rec := c.record(t, w.id)
			if rec.CompletionTokens <= resp.Usage.CompletionTokens || !rec.Estimated {
				t.Fatalf("whole answer of 2 choices: the engine counted %d, the ledger %d (estimated %v): want the second choice added, estimated",
					resp.Usage.CompletionTokens, rec.CompletionTokens, rec.Estimated)
			}
			// A completions prompt list: every prompt once, every sequence.
			prompts := []string{"Say hi.", "Tell me about the sea in a few words."}
			each := 0
			for _, p := range prompts {
				one := c.post(t, "/v1/completions", fmt.Sprintf(`{"model":%q,"max_tokens":1,"prompt":%s}`, model, jsonString(p)), nil)
				var u struct {
					Usage struct {
						PromptTokens int `json:"prompt_tokens"`
					} `json:"usage"`
				}
				if one.status != 200 || json.Unmarshal([]byte(one.body), &u) != nil || u.Usage.PromptTokens == 0 {
					t.Fatalf("one prompt: %d %s", one.status, one.body)
				}
				each += u.Usage.PromptTokens
			}
			list := c.post(t, "/v1/completions", fmt.Sprintf(`{"model":%q,"max_tokens":4,"n":2,"ignore_eos":true,"stream":true,"prompt":[%s,%s]}`,
				model, jsonString(prompts[0]), jsonString(prompts[1])), nil)
			if list.status != 200 {
				t.Fatalf("prompt list: %d %s", list.status, list.body)
			}
			if rec := c.record(t, list.id); rec.PromptTokens != each || rec.CompletionTokens != 16 || rec.Estimated {
				t.Fatalf("2 prompts x n=2 x 4 tokens: ledger %d+%d (estimated %v), want %d (the prompts' own counts, once each) + 16",
					rec.PromptTokens, rec.CompletionTokens, rec.Estimated, each)
			}
			return fmt.Sprintf("stream: 8 output tokens from the engine's two per-choice reports; whole answer: the engine's %d + the second choice estimated = %d; "+
				"2 prompts x n=2 streamed: prompt %d (each once), output 16", resp.Usage.CompletionTokens, rec.CompletionTokens, each)
		})
	}
	var counted int
	c.check(t, "count_tokens is the engine's own count", func(t *testing.T) string {
		msgs := `{"model":"` + model + `","system":"You are terse.","messages":[{"role":"user","content":"What is the capital of France?"}]}`
		r := c.post(t, "/v1/messages/count_tokens", msgs, map[string]string{"anthropic-version": "2023-06-01"})
		if r.status != 200 || r.header.Get("Llmgate-Token-Count") != "tokenizer" {
			t.Fatalf("%d %s (%s: %q, %q)", r.status, r.body, "Llmgate-Token-Count", r.header.Get("Llmgate-Token-Count"), r.header.Get("Llmgate-Token-Count-Reason"))
		}
		var got struct {
			InputTokens int `json:"input_tokens"`
		}
		_ = json.Unmarshal([]byte(r.body), &got)
		counted = got.InputTokens
		// The same request served: the engine's prompt_tokens.
		served := c.post(t, "/v1/messages", strings.Replace(msgs, `"messages"`, `"max_tokens":4,"messages"`, 1), map[string]string{"anthropic-version": "2023-06-01"})
		var resp struct {
			Usage struct {
				InputTokens int `json:"input_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal([]byte(served.body), &resp)
		if served.status != 200 || resp.Usage.InputTokens != counted {
			t.Fatalf("count_tokens %d, the engine served the same request with %d input tokens (%d %s)", counted, resp.Usage.InputTokens, served.status, served.body)
		}
		line := fmt.Sprintf("%d tokens, equal to the engine's input tokens for the same request", counted)
		if c.tg.name != "sim-vllm" {
			// llama.cpp's own /v1/messages/count_tokens (the simulator has none).
			if own := c.engineCount(t, msgs); own >= 0 {
				if own != counted {
					t.Fatalf("count_tokens %d, llama.cpp's own /v1/messages/count_tokens %d", counted, own)
				}
				line += fmt.Sprintf(" and to llama.cpp's own count_tokens (%d)", own)
			}
		}
		return line
	})
	c.check(t, "Messages stream through translation, exact input_tokens", func(t *testing.T) string {
		body := `{"model":"` + model + `","max_tokens":8,"stream":true,"system":"You are terse.","messages":[{"role":"user","content":"What is the capital of France?"}]}`
		r := c.post(t, "/v1/messages", body, map[string]string{"anthropic-version": "2023-06-01"})
		if r.status != 200 || !strings.Contains(r.body, "event: message_stop") {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if want := fmt.Sprintf(`"input_tokens":%d`, counted); !strings.Contains(r.body, want) {
			t.Fatalf("message_start does not carry the engine's count %d: %s", counted, firstLine(r.body, "message_start"))
		}
		rec := c.record(t, r.id)
		if rec.PromptTokens != counted || rec.Estimated {
			t.Fatalf("ledger %+v, want %d prompt tokens", rec, counted)
		}
		return fmt.Sprintf("message_start input_tokens %d, ledger %d+%d", counted, rec.PromptTokens, rec.CompletionTokens)
	})
	c.check(t, "Responses through translation", func(t *testing.T) string {
		r := c.post(t, "/v1/responses", `{"model":"`+model+`","input":"Say hi.","max_output_tokens":8,"store":false}`, nil)
		var resp struct {
			Status string `json:"status"`
			Usage  struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal([]byte(r.body), &resp)
		if r.status != 200 || resp.Usage.InputTokens == 0 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		rec := c.record(t, r.id)
		if rec.PromptTokens != resp.Usage.InputTokens || rec.Estimated {
			t.Fatalf("ledger %+v, answer usage %+v", rec, resp.Usage)
		}
		return fmt.Sprintf("status %s, %d input tokens in the answer and the ledger", resp.Status, rec.PromptTokens)
	})
	c.check(t, "an output limit beyond the context is fitted with the engine's count", func(t *testing.T) string {
		words := prose(3000) // ~800 tokens
		r := c.post(t, "/v1/chat/completions", chatBody(words, 32000, false), nil)
		h := r.header.Get("Llmgate-Output-Limit")
		var to, ctx, prompt int
		if _, err := fmt.Sscanf(h, "32000->%d; context=%d; prompt=%d; prompt_source=tokenizer", &to, &ctx, &prompt); err != nil || ctx != contextN || to != contextN-prompt {
			t.Fatalf("header %q (%v)", h, err)
		}
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		rec := c.record(t, r.id)
		if rec.PromptTokens != prompt {
			t.Fatalf("the gateway counted %d prompt tokens, the engine reported %d", prompt, rec.PromptTokens)
		}
		return h
	})
	c.check(t, "a prompt at 90% of the context is served", func(t *testing.T) string {
		text, n := c.promptOf(t, contextN*9/10)
		r := c.post(t, "/v1/chat/completions", chatBody(text, 16, false), nil)
		if r.status != 200 {
			t.Fatalf("%d-token prompt (%.0f%% of %d): %d %s", n, 100*float64(n)/contextN, contextN, r.status, r.body)
		}
		rec := c.record(t, r.id)
		return fmt.Sprintf("%d prompt tokens (%.0f%% of %d), served; ledger prompt %d", n, 100*float64(n)/contextN, contextN, rec.PromptTokens)
	})
	c.check(t, "a prompt over the context gets the engine's numbers", func(t *testing.T) string {
		text, n := c.promptOf(t, contextN+300)
		body := chatBody(text, 16, false)
		r := c.post(t, "/v1/chat/completions", body, nil)
		var env struct {
			Error struct {
				Code          string `json:"code"`
				Message       string `json:"message"`
				NPromptTokens int    `json:"n_prompt_tokens"`
				NCtx          int    `json:"n_ctx"`
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(r.body), &env)
		e := env.Error
		if r.status != 400 || e.Code != "context_length_exceeded" || e.NCtx != contextN || e.NPromptTokens != n ||
			!strings.HasPrefix(e.Message, fmt.Sprintf("prompt is too long: %d tokens > %d maximum", n, contextN)) {
			t.Fatalf("%d %s; want 400 context_length_exceeded with n_prompt_tokens %d, n_ctx %d", r.status, r.body, n, contextN)
		}
		// What the engine itself says of the same request.
		ee := c.direct(t, body)
		if ee.PromptTokens != n || ee.ContextTokens != contextN {
			t.Fatalf("the engine says %d tokens > %d; the gateway said %d > %d", ee.PromptTokens, ee.ContextTokens, n, contextN)
		}
		r = c.post(t, "/v1/messages", `{"model":"`+model+`","max_tokens":16,"stream":true,"messages":[{"role":"user","content":`+jsonString(text)+`}]}`, map[string]string{"anthropic-version": "2023-06-01"})
		if r.status != 400 || !strings.Contains(r.body, `"type":"error"`) || !strings.Contains(r.body, fmt.Sprintf("prompt is too long: %d tokens > %d maximum", n, contextN)) {
			t.Fatalf("Messages: %d %s", r.status, r.body)
		}
		return fmt.Sprintf("400 context_length_exceeded, n_prompt_tokens %d, n_ctx %d, as the engine says; Messages: 'prompt is too long'", n, contextN)
	})
	c.check(t, "engine killed mid-stream: engine_crashed with its log, then restarted", func(t *testing.T) string {
		st, _ := c.g.Engines.Get(engineKey)
		starts := st.Starts
		resp, err := c.open(t, "/v1/chat/completions", longStreamBody(c.tg), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		var seen strings.Builder
		killed := false
		for {
			line, err := rd.ReadString('\n')
			seen.WriteString(line)
			if !killed && strings.Contains(line, `"content"`) {
				st, _ := c.g.Engines.Get(engineKey)
				if st.PID == 0 {
					t.Fatal("no engine pid")
				}
				_ = syscall.Kill(st.PID, syscall.SIGKILL)
				killed = true
			}
			if err != nil {
				break
			}
		}
		out := seen.String()
		if !killed || !strings.Contains(out, "engine_crashed") || !strings.Contains(out, "Last log lines") {
			t.Fatalf("the client's stream after the kill:\n%s", tail(out, 1500))
		}
		r := c.post(t, "/v1/chat/completions", chatBody("Are you back?", 8, false), nil)
		if r.status != 200 {
			t.Fatalf("after the crash: %d %s", r.status, r.body)
		}
		st, _ = c.g.Engines.Get(engineKey)
		if st.Starts != starts+1 {
			t.Fatalf("starts %d -> %d, want one restart", starts, st.Starts)
		}
		return "the client got engine_crashed with the engine's last log lines; the next request restarted it and got 200"
	})
	c.check(t, "repeated prompt: cached_tokens N of M", func(t *testing.T) string {
		// The same long prompt twice: the engine's prefix cache (vLLM's
		// blocks, llama.cpp's slots) serves the second from the first. All
		// but the last token can be reused; vLLM reuses whole blocks of 16.
		text, _ := c.promptOf(t, 600)
		body := chatBody("Remember this. "+text, 4, false)
		var prompt, cached [2]int
		var id string
		for i := range 2 {
			r := c.post(t, "/v1/chat/completions", body, nil)
			if r.status != 200 {
				t.Fatalf("request %d: %d %s", i+1, r.status, r.body)
			}
			var got struct {
				Usage struct {
					PromptTokens        int `json:"prompt_tokens"`
					PromptTokensDetails *struct {
						CachedTokens int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if err := json.Unmarshal([]byte(r.body), &got); err != nil {
				t.Fatal(err)
			}
			prompt[i] = got.Usage.PromptTokens
			if d := got.Usage.PromptTokensDetails; d != nil {
				cached[i] = d.CachedTokens
			} else if i == 1 {
				t.Fatalf("the repeated prompt's answer has no usage.prompt_tokens_details: %s", r.body)
			}
			id = r.id
		}
		n, m := cached[1], prompt[1]
		if n > m-1 || n < (m-1)/16*16 || n <= cached[0] {
			t.Fatalf("repeated prompt of %d tokens: cached_tokens %d (first time %d), want between %d (whole blocks) and %d (all but the last token)",
				m, n, cached[0], (m-1)/16*16, m-1)
		}
		if rec := c.record(t, id); rec.CachedTokens != n {
			t.Errorf("the ledger records %d cached tokens, the answer said %d", rec.CachedTokens, n)
		}
		return fmt.Sprintf("cached_tokens %d of %d on the repeat, %d the first time", n, m, cached[0])
	})
}

// listedContext is max_model_len as the gateway's /v1/models lists it.
func (c *conf) listedContext(t *testing.T) int {
	r := c.get(t, "/v1/models")
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	_ = json.Unmarshal([]byte(r.body), &list)
	for _, m := range list.Data {
		if m.ID == model {
			return m.MaxModelLen
		}
	}
	return 0
}

// promptOf returns prose of about want prompt tokens as the engine counts
// a chat request of it (through the gateway's count_tokens), and the
// count.
func (c *conf) promptOf(t *testing.T, want int) (string, int) {
	text := prose(want * 3)
	for range 8 {
		n := c.countChat(t, text)
		if n >= want-want/50 && n <= want+want/50 {
			return text, n
		}
		text = prose(len(text) * want / max(n, 1))
	}
	n := c.countChat(t, text)
	return text, n
}

// countChat counts a chat request of one user message, as the engine
// will (count_tokens of the same messages; the check above shows it is
// the engine's count).
func (c *conf) countChat(t *testing.T, text string) int {
	r := c.post(t, "/v1/messages/count_tokens", `{"model":"`+model+`","messages":[{"role":"user","content":`+jsonString(text)+`}]}`, map[string]string{"anthropic-version": "2023-06-01"})
	var got struct {
		InputTokens int `json:"input_tokens"`
	}
	if r.status != 200 || json.Unmarshal([]byte(r.body), &got) != nil || r.header.Get("Llmgate-Token-Count") != "tokenizer" {
		t.Fatalf("count_tokens: %d %s %s", r.status, r.header.Get("Llmgate-Token-Count-Reason"), r.body)
	}
	return got.InputTokens
}

// engineURL is the engine's own address.
func (c *conf) engineURL(t *testing.T) string {
	st, err := c.g.Engines.Get(engineKey)
	if err != nil || st.Port == 0 {
		t.Fatalf("engine status: %+v %v", st, err)
	}
	return "http://127.0.0.1:" + strconv.Itoa(st.Port)
}

// direct sends a chat body straight to the engine and reads its error.
func (c *conf) direct(t *testing.T, body string) codec.EngineError {
	resp, err := http.Post(c.engineURL(t)+"/v1/chat/completions", "application/json", strings.NewReader(strings.Replace(body, `"model":"`+model+`"`, `"model":"`+model+`"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 {
		t.Fatalf("the engine served a prompt the gateway refused: %d %s", resp.StatusCode, raw)
	}
	return codec.ParseEngineError(raw)
}

// engineCount is llama.cpp's own /v1/messages/count_tokens, or -1 when the
// engine has none.
func (c *conf) engineCount(t *testing.T, body string) int {
	resp, err := http.Post(c.engineURL(t)+"/v1/messages/count_tokens", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		InputTokens *int `json:"input_tokens"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&got) != nil || got.InputTokens == nil {
		return -1
	}
	return *got.InputTokens
}

type result struct {
	status int
	header http.Header
	body   string
	id     string
}

func (c *conf) open(t *testing.T, path, body string, h map[string]string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+master)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	cl := &http.Client{Timeout: 120 * time.Second}
	return cl.Do(req)
}

func (c *conf) post(t *testing.T, path, body string, h map[string]string) result {
	t.Helper()
	resp, err := c.open(t, path, body, h)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: string(raw), id: resp.Header.Get("X-Request-Id")}
}

func (c *conf) get(t *testing.T, path string) result {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+master)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

// record waits for the ledger record of request id.
func (c *conf) record(t *testing.T, id string) usage.Record {
	t.Helper()
	if id == "" {
		t.Fatal("the answer has no X-Request-Id")
	}
	var rec usage.Record
	if _, ok := testenv.Poll(10*time.Second, func() bool {
		recs, err := c.g.Store.Recent(context.Background(), 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.ID == id {
				rec = r
				return true
			}
		}
		return false
	}); !ok {
		t.Fatalf("no ledger record for request %s", id)
	}
	return rec
}

func chatBody(text string, maxTokens int, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":%v,"messages":[{"role":"user","content":%s}]}`, model, maxTokens, stream, jsonString(text))
}

// longStreamBody asks for a stream long enough to be killed in the middle.
func longStreamBody(tg target) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":1500,"stream":true,"ignore_eos":true,"messages":[{"role":"user","content":"Write a long story."}]}`, model)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// prose is English-like text of about n bytes.
func prose(n int) string {
	const s = "The quick brown fox jumps over the lazy dog while the engine counts every token it reads. "
	return strings.Repeat(s, n/len(s)+1)[:max(n, 1)]
}

func firstLine(body, marker string) string {
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, marker) {
			return l
		}
	}
	return ""
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
