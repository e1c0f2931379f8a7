package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/engineinfo"
	"llmgate/internal/relay"
	"llmgate/internal/router"
	"llmgate/internal/testenv"
)

// contextEngine is an OpenAI-dialect engine with a 1000-token context,
// reported the way source says, whose tokenizer counts promptTokens.
type contextEngine struct {
	*httptest.Server
	mu        sync.Mutex
	bodies    []map[string]any
	tokenizes atomic.Int32 // POST /tokenize calls
	generates atomic.Int32 // POST /v1/... calls, failed ones included
	// fail, when set, answers every generation 500 (its tokenizer still
	// counts).
	fail atomic.Bool
}

func newContextEngine(t *testing.T, source string, promptTokens int) *contextEngine {
	return newContextEngineOf(t, source, promptTokens, 1000)
}

// newContextEngineOf is newContextEngine with a context of window tokens
// (vLLM's /v1/models says so).
func newContextEngineOf(t *testing.T, source string, promptTokens, window int) *contextEngine {
	e := &contextEngine{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/models" && source == "vllm":
			fmt.Fprintf(w, `{"data":[{"id":"m","max_model_len":%d}]}`, window)
		case r.URL.Path == "/props" && source == "llama.cpp":
			fmt.Fprint(w, `{"default_generation_settings":{"n_ctx":1000}}`)
		case r.URL.Path == "/get_model_info" && source == "sglang":
			fmt.Fprint(w, `{"context_length":1000}`)
		case r.URL.Path == "/api/show" && source == "ollama":
			fmt.Fprint(w, `{"parameters":"num_ctx 1000"}`)
		case r.URL.Path == "/apply-template" && source == "llama.cpp":
			fmt.Fprint(w, `{"prompt":"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"}`)
		case r.URL.Path == "/tokenize" && source == "llama.cpp":
			// llama.cpp: {"content": ...} gets the token ids; vLLM's body
			// gets none.
			e.tokenizes.Add(1)
			if !strings.Contains(string(raw), `"content"`) {
				fmt.Fprint(w, `{"tokens":[]}`)
				return
			}
			ids := strings.TrimSuffix(strings.Repeat("7,", promptTokens), ",")
			fmt.Fprintf(w, `{"tokens":[%s]}`, ids)
		case r.URL.Path == "/tokenize":
			e.tokenizes.Add(1)
			fmt.Fprintf(w, `{"count":%d,"max_model_len":1000,"tokens":[]}`, promptTokens)
		case strings.HasPrefix(r.URL.Path, "/v1/") && r.Method == http.MethodPost:
			e.generates.Add(1)
			if e.fail.Load() {
				http.Error(w, `{"error":{"message":"CUDA out of memory"}}`, http.StatusInternalServerError)
				return
			}
			var body map[string]any
			_ = json.Unmarshal(raw, &body)
			e.mu.Lock()
			e.bodies = append(e.bodies, body)
			e.mu.Unlock()
			if strings.HasSuffix(r.URL.Path, "/completions") && !strings.HasSuffix(r.URL.Path, "/chat/completions") {
				fmt.Fprint(w, `{"choices":[{"index":0,"text":"ok","finish_reason":"stop"}],"usage":{"prompt_tokens":300,"completion_tokens":1,"total_tokens":301}}`)
				return
			}
			fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":300,"completion_tokens":1,"total_tokens":301}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *contextEngine) last() map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.bodies) == 0 {
		return nil
	}
	return e.bodies[len(e.bodies)-1]
}

// fitRelay serves model m through a relay that knows context lengths.
func fitRelay(t *testing.T, modelYAML string) (*httptest.Server, *recAdmission, *recLedger) {
	return fitRelayModels(t, modelYAML)
}

