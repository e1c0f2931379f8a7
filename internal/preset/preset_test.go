package preset

import (
	"net/url"
	"strings"
	"testing"
)

func TestProviders_IssueListIsCompleteAndWellFormed(t *testing.T) {
	want := []string{"openai", "anthropic", "deepseek", "dashscope", "gemini", "openrouter", "groq", "together", "mistral", "siliconflow", "moonshot", "zhipu"}
	if got := ProviderNames(); len(got) != len(want) {
		t.Fatalf("providers %v, want %v", got, want)
	}
	for _, name := range want {
		p, ok := LookupProvider(name)
		if !ok {
			t.Fatalf("no preset for %s", name)
		}
		u, err := url.Parse(p.BaseURL)
		if err != nil || u.Scheme != "https" || u.Host == "" || strings.HasSuffix(p.BaseURL, "/") {
			t.Errorf("%s: base URL %q must be https without a trailing slash", name, p.BaseURL)
		}
		if p.Dialect != "openai" && p.Dialect != "anthropic" {
			t.Errorf("%s: dialect %q", name, p.Dialect)
		}
		if (p.Dialect == "anthropic") != (p.Auth == "x-api-key") {
			t.Errorf("%s: auth %q does not match dialect %q", name, p.Auth, p.Dialect)
		}
		if !strings.HasSuffix(p.APIKeyEnv, "_API_KEY") {
			t.Errorf("%s: key variable %q", name, p.APIKeyEnv)
		}
	}
}

func TestEngines_KnowPortsHealthAndV1(t *testing.T) {
	want := map[string]string{
		"vllm":     "http://127.0.0.1:8000/v1",
		"sglang":   "http://127.0.0.1:30000/v1",
		"llamacpp": "http://127.0.0.1:8080/v1",
		"trtllm":   "http://127.0.0.1:8000/v1",
		"ollama":   "http://127.0.0.1:11434/v1",
	}
	for name, u := range want {
		e, ok := LookupEngine(name)
		if !ok {
			t.Fatalf("no preset for %s", name)
		}
		if e.LocalURL() != u {
			t.Errorf("%s: local URL %q, want %q", name, e.LocalURL(), u)
		}
		if !strings.HasPrefix(e.HealthPath, "/") {
			t.Errorf("%s: health path %q", name, e.HealthPath)
		}
	}
	if len(EngineNames()) != len(want) {
		t.Fatalf("engines %v", EngineNames())
	}
}
