package config

import (
	"fmt"
	"llmgate/internal/dialect"
	"llmgate/internal/testenv"
	"strings"
	"testing"
	"time"
)

func TestLoad_DeploymentsFallbacksAndPresets(t *testing.T) {
	src := `
backends:
  gpu1: {engine: vllm, health_check: true}
  gpu2: {engine: sglang, url: http://10.0.0.2:30000, idle_timeout: 20s}
  ds: {provider: deepseek}
  claude: {provider: anthropic}
models:
  qwen:
    balancing: weighted_random
    deployments:
      - {backend: gpu1, upstream_model: Qwen/Qwen2.5-7B, weight: 3}
      - {backend: gpu2, priority: 1}
    fallbacks: [deepseek-chat]
  deepseek-chat: {backend: ds}
  sonnet: {backend: claude, upstream_model: claude-sonnet-4-5}
`
	cfg, err := LoadWithEnv(strings.NewReader(src), "x.yaml", env(map[string]string{"DEEPSEEK_API_KEY": "sk-ds", "ANTHROPIC_API_KEY": "sk-ant"}))
	if err != nil {
		t.Fatal(err)
	}
	g1, g2, ds, cl := cfg.Backends["gpu1"], cfg.Backends["gpu2"], cfg.Backends["ds"], cfg.Backends["claude"]
	if g1.BaseURL != "http://127.0.0.1:8000/v1" || !g1.HealthCheck.On() || g1.HealthCheck.Path != "/health" || time.Duration(g1.HealthCheck.Interval) != DefaultHealthInterval {
		t.Errorf("engine vllm: base %q health %+v", g1.BaseURL, g1.HealthCheck)
	}
	if g2.BaseURL != "http://10.0.0.2:30000/v1" || time.Duration(g2.IdleTimeout) != 20*time.Second {
		t.Errorf("engine sglang with url: base %q idle %v", g2.BaseURL, g2.IdleTimeout)
	}
	if ds.BaseURL != "https://api.deepseek.com/v1" || ds.APIKey != "sk-ds" || ds.Dialect != dialect.OpenAI {
		t.Errorf("provider deepseek: %+v", ds)
	}
	if cl.BaseURL != "https://api.anthropic.com" || cl.Dialect != dialect.Anthropic || cl.APIKey != "sk-ant" {
		t.Errorf("provider anthropic: %+v", cl)
	}
	q := cfg.Models["qwen"]
	if q.Balancing != BalanceWeightedRandom || len(q.Deployments) != 2 || q.Fallbacks[0] != "deepseek-chat" {
		t.Fatalf("qwen: %+v", q)
	}
	if d := q.Deployments[1]; d.Weight != 1 || d.UpstreamModel != "qwen" || d.Priority != 1 {
		t.Errorf("defaults of the second deployment: %+v", d)
	}
	if d := cfg.Models["sonnet"].Deployments; len(d) != 1 || d[0].Backend != "claude" || d[0].UpstreamModel != "claude-sonnet-4-5" {
		t.Errorf("the single-backend form did not become one deployment: %+v", d)
	}
	if cfg.Models["sonnet"].Balancing != BalanceLeastOutstanding {
		t.Errorf("default balancing %q", cfg.Models["sonnet"].Balancing)
	}
}