// fitRelayModels is fitRelay for a config with several models.
func fitRelayModels(t *testing.T, modelYAML string) (*httptest.Server, *recAdmission, *recLedger) {
	cfg, err := config.Load(strings.NewReader(modelYAML), "fit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	table := router.NewWithOptions(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(table.Close)
	learner := engineinfo.New(engineinfo.Options{})
	for _, name := range table.Models() { // as the gateway does at start
		r, _ := table.Route(name)
		for _, d := range r.Deployments {
			learner.Lookup(context.Background(), r.ContextWindow, d.Backend, d.UpstreamModel)
		}
	}
	adm, led := &recAdmission{}, &recLedger{}
	rl := relay.New(relay.Options{Ledger: led, Admission: adm, Engines: learner, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(serveRelay(rl, table, "fit"))
	t.Cleanup(srv.Close)
	return srv, adm, led
}

func post(t *testing.T, url, body string) (int, http.Header, string) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestFit_LowersTheOutputLimitToTheContextInEveryDialect: agents ask for
// 32000 output tokens whatever the model. On a 1000-token model with a
// 300-token prompt, the backend gets 700 in every limit field that asked
// for more, the client is told in a header, and the admission reserves
// 700 — whichever way the context length was learned.
func TestFit_LowersTheOutputLimitToTheContextInEveryDialect(t *testing.T) {
	for _, source := range []string{"vllm", "llama.cpp", "sglang", "ollama", "config"} {
		eng := newContextEngine(t, source, 300)
		window := ""
		if source == "config" {
			window = ", context_window: 1000"
		}
		srv, adm, _ := fitRelay(t, fmt.Sprintf("backends:\n  e: {url: %s/v1}\nmodels:\n  m: {backend: e%s}\n", eng.URL, window))
		for _, tc := range []struct {
			path, body string
			fields     []string // limit fields the backend must get as 700
		}{
			{"/v1/chat/completions", `{"model":"m","max_tokens":32000,"messages":[{"role":"user","content":"hi"}]}`, []string{"max_tokens"}},
			{"/v1/chat/completions", `{"model":"m","stream":true,"max_completion_tokens":32000,"max_tokens":32000,"messages":[{"role":"user","content":"hi"}]}`, []string{"max_tokens", "max_completion_tokens"}},
			{"/v1/completions", `{"model":"m","max_tokens":32000,"prompt":"hi"}`, []string{"max_tokens"}},
			{"/v1/responses", `{"model":"m","max_output_tokens":32000,"input":"hi","store":false}`, []string{"max_tokens"}},
			{"/v1/messages", `{"model":"m","max_tokens":32000,"messages":[{"role":"user","content":"hi"}]}`, []string{"max_tokens"}},
		} {
			n := len(adm.Requests())
			status, h, body := post(t, srv.URL+tc.path, tc.body)
			if status != 200 {
				t.Fatalf("%s %s: %d %s", source, tc.path, status, body)
			}
			if source == "ollama" {
				// Ollama has no tokenizer endpoint: the prompt is estimated
				// and the limit lowered to what the estimate leaves.
				got := h.Get(relay.OutputLimitHeader)
				var to, prompt int
				if _, err := fmt.Sscanf(got, "32000->%d; context=1000; prompt=%d; prompt_source=estimate", &to, &prompt); err != nil || to != 1000-prompt {
					t.Errorf("%s %s: %s header %q, want an estimate", source, tc.path, relay.OutputLimitHeader, got)
				}
				continue
			}
			if got := h.Get(relay.OutputLimitHeader); !strings.HasPrefix(got, "32000->700; context=1000; prompt=300; prompt_source=tokenizer") {
				t.Errorf("%s %s: %s header %q", source, tc.path, relay.OutputLimitHeader, got)
			}
			sent := eng.last()
			for _, f := range tc.fields {
				if v, _ := sent[f].(float64); v != 700 {
					t.Errorf("%s %s: backend got %s=%v, want 700: %v", source, tc.path, f, sent[f], sent)
				}
			}
			if a := adm.Requests(); len(a) != n+1 || a[n].OutputTokens != 700 {
				t.Errorf("%s %s: admitted %+v, want 700 output tokens", source, tc.path, a[n:])
			}
		}
		// A limit that fits is left alone.
		_, h, _ := post(t, srv.URL+"/v1/chat/completions", `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
		if v, _ := eng.last()["max_tokens"].(float64); v != 100 || h.Get(relay.OutputLimitHeader) != "" {
			t.Errorf("%s: a fitting limit was changed: %v %q", source, eng.last()["max_tokens"], h.Get(relay.OutputLimitHeader))
		}
	}
}

func TestFit_OffOrAPromptThatFillsTheContextIsA400NamingTheNumbers(t *testing.T) {
	eng := newContextEngine(t, "vllm", 300)
	srv, _, led := fitRelay(t, fmt.Sprintf("backends:\n  e: {url: %s/v1}\nmodels:\n  m: {backend: e, fit_output_limit: false}\n", eng.URL))
	status, _, body := post(t, srv.URL+"/v1/chat/completions", `{"model":"m","max_tokens":32000,"messages":[{"role":"user","content":"hi"}]}`)
	for _, want := range []string{"context_length_exceeded", "1000 tokens", "300 tokens", "32000", "lower the output limit to 700 or less", "fit_output_limit"} {
		if status != 400 || !strings.Contains(body, want) {
			t.Fatalf("fitting off: %d %s, want a 400 containing %q", status, body, want)
		}
	}
	status, _, body = post(t, srv.URL+"/v1/messages", `{"model":"m","max_tokens":32000,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 400 || !strings.Contains(body, `"type":"error"`) || !strings.Contains(body, "lower the output limit to 700") {
		t.Fatalf("fitting off, Messages: %d %s", status, body)
	}
	if len(led.Records()) != 2 || led.Records()[0].Status != 400 {
		t.Fatalf("refusals must be booked: %+v", led.Records())
	}

	full := newContextEngine(t, "vllm", 1200)
	srv, _, _ = fitRelay(t, fmt.Sprintf("backends:\n  e: {url: %s/v1}\nmodels:\n  m: {backend: e}\n", full.URL))
	long := strings.Repeat("lorem ipsum ", 300) // 3600 bytes, counted as 1200 tokens
	status, _, body = post(t, srv.URL+"/v1/chat/completions", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"`+long+`"}]}`)
	if status != 400 || !strings.Contains(body, "prompt is too long: 1200 tokens > 1000 maximum") || !strings.Contains(body, `"n_prompt_tokens":1200,"n_ctx":1000`) {
		t.Fatalf("prompt larger than the context: %d %s", status, body)
	}
}

// TestFit_AnthropicBackendWithAConfiguredContext: Anthropic backends list
// no context length; with context_window set, a Messages request passed
// through gets its max_tokens fitted from an estimate of the prompt.
func TestFit_AnthropicBackendWithAConfiguredContext(t *testing.T) {
	var mu sync.Mutex
	var got map[string]any
	an := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		_ = json.Unmarshal(raw, &got)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"m1","type":"message","role":"assistant","model":"c","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}`)
	}))
	defer an.Close()
	srv, _, _ := fitRelay(t, fmt.Sprintf("backends:\n  an: {url: %s, dialect: anthropic}\nmodels:\n  m: {backend: an, context_window: 2000}\n", an.URL))
	body := `{"model":"m","max_tokens":32000,"messages":[{"role":"user","content":"hi"}]}`
	status, h, resp := post(t, srv.URL+"/v1/messages", body)
	if status != 200 || !strings.Contains(h.Get(relay.OutputLimitHeader), "prompt_source=estimate") {
		t.Fatalf("%d %s header %q", status, resp, h.Get(relay.OutputLimitHeader))
	}
	mu.Lock()
	defer mu.Unlock()
	if v, _ := got["max_tokens"].(float64); v <= 0 || v >= 2000 {
		t.Fatalf("the backend got max_tokens %v, want it fitted below 2000", got["max_tokens"])
	}
}

