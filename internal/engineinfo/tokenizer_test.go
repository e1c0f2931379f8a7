package engineinfo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"llmgate/internal/api/openai"
	"llmgate/internal/dialect"
)

// fakeEngine answers like one engine's tokenizer: vLLM (/tokenize with
// messages, a count), llama.cpp (/apply-template, then /tokenize with
// content, a token list; vLLM's body gets 200 {"tokens":[]}) or Ollama (no
// tokenizer). Its prompt counts 7 tokens per message.
type fakeEngine struct {
	*httptest.Server
	mu    sync.Mutex
	kind  string
	calls []string
	ctx   int
}

func newFakeEngine(t *testing.T, kind string) *fakeEngine {
	f := &fakeEngine{kind: kind, ctx: 4096}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeEngine) setKind(kind string, ctx int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kind, f.ctx = kind, ctx
}

func (f *fakeEngine) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeEngine) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	kind, ctx := f.kind, f.ctx
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	f.mu.Unlock()
	var body struct {
		Messages []json.RawMessage `json:"messages"`
		Content  *string           `json:"content"`
		Prompt   *string           `json:"prompt"`
	}
	_ = json.Unmarshal(raw, &body)
	w.Header().Set("Content-Type", "application/json")
	switch kind + " " + r.Method + " " + r.URL.Path {
	case "vllm GET /v1/models":
		fmt.Fprintf(w, `{"data":[{"id":"m","owned_by":"vllm","max_model_len":%d}]}`, ctx)
	case "vllm POST /tokenize":
		fmt.Fprintf(w, `{"count":%d,"max_model_len":%d,"tokens":[]}`, 7*len(body.Messages)+len(deref(body.Prompt)), ctx)
	case "llamacpp GET /v1/models":
		fmt.Fprint(w, `{"data":[{"id":"gguf","owned_by":"llamacpp","meta":{"n_ctx":4096}}]}`)
	case "llamacpp GET /props":
		fmt.Fprintf(w, `{"default_generation_settings":{"n_ctx":%d},"total_slots":4}`, ctx)
	case "llamacpp POST /apply-template":
		fmt.Fprintf(w, `{"prompt":%q}`, strings.Repeat("x", 7*len(body.Messages)))
	case "llamacpp POST /tokenize":
		if body.Content == nil {
			fmt.Fprint(w, `{"tokens":[]}`)
			return
		}
		ids := make([]int, len(*body.Content))
		b, _ := json.Marshal(map[string]any{"tokens": ids})
		w.Write(b)
	case "ollama GET /v1/models":
		fmt.Fprint(w, `{"data":[{"id":"m","owned_by":"library"}]}`)
	case "ollama POST /api/show":
		fmt.Fprint(w, `{"parameters":"num_ctx 8192"}`)
	default:
		http.NotFound(w, r)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func chatPrompt(n int) Prompt {
	p := Prompt{}
	for range n {
		p.Messages = append(p.Messages, openai.ChatMessage{Role: "user", Content: openai.TextContent("hi")})
	}
	return p
}

// TestCount_UsesEachEnginesOwnTokenizer: vLLM's /tokenize with messages,
// llama.cpp's /apply-template then /tokenize with content; Ollama has none.
func TestCount_UsesEachEnginesOwnTokenizer(t *testing.T) {
	for _, tc := range []struct {
		kind   string
		method Method
		calls  []string // after the first count, what a second count asks
	}{
		{"vllm", MethodVLLM, []string{"POST /tokenize"}},
		{"llamacpp", MethodLlamaCpp, []string{"POST /apply-template", "POST /tokenize"}},
	} {
		f := newFakeEngine(t, tc.kind)
		l := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		b := backend(f.URL+"/v1", dialect.OpenAI)
		n, err := l.Count(context.Background(), b, "m", chatPrompt(3), 0)
		if err != nil || n != 21 {
			t.Fatalf("%s: count %d, %v; want 21", tc.kind, n, err)
		}
		before := len(f.Calls())
		if n, err := l.Count(context.Background(), b, "m", chatPrompt(2), 0); err != nil || n != 14 {
			t.Fatalf("%s: second count %d, %v", tc.kind, n, err)
		}
		if got := f.Calls()[before:]; fmt.Sprint(got) != fmt.Sprint(tc.calls) {
			t.Errorf("%s: a second count asked %v, want %v", tc.kind, got, tc.calls)
		}
		if info := l.Info(b, "m"); info.Tokenizer != tc.method || string(info.Kind) != tc.kind || info.Context.Tokens != 4096 {
			t.Errorf("%s: info %+v", tc.kind, info)
		}
		// A completion prompt.
		if n, err := l.Count(context.Background(), b, "m", Prompt{Text: "abcde"}, 0); err != nil || n != 5 {
			t.Errorf("%s: text prompt %d, %v", tc.kind, n, err)
		}
	}
}

// TestCount_AServerThatDidNotSayWhatItIsFindsLlamaCppsTokenizer: without
// /props (a llama.cpp behind a proxy that only passes /v1 and /tokenize
// paths), vLLM's body gets 200 {"tokens":[]}: that is not a count of zero,
// and llama.cpp's method is tried next.
func TestCount_AServerThatDidNotSayWhatItIsFindsLlamaCppsTokenizer(t *testing.T) {
	f := newFakeEngine(t, "llamacpp")
	var logs bytes.Buffer
	l := New(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	b := backend(f.URL+"/v1", dialect.OpenAI)
	l.mu.Lock()
	l.cache[key{b, "m"}] = &entry{until: l.now().Add(keepFor)} // known: an engine that said nothing
	l.mu.Unlock()
	n, err := l.Count(context.Background(), b, "m", chatPrompt(1), 0)
	if err != nil || n != 7 {
		t.Fatalf("count %d, %v; want 7 from llama.cpp's tokenizer", n, err)
	}
	if info := l.Info(b, "m"); info.Tokenizer != MethodLlamaCpp {
		t.Fatalf("info %+v", info)
	}
	if logs.Len() != 0 {
		t.Errorf("logged: %s", logs.String())
	}
}

// TestCount_NoTokenizerIsLoggedOnceWithTheReasonAndAskedAgainAfterRefresh.
func TestCount_NoTokenizerIsLoggedOnceWithTheReasonAndAskedAgainAfterRefresh(t *testing.T) {
	f := newFakeEngine(t, "ollama")
	var logs bytes.Buffer
	var mu sync.Mutex
	l := New(Options{Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))})
	b := backend(f.URL+"/v1", dialect.OpenAI)
	for range 3 {
		if _, err := l.Count(context.Background(), b, "m", chatPrompt(1), 0); !errors.Is(err, ErrNoTokenizer) || !strings.Contains(err.Error(), "Ollama has no tokenizer endpoint") {
			t.Fatalf("Ollama: %v", err)
		}
	}
	mu.Lock()
	if c := strings.Count(logs.String(), "tokenizer cannot be used"); c != 1 {
		t.Errorf("logged %d times, want once: %s", c, logs.String())
	}
	mu.Unlock()
	if info := l.Info(b, "m"); info.NoTokenizer != "Ollama has no tokenizer endpoint" || info.Kind != KindOllama || info.Context.Tokens != 8192 {
		t.Errorf("info %+v", info)
	}
	// The server is replaced by a vLLM (an engine restarted with another
	// server): a refresh asks again, and counts work.
	f.setKind("vllm", 2048)
	l.Refresh(context.Background(), b)
	if n, err := l.Count(context.Background(), b, "m", chatPrompt(2), 0); err != nil || n != 14 {
		t.Fatalf("after refresh: %d, %v", n, err)
	}
	if info := l.Info(b, "m"); info.Kind != KindVLLM || info.Context.Tokens != 2048 || info.NoTokenizer != "" {
		t.Errorf("after refresh: %+v", info)
	}
}

