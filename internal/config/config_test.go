package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"llmgate/internal/dialect"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoad_IssueExampleWorks(t *testing.T) {
	src := `listen: 127.0.0.1:4000          # default
database: llmgate.db            # default; SQLite file
backends:
  local-vllm: {url: http://127.0.0.1:8000/v1}
  deepseek:   {url: https://api.deepseek.com, api_key: ${DEEPSEEK_API_KEY}}
models:
  qwen2.5-7b-instruct: {backend: local-vllm, upstream_model: qwen2.5-7b-awq}
  deepseek-chat:       {backend: deepseek}
`
	cfg, err := LoadWithEnv(strings.NewReader(src), "llmgate.yaml", env(map[string]string{"DEEPSEEK_API_KEY": "sk-ds"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Backends["deepseek"].APIKey; got != "sk-ds" {
		t.Errorf("api_key = %q, want expanded sk-ds", got)
	}
	if got := cfg.Backends["deepseek"].BaseURL; got != "https://api.deepseek.com/v1" {
		t.Errorf("deepseek base = %q", got)
	}
	if got := cfg.Backends["local-vllm"].BaseURL; got != "http://127.0.0.1:8000/v1" {
		t.Errorf("vllm base = %q", got)
	}
	if got := cfg.Models["qwen2.5-7b-instruct"].UpstreamModel; got != "qwen2.5-7b-awq" {
		t.Errorf("upstream = %q", got)
	}
	if got := cfg.Models["deepseek-chat"].UpstreamModel; got != "deepseek-chat" {
		t.Errorf("default upstream = %q", got)
	}
	if cfg.Listen != DefaultListen || cfg.MaxBodyBytes != DefaultMaxBodyBytes {
		t.Errorf("defaults not applied: %+v", cfg)
	}
}

func TestLoad_EmptyFileGetsDefaults(t *testing.T) {
	cfg, err := LoadWithEnv(strings.NewReader(""), "x", env(nil))
	if err != nil || cfg.Listen != "127.0.0.1:4000" || cfg.Database != "llmgate.db" {
		t.Fatalf("cfg=%+v err=%v", cfg, err)
	}
}

func TestLoad_ErrorsNameKeyAndLine(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"unknown backend", "backends:\n  a: {url: http://x}\nmodels:\n  m: {backend: b}\n", `x.yaml:4: models.m.backend: unknown backend "b"`},
		{"typo in key", "backends:\n  a:\n    url: http://x\n    api_kye: k\n", `x.yaml:4: backends.a.api_kye: unknown key "api_kye"; did you mean "api_key"?`},
		{"top-level typo", "lisen: 1\n", `x.yaml:1: lisen: unknown key "lisen"; did you mean "listen"?`},
		{"missing url", "backends:\n  a: {api_key: k}\n", `x.yaml:2: backends.a.url: is required`},
		{"bad scheme", "backends:\n  a: {url: 127.0.0.1:8000}\n", `backends.a.url: URL "127.0.0.1:8000" must start with http:// or https://`},
		{"bad dialect", "backends:\n  a: {url: http://x, dialect: grpc}\n", `backends.a.dialect: must be openai or anthropic`},
		{"yaml syntax", "backends:\n  a: {url: [\n", `x.yaml:2: invalid YAML: `},
		{"bad duration", "backends:\n  a: {url: http://x, timeout: soon}\n", `x.yaml:2: backends.a.timeout: "soon" is not a duration`},
		{"negative responses_ttl", "listen: 127.0.0.1:4000\nresponses_ttl: -1h\n", `x.yaml:2: responses_ttl: must not be negative`},
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

func TestResponsesStorage(t *testing.T) {
	for _, c := range []struct {
		src  string
		on   bool
		keep time.Duration
	}{
		{"listen: 127.0.0.1:4000\n", true, DefaultResponsesTTL},
		{"responses_ttl: 7d\n", true, 7 * 24 * time.Hour},
		{"store_responses: false\nresponses_ttl: 7d\n", false, 0},
		{"store_responses: true\n", true, DefaultResponsesTTL},
	} {
		cfg, err := LoadWithEnv(strings.NewReader(c.src), "x.yaml", env(nil))
		if err != nil {
			t.Fatal(err)
		}
		if on, keep := cfg.ResponsesStorage(); on != c.on || keep != c.keep {
			t.Errorf("%q: storage %v for %v, want %v for %v", c.src, on, keep, c.on, c.keep)
		}
	}
}

func TestNormalizeBaseURL(t *testing.T) {
	cases := []struct {
		in   string
		d    dialect.Dialect
		want string
	}{
		{"http://127.0.0.1:8000", dialect.OpenAI, "http://127.0.0.1:8000/v1"},
		{"http://127.0.0.1:8000/", dialect.OpenAI, "http://127.0.0.1:8000/v1"},
		{"http://127.0.0.1:8000/v1/", dialect.OpenAI, "http://127.0.0.1:8000/v1"},
		{"http://127.0.0.1:8000/v1/v1", dialect.OpenAI, "http://127.0.0.1:8000/v1"},
		{"https://open.bigmodel.cn/api/paas/v4", dialect.OpenAI, "https://open.bigmodel.cn/api/paas/v4"},
		{"https://dashscope.aliyuncs.com/compatible-mode/v1", dialect.OpenAI, "https://dashscope.aliyuncs.com/compatible-mode/v1"},
		{"https://api.anthropic.com/v1", dialect.Anthropic, "https://api.anthropic.com"},
		{"https://api.anthropic.com", dialect.Anthropic, "https://api.anthropic.com"},
	}
	for _, c := range cases {
		got, err := NormalizeBaseURL(c.in, c.d)
		if err != nil || got != c.want {
			t.Errorf("NormalizeBaseURL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestExpandEnv_DefaultsAndMissing(t *testing.T) {
	lookup := env(map[string]string{"A": "1", "EMPTY": ""})
	if got, err := ExpandEnv("${A}-${B:-two}-${EMPTY:-three}-${EMPTY}-${C:-}-$${A}", lookup); err != nil || got != "1-two-three---${A}" {
		t.Fatalf("got %q, %v", got, err)
	}
	_, err := ExpandEnv("x ${C} y", lookup)
	var unset *UnsetVarError
	if !errors.As(err, &unset) || unset.Name != "C" {
		t.Fatalf("unset ${C}: err = %v, want an UnsetVarError naming C", err)
	}
}

func TestNearest(t *testing.T) {
	names := []string{"qwen2.5-7b-instruct", "qwen2.5-32b-instruct", "deepseek-chat"}
	if got := Nearest("qwen2.5-7b", names); got != "qwen2.5-7b-instruct" {
		t.Errorf("prefix: got %q", got)
	}
	if got := Nearest("deepseek-caht", names); got != "deepseek-chat" {
		t.Errorf("typo: got %q", got)
	}
	if got := Nearest("llama-3-70b", names); got != "" {
		t.Errorf("unrelated: got %q", got)
	}
}