// TestTranslate_ModelReasoningSettingReachesTheBackend: a model configured
// with a reasoning preset gets the client's thinking request in the
// engine's own parameter; one without gets nothing extra.
func TestTranslate_ModelReasoningSettingReachesTheBackend(t *testing.T) {
	eng := newContextEngine(t, "none", 10)
	srv, _, _ := fitRelayModels(t, fmt.Sprintf("backends:\n  e: {url: %s/v1}\nmodels:\n  m: {backend: e, reasoning: {preset: qwen3}}\n  plain: {backend: e}\n", eng.URL))
	for _, tc := range []struct {
		model, thinking string
		want            any
	}{
		{"m", `{"type":"disabled"}`, false},
		{"m", `{"type":"enabled","budget_tokens":2048}`, true},
		{"plain", `{"type":"disabled"}`, nil},
	} {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":100,"thinking":%s,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`, tc.model, tc.thinking)
		if status, _, resp := post(t, srv.URL+"/v1/messages", body); status != 200 {
			t.Fatalf("%s: %d %s", tc.model, status, resp)
		}
		kw, _ := eng.last()["chat_template_kwargs"].(map[string]any)
		if got := kw["enable_thinking"]; got != tc.want {
			t.Errorf("%s thinking %s: backend got chat_template_kwargs %v, want enable_thinking=%v", tc.model, tc.thinking, eng.last()["chat_template_kwargs"], tc.want)
		}
	}
}

