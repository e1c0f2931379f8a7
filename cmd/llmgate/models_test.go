package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/config"
	"llmgate/internal/gateway"
	"llmgate/internal/testenv"
)

func runModels(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newModelsCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestModelsCmd_ShowsHealthFromARunningGateway(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(500)
	}))
	defer up.Close()
	src := fmt.Sprintf("backends:\n  bad: {url: %s}\nmodels:\n  m: {backend: bad, fallbacks: [n]}\n  n: {backend: bad, upstream_model: other}\n", up.URL)
	cfg, err := config.Load(strings.NewReader(src), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = filepath.Join(t.TempDir(), "db")
	cfg.Listen = "127.0.0.1:0"
	g := startTestGateway(t, cfg, "sk-lg-models-test")
	for i := 0; i < 5; i++ { // open the breaker of bad/m
		req, _ := http.NewRequest("POST", g.URL()+"/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
		req.Header.Set("Authorization", "Bearer sk-lg-models-test")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	out, err := runModels(t, "--url", g.URL(), "--master-key", "sk-lg-models-test")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MODEL", "m → n", "bad/m", "open", "last error", "bad/other"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	_, err = runModels(t, "--url", g.URL(), "--master-key", "sk-lg-wrong-wrong-wrong")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong key: err = %v", err)
	}
}

func TestModelsCmd_ReadsAConfigAndProbes(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		w.WriteHeader(404)
	}))
	defer up.Close()
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	src := fmt.Sprintf("backends:\n  local: {engine: vllm, url: %s}\n  ds: {provider: deepseek, api_key: sk-x}\nmodels:\n  q:\n    balancing: lowest_latency\n    deployments: [{backend: local, weight: 2}, {backend: ds, upstream_model: deepseek-chat, priority: 1}]\n", up.URL)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	// ds cannot answer here (a made-up key, or no route to the internet):
	// the table is still printed, and the exit status says a probe failed.
	out, err := runModels(t, "-c", path, "--probe", "--timeout", "300ms")
	if err == nil || err.Error() != "1 of 2 deployment probes failed: ds/deepseek-chat (see the PROBE column)" {
		t.Errorf("err = %v, want one failed probe named", err)
	}
	for _, want := range []string{"q (lowest_latency)", "local/q", "engine vllm", "ok (", "ds/deepseek-chat", "https://api.deepseek.com/v1", "deepseek", "FAIL: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := runModels(t, "-c", path, "--probe", "--timeout", "300ms", "--format", "json"); err == nil {
		t.Error("--format json: a failed probe must fail the command too")
	}

	// Every probe answering: exit status 0.
	src = fmt.Sprintf("backends:\n  local: {engine: vllm, url: %s}\nmodels:\n  q: {backend: local}\n", up.URL)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runModels(t, "-c", path, "--probe", "--timeout", "300ms"); err != nil || !strings.Contains(out, "ok (") {
		t.Errorf("all probes ok: err = %v\n%s", err, out)
	}
}