func TestLoad_DeploymentQueueSettings(t *testing.T) {
	src := `
backends:
  gpu1: {url: http://10.0.0.1:8000/v1}
  gpu2: {url: http://10.0.0.2:8000/v1}
models:
  qwen:
    deployments:
      - {backend: gpu1, max_concurrency: 4, queue_timeout: 5s, queue_when_waiting: 2, queue_reserve: 1}
      - {backend: gpu2}
`
	cfg, err := LoadWithEnv(strings.NewReader(src), "x.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Models["qwen"].Deployments
	if d[0].MaxConcurrency != 4 || time.Duration(d[0].QueueTimeout) != 5*time.Second || d[0].QueueWhenWaiting != 2 || d[0].QueueReserve != 1 {
		t.Errorf("queue settings of the first deployment: %+v", d[0])
	}
	if d[1].MaxConcurrency != 0 || time.Duration(d[1].QueueTimeout) != DefaultQueueTimeout || d[1].QueueWhenWaiting != 0 {
		t.Errorf("queue defaults of the second deployment: %+v", d[1])
	}
}

func TestLoad_RoutingErrorsNameKeyAndLine(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"typo in a deployment", "backends:\n  a: {url: http://x}\nmodels:\n  m:\n    deployments:\n      - {backend: a, wieght: 2}\n",
			`x.yaml:6: models.m.deployments[0].wieght: unknown key "wieght"; did you mean "weight"?`},
		{"unknown backend in a deployment", "backends:\n  a: {url: http://x}\nmodels:\n  m:\n    deployments:\n      - {backend: a}\n      - {backend: b}\n",
			`x.yaml:7: models.m.deployments[1].backend: unknown backend "b"`},
		{"deployments not a list", "backends:\n  a: {url: http://x}\nmodels:\n  m:\n    deployments: {backend: a}\n", `models.m.deployments: must be a list`},
		{"both forms", "backends:\n  a: {url: http://x}\nmodels:\n  m: {backend: a, deployments: [{backend: a}]}\n", `models.m: set backend: or deployments:, not both`},
		{"unknown fallback", "backends:\n  a: {url: http://x}\nmodels:\n  mm: {backend: a}\n  m: {backend: a, fallbacks: [mn]}\n", `x.yaml:5: models.m.fallbacks: unknown model "mn" (did you mean "mm"?)`},
		{"self fallback", "backends:\n  a: {url: http://x}\nmodels:\n  m: {backend: a, fallbacks: [m]}\n", `cannot fall back to itself`},
		{"bad balancing", "backends:\n  a: {url: http://x}\nmodels:\n  m: {backend: a, balancing: round_robin}\n", `models.m.balancing: must be one of least_outstanding, weighted_random, lowest_latency, cache_aware, least_load, session, not "round_robin"`},
		{"negative max_concurrency", "backends:\n  a: {url: http://x}\nmodels:\n  m: {deployments: [{backend: a, max_concurrency: -4}]}\n", `x.yaml:4: models.m.deployments[0].max_concurrency: must be 0 (no cap)`},
		{"queue_timeout without a unit", "backends:\n  a: {url: http://x}\nmodels:\n  m: {deployments: [{backend: a, queue_timeout: 30}]}\n", `queue_timeout`},
		{"queue_reserve without room", "backends:\n  a: {url: http://x}\nmodels:\n  m: {deployments: [{backend: a, max_concurrency: 2, queue_reserve: 2}]}\n", `x.yaml:4: models.m.deployments[0].queue_reserve: must be 0 (none) or fewer than max_concurrency (2)`},
		{"queue_reserve without a cap", "backends:\n  a: {url: http://x}\nmodels:\n  m: {deployments: [{backend: a, queue_reserve: 1}]}\n", `queue_reserve: must be 0 (none) or fewer than max_concurrency (0)`},
		{"negative queue_when_waiting", "backends:\n  a: {url: http://x}\nmodels:\n  m: {deployments: [{backend: a, queue_when_waiting: -1}]}\n", `queue_when_waiting: must be 0 (off)`},
		{"negative weight", "backends:\n  a: {url: http://x}\nmodels:\n  m: {deployments: [{backend: a, weight: -1}]}\n", `weight: must be positive`},
		{"unknown provider", "backends:\n  a: {provider: deepsek, api_key: k}\n", `x.yaml:2: backends.a.provider: unknown provider "deepsek" (did you mean "deepseek"?)`},
		{"provider without key", "backends:\n  a: {provider: groq}\n", `backends.a.api_key: provider groq needs an API key: set GROQ_API_KEY or api_key`},
		{"unknown engine", "backends:\n  a: {engine: vlm}\n", `backends.a.engine: unknown engine "vlm" (did you mean "vllm"?)`},
		{"provider and engine", "backends:\n  a: {engine: vllm, provider: openai, api_key: k}\n", `set provider (a cloud API) or engine (a local server), not both`},
		{"typo in health_check", "backends:\n  a:\n    url: http://x\n    health_check: {intervall: 5s}\n", `backends.a.health_check.intervall: unknown key "intervall"; did you mean "interval"?`},
		{"drop_params removing a decision field", "backends:\n  a:\n    url: http://x\n    drop_params: [top_k, max_completion_tokens]\n",
			`x.yaml:2: backends.a.drop_params: cannot remove "max_completion_tokens": the gateway checks and prices requests on it`},
		{"negative context_window", "backends:\n  a: {url: http://x}\nmodels:\n  m: {backend: a, context_window: -100}\n", `x.yaml:4: models.m.context_window: must be the model's context length`},
		{"negative body_read_timeout", "body_read_timeout: -5s\nbackends:\n  a: {url: http://x}\n", `x.yaml:1: body_read_timeout: must not be negative`},
		{"negative max_body_reads_per_key", "max_body_reads_per_key: -1\nbackends:\n  a: {url: http://x}\n", `x.yaml:1: max_body_reads_per_key: must be a number of bodies, or 0 for no cap`},
		{"drop_params with an empty name", "backends:\n  a: {url: http://x, drop_params: [\"\"]}\n", `backends.a.drop_params: lists an empty name`},
		{"relative health path", "backends:\n  a: {url: http://x, health_check: {path: health}}\n", `health_check.path: must be an absolute path`},
		{"balancing misspelt", "backends:\n  a: {url: http://x}\nmodels:\n  m: {backend: a, balancing: cache-aware}\n", `not "cache-aware" (did you mean "cache_aware"?)`},
		{"load_factor below 1", "routing: {load_factor: 0.5}\nbackends:\n  a: {url: http://x}\n", `routing.load_factor: must be at least 1`},
		{"scrape too often", "routing: {engine_metrics_interval: 10ms}\nbackends:\n  a: {url: http://x}\n", `routing.engine_metrics_interval: 10ms would read every engine's /metrics more than ten times a second`},
		{"negative prefix_cache_tokens", "routing: {prefix_cache_tokens: -1}\nbackends:\n  a: {url: http://x}\n", `routing.prefix_cache_tokens: must not be negative`},
		{"typo in a routing key", "routing: {load_facter: 2}\nbackends:\n  a: {url: http://x}\n", `routing.load_facter: unknown key "load_facter"; did you mean "load_factor"?`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadWithEnv(strings.NewReader(c.src), "x.yaml", env(nil))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestBackend_SameSettingsIgnoresLines(t *testing.T) {
	a := Backend{Name: "a", URL: "http://x", line: 3}
	b := Backend{Name: "a", URL: "http://x", line: 9}
	if !a.SameSettings(b) {
		t.Fatal("moving a backend in the file changed its settings")
	}
	b.APIKey = "k"
	if a.SameSettings(b) {
		t.Fatal("a new key did not count as a change")
	}
}

// A backend with ca_file loaded twice (a reload) keeps its connections:
// the derived TLS configurations differ as values, the settings do not.
func TestBackend_SameSettingsWithCAFile(t *testing.T) {
	ca, _, _ := testenv.TLSCert(t, t.TempDir(), 1)
	load := func(extra string) Backend {
		t.Helper()
		cfg, err := Load(strings.NewReader("backends:\n  b: {url: https://x.example, ca_file: "+ca+extra+"}\n"), "x.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return *cfg.Backends["b"]
	}
	a, b := load(""), load("")
	if a.TLS == nil || !a.SameSettings(b) {
		t.Fatal("the same ca_file loaded twice counted as a change")
	}
	if a.SameSettings(load(", tls_skip_verify: true")) {
		t.Fatal("turning tls_skip_verify on did not count as a change")
	}
}

// drop_params: the openai preset drops top_k unless the file says
// otherwise; other backends drop nothing unless told.
func TestBackend_DropParamsDefaults(t *testing.T) {
	src := "backends:\n  oai: {provider: openai}\n  oai-keep: {provider: openai, drop_params: []}\n" +
		"  ds: {provider: deepseek}\n  local: {url: http://127.0.0.1:8000/v1, drop_params: [guided_json, top_k]}\n"
	cfg, err := LoadWithEnv(strings.NewReader(src), "x.yaml", env(map[string]string{"OPENAI_API_KEY": "k", "DEEPSEEK_API_KEY": "k"}))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"oai": "[top_k]", "oai-keep": "[]", "ds": "[]", "local": "[guided_json top_k]"} {
		if got := fmt.Sprint(cfg.Backends[name].DropParams); got != want {
			t.Errorf("%s: drop_params = %s; want %s", name, got, want)
		}
	}
}

func TestLoad_EngineAwareRoutingSettings(t *testing.T) {
	src := "routing:\n  engine_metrics_interval: 2s\n  load_factor: 1.5\n  prefix_cache_tokens: 65536\n  session_header: X-Conversation\nbackends:\n  a: {url: http://x, engine: vllm}\n  b: {url: http://y, engine: sglang}\nmodels:\n  m: {balancing: cache_aware, deployments: [{backend: a}, {backend: b}]}\n  s: {balancing: session, backend: a}\n  l: {balancing: least_load, backend: b}\n"
	cfg, err := LoadWithEnv(strings.NewReader(src), "x.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routing
	if time.Duration(r.EngineMetricsInterval) != 2*time.Second || r.LoadFactor != 1.5 || r.PrefixCacheTokens != 65536 || r.SessionHeader != "X-Conversation" {
		t.Fatalf("routing %+v", r)
	}
	if cfg.Models["m"].Balancing != BalanceCacheAware || cfg.Models["s"].Balancing != BalanceSession || cfg.Models["l"].Balancing != BalanceLeastLoad {
		t.Fatal("balancing values not kept")
	}
}

func TestLoad_DefaultBalancingIsCacheAwareOnlyForEngineReplicas(t *testing.T) {
	src := `backends:
  v1: {url: http://a, engine: vllm}
  v2: {url: http://b, engine: sglang}
  l1: {url: http://c, engine: llamacpp}
  ol: {url: http://d, engine: ollama}
  cloud: {url: http://e}
  pool: {url: http://vllm.ns.svc:8000/v1, engine: vllm, discovery: dns}
  cloudpool: {url: http://proxy.ns.svc:8000/v1, discovery: dns}
models:
  replicas: {deployments: [{backend: v1}, {backend: v2}, {backend: l1}]}
  mixed: {deployments: [{backend: v1}, {backend: cloud}]}
  ollama: {deployments: [{backend: v1}, {backend: ol}]}
  single: {backend: v1}
  chosen: {balancing: least_outstanding, deployments: [{backend: v1}, {backend: v2}]}
  found: {backend: pool}
  foundcloud: {backend: cloudpool}
`
	cfg, err := LoadWithEnv(strings.NewReader(src), "x.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]string{"replicas": BalanceCacheAware, "mixed": BalanceLeastOutstanding,
		"ollama": BalanceLeastOutstanding, "single": BalanceLeastOutstanding, "chosen": BalanceLeastOutstanding,
		"found": BalanceCacheAware, "foundcloud": BalanceLeastOutstanding} {
		if got := cfg.Models[model].Balancing; got != want {
			t.Errorf("%s: balancing %s, want %s", model, got, want)
		}
	}
}