// TestCount_NeverSendsMoreThanTheBound: a tokenizer request larger than
// the caller's bound is not sent.
func TestCount_NeverSendsMoreThanTheBound(t *testing.T) {
	f := newFakeEngine(t, "vllm")
	l := New(Options{})
	b := backend(f.URL+"/v1", dialect.OpenAI)
	l.Lookup(context.Background(), 0, b, "m")
	before := len(f.Calls())
	if _, err := l.Count(context.Background(), b, "m", chatPrompt(100), 200); err == nil || errors.Is(err, ErrNoTokenizer) {
		t.Fatalf("over the bound: %v", err)
	}
	if len(f.Calls()) != before {
		t.Fatalf("a request over the bound was sent: %v", f.Calls()[before:])
	}
	if _, err := l.Count(context.Background(), b, "m", chatPrompt(1), 0); err != nil {
		t.Fatalf("the bound is not a reason to stop counting: %v", err)
	}
}

// TestCount_DownIsNotNoTokenizer: a server that cannot be reached is
// estimated this once and asked again next time.
func TestCount_DownIsNotNoTokenizer(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	f := newFakeEngine(t, "vllm")
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() && r.URL.Path == "/tokenize" {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		f.Config.Handler.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	l := New(Options{})
	b := backend(proxy.URL+"/v1", dialect.OpenAI)
	if _, err := l.Count(context.Background(), b, "m", chatPrompt(1), 0); err == nil || errors.Is(err, ErrNoTokenizer) {
		t.Fatalf("a 503 must be a failure of this once: %v", err)
	}
	fail.Store(false)
	if n, err := l.Count(context.Background(), b, "m", chatPrompt(1), 0); err != nil || n != 7 {
		t.Fatalf("next time: %d %v", n, err)
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
