package engineinfo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/dialect"
	"llmgate/internal/provider"
	"llmgate/internal/testenv"
)

// server answers like one engine; hits counts every request.
func server(t *testing.T, routes map[string]string, hits *atomic.Int64) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		key := r.Method + " " + r.URL.Path
		body, ok := routes[key]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method == http.MethodPost {
			raw, _ := io.ReadAll(r.Body)
			if !strings.Contains(string(raw), `"model":"qwen3:8b"`) {
				http.Error(w, "wrong model", 400)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func backend(url string, d dialect.Dialect) *provider.Backend {
	return provider.NewBackend(&config.Backend{Name: "b", URL: url, BaseURL: url, Dialect: d})
}

// TestLookup_EverySource learns the context length the way each engine
// reports it.
func TestLookup_EverySource(t *testing.T) {
	cases := []struct {
		name, upstream, source string
		routes                 map[string]string
		want                   int
	}{
		{"vLLM", "Qwen/Qwen3-32B", "/v1/models max_model_len", map[string]string{
			"GET /v1/models": `{"object":"list","data":[{"id":"other","max_model_len":8192},{"id":"Qwen/Qwen3-32B","object":"model","max_model_len":40960}]}`}, 40960},
		{"SGLang /v1/models", "qwen", "/v1/models max_model_len", map[string]string{
			"GET /v1/models": `{"data":[{"id":"qwen","max_model_len":32768.0}]}`}, 32768},
		{"an OpenAI-compatible server with context_length", "m", "/v1/models context_length", map[string]string{
			"GET /v1/models": `{"data":[{"id":"m","context_length":131072}]}`}, 131072},
		{"llama.cpp", "gguf", "llama.cpp /props n_ctx", map[string]string{
			"GET /v1/models": `{"data":[{"id":"gguf"}]}`,
			"GET /props":     `{"default_generation_settings":{"n_ctx":16384,"model":"gguf"},"total_slots":4}`}, 16384},
		{"SGLang native", "qwen", "SGLang /get_model_info context_length", map[string]string{
			"GET /get_model_info": `{"model_path":"qwen","is_generation":true,"context_length":65536}`}, 65536},
		{"SGLang server info", "qwen", "SGLang /get_server_info context_length", map[string]string{
			"GET /get_model_info":  `{"model_path":"qwen"}`,
			"GET /get_server_info": `{"context_length":4096,"max_total_num_tokens":100000}`}, 4096},
		{"Ollama num_ctx", "qwen3:8b", "Ollama /api/show num_ctx", map[string]string{
			"POST /api/show": `{"parameters":"temperature 0.6\nnum_ctx                        8192\n","model_info":{"qwen3.context_length":40960}}`}, 8192},
		{"Ollama model info", "qwen3:8b", "Ollama /api/show qwen3.context_length", map[string]string{
			"POST /api/show": `{"parameters":"temperature 0.6","model_info":{"general.architecture":"qwen3","qwen3.context_length":40960}}`}, 40960},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			s := server(t, tc.routes, &hits)
			l := New(Options{})
			b := backend(s.URL+"/v1", dialect.OpenAI)
			got := l.Lookup(context.Background(), 0, b, tc.upstream)
			if got.Tokens != tc.want || got.Source != tc.source {
				t.Fatalf("got %+v, want %d from %s", got, tc.want, tc.source)
			}
			n := hits.Load()
			if again := l.Lookup(context.Background(), 0, b, tc.upstream); again != got || hits.Load() != n {
				t.Fatalf("a second lookup asked the server again (%d -> %d requests)", n, hits.Load())
			}
			if k := l.Known(0, b, tc.upstream); k != got {
				t.Fatalf("Known = %+v", k)
			}
		})
	}
}

func TestLookup_ConfigWinsAndUnknownIsRetriedAfterAMinute(t *testing.T) {
	var hits atomic.Int64
	s := server(t, map[string]string{}, &hits)
	l := New(Options{})
	now := time.Now()
	l.now = func() time.Time { return now }
	b := backend(s.URL+"/v1", dialect.OpenAI)
	if got := l.Lookup(context.Background(), 12000, b, "m"); got.Tokens != 12000 || got.Source != "config context_window" || hits.Load() != 0 {
		t.Fatalf("configured: %+v after %d requests", got, hits.Load())
	}
	if got := l.Lookup(context.Background(), 0, b, "m"); got.Tokens != 0 {
		t.Fatalf("nothing knows it: %+v", got)
	}
	n := hits.Load()
	l.Learn(0, b, "m") // within the minute: not asked again
	l.Lookup(context.Background(), 0, b, "m")
	if hits.Load() != n {
		t.Fatalf("asked again within a minute: %d -> %d", n, hits.Load())
	}
	now = now.Add(61 * time.Second)
	l.Lookup(context.Background(), 0, b, "m")
	if hits.Load() == n {
		t.Fatal("not asked again after a minute")
	}
	if got := l.Lookup(context.Background(), 0, backend(s.URL, dialect.Anthropic), "claude"); got.Tokens != 0 {
		t.Fatalf("an Anthropic backend without context_window: %+v", got)
	}
}

