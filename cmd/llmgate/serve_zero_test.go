package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"llmgate/internal/discover"
	"llmgate/internal/testenv"
)

// A gateway started without a config file before its engine was up (or
// done loading) serves the engine's models once a later probe finds it,
// without a restart; a probe that finds nothing new changes nothing; a
// model the engine no longer lists is dropped.
func TestServe_ZeroConfigAddsAnEngineThatCameUpLater(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"/models/qwen3-8b.gguf","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer engine.Close()
	for _, k := range []string{"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "DASHSCOPE_API_KEY"} {
		t.Setenv(k, "") // no cloud backends in this test
	}
	f := serveFlags{listen: "127.0.0.1:0", database: filepath.Join(t.TempDir(), "llmgate.db")}
	cfg, _, err := zeroConfig(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	const master = "sk-lg-zero-test-0123456789"
	g := startTestGateway(t, cfg, master)
	chatTo := func(model string) (int, string) {
		req, _ := http.NewRequest("POST", g.URL()+"/chat/completions", strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+master)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	chat := func() (int, string) { return chatTo("qwen3-8b") }
	if st, body := chat(); st != http.StatusNotFound {
		t.Fatalf("before the engine is found: %d %s", st, body)
	}

	// The engine is up from the second probe on.
	var probes atomic.Int32
	var up atomic.Pointer[discover.Found]
	up.Store(&discover.Found{Backend: "llamacpp-8080", URL: engine.URL + "/v1", Source: "probe test", Models: []string{"/models/qwen3-8b.gguf"}})
	probe := func(context.Context) []discover.Found {
		if probes.Add(1) < 2 {
			return nil
		}
		return []discover.Found{*up.Load()}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.SyncBuffer
	go watchLocalEngines(ctx, g, f, nil, slog.New(slog.NewTextHandler(&logs, nil)), time.Millisecond, probe)
	testenv.Eventually(t, 10*time.Second, func() bool { st, _ := chat(); return st == http.StatusOK }, "the engine found by the second probe is served")
	if st, body := chat(); st != http.StatusOK || !strings.Contains(body, `"content":"hi"`) {
		t.Fatalf("after the engine was found: %d %s", st, body)
	}
	// Later probes find nothing new: the table is not rebuilt each time.
	tables := g.Tables.Load()
	n := probes.Load()
	testenv.Eventually(t, 10*time.Second, func() bool { return probes.Load() > n+5 }, "five more probes")
	if g.Tables.Load() != tables {
		t.Error("the routing table was rebuilt although no engine was new")
	}
	// The engine restarted with another model: the old name, which the
	// engine would answer with the new model, is not served any more.
	up.Store(&discover.Found{Backend: "llamacpp-8080", URL: engine.URL + "/v1", Source: "probe test", Models: []string{"/models/phi-4.gguf"}})
	testenv.Eventually(t, 10*time.Second, func() bool { st, _ := chatTo("phi-4"); return st == http.StatusOK }, "the new model is served")
	if st, body := chat(); st != http.StatusNotFound || !strings.Contains(body, "phi-4") {
		t.Fatalf("the model the engine no longer lists: %d %s", st, body)
	}
	// Only the key variable changed: said as such, not as an engine
	// found with no models.
	up.Store(&discover.Found{Backend: "llamacpp-8080", URL: engine.URL + "/v1", Source: "probe test", Models: []string{"/models/phi-4.gguf"}, APIKey: "k2"})
	testenv.Eventually(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "API key variable changed") }, "the key change logged")
	if l := logs.String(); strings.Contains(l, "models=\"\"") || strings.Contains(l, "models=\n") {
		t.Fatalf("a log line names no models:\n%s", l)
	}
}