// A streamed Messages request that needs fitting counts its prompt once:
// the same count serves the fit and message_start's input_tokens.
func TestFit_StreamedMessagesAskTheTokenizerOnce(t *testing.T) {
	eng := newContextEngine(t, "vllm", 300)
	srv, _, _ := fitRelay(t, fmt.Sprintf("backends:\n  e: {url: %s/v1}\nmodels:\n  m: {backend: e}\n", eng.URL))
	before := eng.tokenizes.Load()
	status, h, body := post(t, srv.URL+"/v1/messages", `{"model":"m","max_tokens":32000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || !strings.HasPrefix(h.Get(relay.OutputLimitHeader), "32000->700") {
		t.Fatalf("%d %q %s", status, h.Get(relay.OutputLimitHeader), body)
	}
	if !strings.Contains(body, `"input_tokens":300`) {
		t.Errorf("message_start does not carry the tokenizer's count: %s", body)
	}
	if n := eng.tokenizes.Load() - before; n != 1 {
		t.Errorf("the backend's tokenizer was asked %d times; want 1", n)
	}
}

// TestFit_NeverRefusesOnAGuess: an engine without a tokenizer, a prompt
// whose estimate fills the context but whose smallest possible size does
// not: the request goes to the engine (the limit lowered, the header says
// the prompt was estimated) and the engine decides. A prompt that surely
// fills the context is refused, saying it was estimated.
func TestFit_NeverRefusesOnAGuess(t *testing.T) {
	eng := newContextEngine(t, "ollama", 0) // a context of 1000, no tokenizer
	srv, _, _ := fitRelay(t, fmt.Sprintf("backends:\n  e: {url: %s/v1}\nmodels:\n  m: {backend: e}\n", eng.URL))
	words := strings.Repeat("lorem ipsum ", 400) // 4800 bytes: estimated ~1200 tokens, surely at least 300
	status, h, body := post(t, srv.URL+"/v1/chat/completions", `{"model":"m","max_tokens":900,"messages":[{"role":"user","content":"`+words+`"}]}`)
	if status != 200 {
		t.Fatalf("refused on a guess: %d %s", status, body)
	}
	if got := h.Get(relay.OutputLimitHeader); !strings.HasPrefix(got, "900->") || !strings.HasSuffix(got, "prompt_source=estimate") {
		t.Errorf("header %q", got)
	}
	if v, _ := eng.last()["max_tokens"].(float64); v <= 0 || v >= 900 {
		t.Errorf("the engine got max_tokens %v", eng.last()["max_tokens"])
	}
	huge := strings.Repeat("lorem ipsum ", 2000) // 24000 bytes: surely more than 1000 tokens
	status, _, body = post(t, srv.URL+"/v1/chat/completions", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"`+huge+`"}]}`)
	if status != 400 || !strings.Contains(body, "prompt is too long: at least") || !strings.Contains(body, "estimated") {
		t.Fatalf("a prompt that surely fills the context: %d %s", status, body)
	}
}