// A server that says nothing of itself was still asked: Info says when
// (the console and /v1/models/health then show its engine as "other"
// rather than not yet asked).
func TestInfo_SaysWhenTheServerWasAskedEvenIfItSaidNothing(t *testing.T) {
	var hits atomic.Int64
	s := server(t, map[string]string{"GET /v1/models": `{"data":[{"id":"m"}]}`}, &hits)
	l := New(Options{})
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	b := backend(s.URL+"/v1", dialect.OpenAI)
	if got := l.Info(b, "m"); !got.Learned.IsZero() {
		t.Fatalf("before any lookup: %+v", got)
	}
	l.Lookup(context.Background(), 0, b, "m")
	if got := l.Info(b, "m"); got.Kind != KindOther || !got.Learned.Equal(now) || hits.Load() == 0 {
		t.Fatalf("after a lookup the server answered without a context length: %+v (%d requests), want kind other learned at %v", got, hits.Load(), now)
	}
}

func TestLookup_ConcurrentLookupsShareOneFetch(t *testing.T) {
	var hits atomic.Int64
	release := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		<-release
		fmt.Fprint(w, `{"data":[{"id":"m","max_model_len":2048}]}`)
	}))
	defer s.Close()
	l := New(Options{})
	b := backend(s.URL+"/v1", dialect.OpenAI)
	done := make(chan Length, 8)
	var waiting atomic.Int64
	for i := 0; i < 8; i++ {
		ctx := &doneNotice{Context: context.Background(), n: &waiting}
		go func() { done <- l.Lookup(ctx, 0, b, "m") }()
	}
	// Every lookup fetches or waits for the fetch in flight, which cannot
	// end before release.
	testenv.Eventually(t, 5*time.Second, func() bool { return waiting.Load() == 8 }, "8 lookups fetching or waiting for the fetch")
	close(release)
	for i := 0; i < 8; i++ {
		if got := <-done; got.Tokens != 2048 {
			t.Fatalf("lookup %d: %+v", i, got)
		}
	}
	if hits.Load() != 1 {
		t.Fatalf("%d fetches for 8 concurrent lookups, want 1", hits.Load())
	}
}

// doneNotice counts, in n, the first time a lookup asks its context for
// Done: as it starts the fetch (context.WithTimeout asks) or as it waits
// for the fetch in flight.
type doneNotice struct {
	context.Context
	once sync.Once
	n    *atomic.Int64
}

func (c *doneNotice) Done() <-chan struct{} {
	c.once.Do(func() { c.n.Add(1) })
	return c.Context.Done()
}

// A backend restarted with another context answers /v1/models with the new
// max_model_len: a Recheck (a passed health check) learns it, while
// lookups made during the Recheck keep using the old answer rather than
// nothing; an answer of nothing (a 500) does not erase what is known.
func TestRecheck_LearnsAChangedContextAndKeepsTheOldMeanwhile(t *testing.T) {
	var ctxLen atomic.Int64
	ctxLen.Store(2048)
	var failing atomic.Bool
	hold := make(chan chan struct{}, 1) // a request takes a gate to wait on, when one is offered
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case gate := <-hold:
			<-gate
		default:
		}
		if failing.Load() {
			http.Error(w, "restarting", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, `{"data":[{"id":"m","owned_by":"vllm","max_model_len":%d}]}`, ctxLen.Load())
	}))
	defer s.Close()
	l := New(Options{})
	b := backend(s.URL+"/v1", dialect.OpenAI)
	if got := l.Lookup(context.Background(), 0, b, "m"); got.Tokens != 2048 {
		t.Fatalf("first lookup: %+v", got)
	}

	ctxLen.Store(4096)
	gate := make(chan struct{})
	hold <- gate
	done := make(chan struct{})
	go func() { l.Recheck(context.Background(), b, false); close(done) }()
	// the Recheck's request took the gate and waits on it
	testenv.Eventually(t, 5*time.Second, func() bool { return len(hold) == 0 }, "the Recheck's request took the gate")
	if got := l.Known(0, b, "m"); got.Tokens != 2048 {
		t.Fatalf("during the Recheck: Known = %+v, want the old 2048", got)
	}
	close(gate)
	<-done
	if got := l.Known(0, b, "m"); got.Tokens != 4096 || got.Source != "/v1/models max_model_len" {
		t.Fatalf("after the Recheck: Known = %+v, want 4096", got)
	}
	if k := l.Info(b, "m").Kind; k != KindVLLM {
		t.Fatalf("engine: %q", k)
	}

	failing.Store(true)
	l.Recheck(context.Background(), b, true)
	if got := l.Known(0, b, "m"); got.Tokens != 4096 {
		t.Fatalf("after a Recheck that got no answer: Known = %+v, want 4096 kept", got)
	}
	if other := backend(s.URL+"/v1", dialect.OpenAI); l.Known(0, other, "m").Tokens != 0 {
		t.Fatal("a backend never asked about learned something")
	}
}