func TestModelsCmd_ProbeFindsAWrongKeyAndAMisspeltUpstreamModel(t *testing.T) {
	// A vLLM-like backend: /health answers anyone; the model list wants
	// the key, and names one model.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/health":
		case r.Header.Get("Authorization") != "Bearer sk-right":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"Unauthorized"}}`))
		case r.URL.Path == "/v1/models":
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"Qwen/Qwen2.5-7B-Instruct"}]}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer up.Close()
	path := filepath.Join(t.TempDir(), "llmgate.yaml")
	probe := func(key, upstream string) (string, error) {
		t.Helper()
		src := fmt.Sprintf("backends:\n  vllm: {engine: vllm, url: %s/v1, api_key: %s}\nmodels:\n  q: {backend: vllm, upstream_model: %s}\n", up.URL, key, upstream)
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return runModels(t, "-c", path, "--probe", "--timeout", "2s")
	}
	out, err := probe("sk-wrong", "Qwen/Qwen2.5-7B-Instruct")
	if err == nil || !strings.Contains(out, "FAIL: the backend refused its api_key: GET /models answered 401 (Unauthorized)") {
		t.Errorf("wrong api_key: err = %v\n%s", err, out)
	}
	out, err = probe("sk-right", "Qwen/Qwen2.5-7B-Instruct-AWQ")
	if err == nil || !strings.Contains(out, `FAIL: upstream_model "Qwen/Qwen2.5-7B-Instruct-AWQ" is not served here (the model list has Qwen/Qwen2.5-7B-Instruct)`) {
		t.Errorf("misspelt upstream_model: err = %v\n%s", err, out)
	}
	if out, err = probe("sk-right", "Qwen/Qwen2.5-7B-Instruct"); err != nil || !strings.Contains(out, "ok (") {
		t.Errorf("right key and model: err = %v\n%s", err, out)
	}
}

func TestModelsPresets_ListsEveryProviderAndEngine(t *testing.T) {
	out, err := runModels(t, "presets")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"openai", "anthropic", "deepseek", "dashscope", "gemini", "openrouter", "groq", "together", "mistral", "siliconflow", "moonshot", "zhipu",
		"vllm", "sglang", "llamacpp", "trtllm", "ollama", "https://open.bigmodel.cn/api/paas/v4", "http://127.0.0.1:11434/v1"} {
		if !strings.Contains(out, name) {
			t.Errorf("presets lack %q", name)
		}
	}
}

func TestModelsCmd_ShowsEngineLoadOfCacheAwareReplicas(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			fmt.Fprint(w, "vllm:num_requests_waiting{model_name=\"q\"} 3\nvllm:num_requests_running{model_name=\"q\"} 2\nvllm:kv_cache_usage_perc{model_name=\"q\"} 0.5\n")
			return
		}
		w.WriteHeader(404)
	}))
	defer engine.Close()
	// Two replicas on engines that report their queues: cache_aware by
	// default, and their /metrics read.
	src := fmt.Sprintf("backends:\n  e0: {url: %s/v1, engine: vllm}\n  e1: {url: %s/v1, engine: vllm}\nmodels:\n  q: {deployments: [{backend: e0}, {backend: e1}]}\n", engine.URL, engine.URL)
	cfg, err := config.Load(strings.NewReader(src), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = filepath.Join(t.TempDir(), "db")
	cfg.Listen = "127.0.0.1:0"
	g := startTestGateway(t, cfg, "sk-lg-models-test")
	var out string
	// The first scrapes run on their own goroutines: wait until both
	// replicas show their load.
	if _, ok := testenv.Poll(10*time.Second, func() bool {
		if out, err = runModels(t, "--url", g.URL(), "--master-key", "sk-lg-models-test"); err != nil {
			t.Fatal(err)
		}
		return strings.Count(out, "waiting 3, running 2, kv 50%") == 2
	}); !ok {
		t.Fatalf("no engine load in:\n%s", out)
	}
	req, _ := http.NewRequest("GET", strings.TrimSuffix(g.URL(), "/v1")+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer sk-lg-models-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`llmgate_engine_requests_waiting{backend="e0"} 3`, `llmgate_engine_requests_running{backend="e1"} 2`,
		`llmgate_engine_kv_cache_usage{backend="e0"} 0.5`, `llmgate_engine_metrics_fresh{backend="e1"} 1`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// An admin command that found no gateway at its default address says so
// when LLMGATE_BASE_URL (which bench, doctor, connect and mcp read) names
// another: that is the address the user meant.
func TestUnreachable_PointsFromLLMGATE_BASE_URLToLLMGATE_URL(t *testing.T) {
	t.Setenv("LLMGATE_BASE_URL", "http://10.0.0.5:4000/v1/")
	cause := errors.New("connection refused")
	err := unreachable("http://127.0.0.1:4000", false, cause, "set --url")
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "export LLMGATE_URL=http://10.0.0.5:4000") {
		t.Fatalf("got %v", err)
	}
	// Given explicitly (--url or LLMGATE_URL), or the same address: no hint.
	for _, e := range []error{
		unreachable("http://127.0.0.1:4000", true, cause, "set --url"),
		unreachable("http://10.0.0.5:4000", false, cause, "set --url"),
	} {
		if strings.Contains(e.Error(), "LLMGATE_BASE_URL") {
			t.Errorf("unexpected hint: %v", e)
		}
	}
}

// startTestGateway starts a gateway on cfg with the master key, closed
// when the test ends.
func startTestGateway(t *testing.T, cfg *config.Config, master string) *gateway.Gateway {
	t.Helper()
	g, err := gateway.Start(context.Background(), gateway.Options{Config: cfg, MasterKey: master,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return g
}