// TestEngineErrors_PassedOnWithTheEnginesNumbers: an engine's context
// refusal reaches the client in its own dialect with the engine's numbers;
// a vLLM refusal of the output limit alone is served by lowering the
// limit to what the engine said is left.
func TestEngineErrors_PassedOnWithTheEnginesNumbers(t *testing.T) {
	var mu sync.Mutex
	var limits []float64
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.NotFound(w, r)
			return
		}
		limit, _ := body["max_tokens"].(float64)
		mu.Lock()
		limits = append(limits, limit)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch body["model"] {
		case "llama":
			w.WriteHeader(400)
			fmt.Fprint(w, `{"error":{"code":400,"message":"request (2409 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2409,"n_ctx":2048}}`)
		case "vllm":
			if limit > 31768 {
				w.WriteHeader(400)
				fmt.Fprintf(w, `{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested %d tokens (1000 in the messages, %d in the completion).","type":"BadRequestError","code":400}`, 1000+int(limit), int(limit))
				return
			}
			fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"vllm","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":1,"total_tokens":1001}}`)
		}
	}))
	defer eng.Close()
	srv, _, led := fitRelayModels(t, fmt.Sprintf("backends:\n  e: {url: %s/v1}\nmodels:\n  llama: {backend: e}\n  vllm: {backend: e}\n", eng.URL))

	status, _, body := post(t, srv.URL+"/v1/chat/completions", `{"model":"llama","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 400 || !strings.Contains(body, `"code":"context_length_exceeded"`) || !strings.Contains(body, `"n_prompt_tokens":2409,"n_ctx":2048`) ||
		!strings.Contains(body, "prompt is too long: 2409 tokens > 2048 maximum") || !strings.Contains(body, "exceeds the available context size") {
		t.Fatalf("chat: %d %s", status, body)
	}
	status, _, body = post(t, srv.URL+"/v1/messages", `{"model":"llama","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 400 || !strings.Contains(body, `"type":"error"`) || !strings.Contains(body, "prompt is too long: 2409 tokens > 2048 maximum") {
		t.Fatalf("messages: %d %s", status, body)
	}

	status, h, body := post(t, srv.URL+"/v1/chat/completions", `{"model":"vllm","max_tokens":32000,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || h.Get(relay.OutputLimitHeader) != "32000->31768; context=32768; prompt=1000; prompt_source=engine" {
		t.Fatalf("vLLM output limit: %d %q %s", status, h.Get(relay.OutputLimitHeader), body)
	}
	mu.Lock()
	if n := len(limits); n < 2 || limits[n-2] != 32000 || limits[n-1] != 31768 {
		t.Errorf("limits sent: %v", limits)
	}
	mu.Unlock()
	recs := led.Records()
	if len(recs) != 3 || recs[2].Status != 200 || recs[0].ErrorType != "context_length_exceeded" {
		t.Errorf("records: %+v", recs)
	}
}

// A request that starts a stopped local engine could not be fitted or
// counted when it was resolved (the engine answered nothing); the engine
// manager has the gateway ask the started engine before letting it through
// (OnReady, here inside the fake engine's lease), and the request is then fitted and its
// message_start counted with the engine's numbers, as requests to a
// running engine are.
func TestFit_ARequestThatStartsItsEngineIsFittedAndCountedOnceItRuns(t *testing.T) {
	inner := newContextEngine(t, "llama.cpp", 420)
	var started atomic.Bool
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !started.Load() {
			http.Error(w, "Loading model", http.StatusServiceUnavailable) // as llama-server answers while it loads
			return
		}
		inner.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(eng.Close)
	cfg, err := config.Load(strings.NewReader("backends:\n  e: {url: "+eng.URL+"/v1}\nmodels:\n  m: {backend: e}\n"), "fit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	learner := engineinfo.New(engineinfo.Options{})
	var table *router.Table
	engine := &fakeLeaser{backends: []string{"e"}, onLease: func(ctx context.Context, backend, _ string) error {
		if !started.Swap(true) {
			learner.Refresh(ctx, table.Backend(backend)) // the engine manager's OnReady
		}
		return nil
	}}
	table = router.NewWithOptions(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Leaser: engine})
	t.Cleanup(table.Close)
	rl := relay.New(relay.Options{Ledger: &recLedger{}, Engines: learner, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(serveRelay(rl, table, "cold"))
	t.Cleanup(srv.Close)

	code, _, body := post(t, srv.URL+"/v1/messages", `{"model":"m","stream":true,"max_tokens":32000,"messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if got := inner.last()["max_tokens"]; got != float64(1000-420) {
		t.Errorf("the engine got max_tokens %v, want %d (its 1000-token context less the 420-token prompt)", got, 1000-420)
	}
	if !strings.Contains(body, `"input_tokens":420`) {
		t.Errorf("message_start does not carry the engine's count of 420 input tokens:\n%s", body)
	}
}

// An engine that refuses a request naming another context than the gateway
// learned (restarted with a smaller -c, no health checks configured) is
// asked about itself again at once, so the next requests are fitted to
// what it has now rather than for the rest of the ten minutes.
func TestFit_AnEnginesRefusalNamingAnotherContextIsLearned(t *testing.T) {
	var ctxLen atomic.Int64
	ctxLen.Store(4096)
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprintf(w, `{"data":[{"id":"m","owned_by":"vllm","max_model_len":%d}]}`, ctxLen.Load())
		case "/v1/chat/completions":
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is %d tokens. However, your request has 2409 input tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}}`, ctxLen.Load())
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(eng.Close)
	cfg, err := config.Load(strings.NewReader("backends:\n  e: {url: "+eng.URL+"/v1}\nmodels:\n  m: {backend: e}\n"), "fit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	table := router.NewWithOptions(cfg, router.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(table.Close)
	learner := engineinfo.New(engineinfo.Options{})
	b := table.Backend("e")
	if got := learner.Lookup(context.Background(), 0, b, "m"); got.Tokens != 4096 {
		t.Fatalf("learned %+v", got)
	}
	rl := relay.New(relay.Options{Ledger: &recLedger{}, Engines: learner, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(serveRelay(rl, table, "said"))
	t.Cleanup(srv.Close)

	ctxLen.Store(2048) // restarted with -c 2048
	code, _, body := post(t, srv.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if code != 400 || !strings.Contains(body, "context_length_exceeded") {
		t.Fatalf("%d %s", code, body)
	}
	if _, ok := testenv.Poll(5*time.Second, func() bool { return learner.Known(0, b, "m").Tokens == 2048 }); !ok {
		t.Fatalf("after the engine said 2048: Known = %+v", learner.Known(0, b, "m"))
	}
}

// TestAdmit_WithoutALimitReservesForTheLargestContext: a request without
// max_tokens may generate what the context leaves, on whichever deployment
// serves it (the balancing, a retry); the admission's reservation is for
// the deployment whose context leaves the most, not the first listed.
func TestAdmit_WithoutALimitReservesForTheLargestContext(t *testing.T) {
	small, big := newContextEngineOf(t, "vllm", 10, 1000), newContextEngineOf(t, "vllm", 10, 8000)
	srv, adm, _ := fitRelay(t, fmt.Sprintf(`backends:
  small: {url: %s/v1}
  big: {url: %s/v1}
models:
  m: {deployments: [{backend: small, priority: 0}, {backend: big, priority: 1}]}
`, small.URL, big.URL))
	status, _, answer := post(t, srv.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, answer)
	}
	reqs := adm.Requests()
	if len(reqs) != 1 {
		t.Fatalf("admissions %+v, want one", reqs)
	}
	if out := reqs[0].OutputTokens; out <= 1000 || out > 8000 {
		t.Fatalf("admitted %d output tokens, want what the 8000-token context leaves (more than the 1000-token one allows)", out)
	}
}

// TestAdmit_WithoutALimitReservesForTheFallbacksLargestContext: a request
// without max_tokens to a model with fallbacks may be served by a
// fallback's deployment, whose context may leave more output; the
// admission reserves for that, and is told the fallbacks (whose prices it
// reserves at).
func TestAdmit_WithoutALimitReservesForTheFallbacksLargestContext(t *testing.T) {
	small, big := newContextEngineOf(t, "vllm", 10, 1000), newContextEngineOf(t, "vllm", 10, 8000)
	srv, adm, _ := fitRelayModels(t, fmt.Sprintf(`backends:
  small: {url: %s/v1}
  big: {url: %s/v1}
models:
  local: {backend: small, upstream_model: m, fallbacks: [cloud]}
  cloud: {backend: big, upstream_model: m}
`, small.URL, big.URL))
	status, _, answer := post(t, srv.URL+"/v1/chat/completions", `{"model":"local","messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, answer)
	}
	reqs := adm.Requests()
	if len(reqs) != 1 {
		t.Fatalf("admissions %+v, want one", reqs)
	}
	if out := reqs[0].OutputTokens; out <= 1000 || out > 8000 {
		t.Fatalf("admitted %d output tokens, want what the fallback's 8000-token context leaves (more than local's 1000-token one allows)", out)
	}
	if fb := reqs[0].Fallbacks; len(fb) != 1 || fb[0] != "cloud" {
		t.Fatalf("admitted with fallbacks %q, want [cloud]", fb)
	}
}

// failingLocalFallback starts a relay where model local (on backend vllm,
// an engine of context window whose chat answers fail) falls back to
// model cloud (on backend api, an engine of the same window that
// answers); localExtra and cloudExtra are more of each model's settings.
func failingLocalFallback(t *testing.T, window int, localExtra, cloudExtra string) (*httptest.Server, *recAdmission, *recLedger, *contextEngine) {
	t.Helper()
	local, cloud := newContextEngineOf(t, "vllm", 10, window), newContextEngineOf(t, "vllm", 10, window)
	local.fail.Store(true)
	srv, adm, led := fitRelayModels(t, fmt.Sprintf(`backends:
  vllm: {url: %s/v1}
  api: {url: %s/v1}
models:
  local: {backend: vllm, upstream_model: m, fallbacks: [cloud]%s}
  cloud: {backend: api, upstream_model: m%s}
`, local.URL, cloud.URL, localExtra, cloudExtra))
	return srv, adm, led, cloud
}

// TestSettle_FallbackServedNamesTheServingModelToTheTicket: when every
// deployment of the model failed and its fallback served, the ticket is
// told the fallback's name (it prices the record at that model's prices);
// when the model itself served, it is told "". The record keeps the
// requested model and names the fallback's deployment.
func TestSettle_FallbackServedNamesTheServingModelToTheTicket(t *testing.T) {
	srv, adm, led, _ := failingLocalFallback(t, 1000, "", "")
	for _, model := range []string{"local", "cloud"} {
		status, _, answer := post(t, srv.URL+"/v1/chat/completions", `{"model":"`+model+`","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
		if status != 200 {
			t.Fatalf("%s: %d %s", model, status, answer)
		}
	}
	if got := adm.Served(); len(got) != 2 || got[0] != "local cloud" || got[1] != "cloud " {
		t.Fatalf("tickets were told %q, want [\"local cloud\" \"cloud \"]", got)
	}
	recs := led.Records()
	if len(recs) != 2 || recs[0].Model != "local" || recs[0].Backend != "api" || recs[0].Status != 200 {
		t.Fatalf("records %+v, want the first for model local served by backend api", recs)
	}
}

// TestFit_AFallbackDeploymentIsSizedByTheFallbackModelsContextWindow: the
// request was counted at local's deployment (an 8000-token context, where
// 2000 output tokens fit); local fails and the fallback serves. Its model
// configures context_window 500 (its engine says 8000, but a configured
// window is the user's word), so the limit it gets is fitted to 500, not
// to the requested model's.
func TestFit_AFallbackDeploymentIsSizedByTheFallbackModelsContextWindow(t *testing.T) {
	srv, _, _, cloud := failingLocalFallback(t, 8000, "", ", context_window: 500")
	status, hdr, answer := post(t, srv.URL+"/v1/chat/completions", `{"model":"local","max_tokens":2000,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, answer)
	}
	body := cloud.last()
	if body == nil {
		t.Fatal("the fallback got no request")
	}
	if got, _ := body["max_tokens"].(float64); got < 1 || got >= 500 {
		t.Fatalf("the fallback got max_tokens %v (%s: %q), want it fitted to its model's 500-token context", body["max_tokens"], relay.OutputLimitHeader, hdr.Get(relay.OutputLimitHeader))
	}
}

// TestFallback_TheFallbacksDeploymentGetsItsModelsChatOptions: an
// Anthropic client's thinking request on local (Qwen3 on vLLM: thinking
// switched through chat_template_kwargs) that falls back to cloud (a cloud
// API taking reasoning_effort) reaches cloud shaped by cloud's options —
// a cloud API refuses chat_template_kwargs, so the fallback would fail.
func TestFallback_TheFallbacksDeploymentGetsItsModelsChatOptions(t *testing.T) {
	srv, _, _, cloud := failingLocalFallback(t, 8000, ", reasoning: {preset: qwen3}", ", reasoning: {effort: reasoning_effort}")
	status, _, answer := post(t, srv.URL+"/v1/messages", `{"model":"local","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, answer)
	}
	got := cloud.last()
	if _, ok := got["chat_template_kwargs"]; ok {
		t.Errorf("the fallback got the requested model's chat_template_kwargs: %v", got)
	}
	if got["reasoning_effort"] != "low" {
		t.Errorf("the fallback's reasoning_effort = %v, want low (a 1024-token budget), from cloud's own options: %v", got["reasoning_effort"], got)
	}
}

// TestFit_AFallbackCountsWhenTheModelHadNoDeploymentToTry: local's breaker
// is open (one failure opens it here), so the router has no deployment of
// local to count at; the request goes straight to cloud, whose configured
// 500-token context is what its output limit is fitted to there.
func TestFit_AFallbackCountsWhenTheModelHadNoDeploymentToTry(t *testing.T) {
	local, cloud := newContextEngineOf(t, "vllm", 10, 8000), newContextEngineOf(t, "vllm", 10, 8000)
	local.fail.Store(true)
	srv, _, _ := fitRelayModels(t, fmt.Sprintf(`routing:
  circuit_breaker: {consecutive_failures: 1, open_for: 1h}
backends:
  vllm: {url: %s/v1}
  api: {url: %s/v1}
models:
  local: {backend: vllm, upstream_model: m, fallbacks: [cloud]}
  cloud: {backend: api, upstream_model: m, context_window: 500}
`, local.URL, cloud.URL))
	body := `{"model":"local","max_tokens":2000,"messages":[{"role":"user","content":"hi"}]}`
	if status, _, answer := post(t, srv.URL+"/v1/chat/completions", body); status != 200 {
		t.Fatalf("first request (opens local's breaker): %d %s", status, answer)
	}
	before := local.generates.Load()
	status, _, answer := post(t, srv.URL+"/v1/chat/completions", body)
	if status != 200 {
		t.Fatalf("%d %s", status, answer)
	}
	if local.generates.Load() != before {
		t.Fatal("local was asked again: its breaker is not open, and the test shows nothing")
	}
	if got, _ := cloud.last()["max_tokens"].(float64); got < 1 || got >= 500 {
		t.Fatalf("the fallback got max_tokens %v, want it fitted to its model's 500-token context", cloud.last()["max_tokens"])
	}
}
