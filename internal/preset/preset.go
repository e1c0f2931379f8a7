// Package preset knows the cloud providers and local inference engines
// people point llmgate at, so that a backend can say "provider: deepseek" or
// "engine: vllm" instead of the operator looking up base URLs, auth schemes,
// ports, health paths and quirks. It is pure data.
package preset

import (
	"sort"

	"llmgate/internal/dialect"
)

// Provider is a cloud API preset.
type Provider struct {
	Name string
	// BaseURL is the OpenAI-compatible base (requests go to BaseURL +
	// "/chat/completions"); for the Anthropic dialect it is the host.
	BaseURL string
	Dialect dialect.Dialect
	// APIKeyEnv is the environment variable read when api_key is not set.
	APIKeyEnv string
	// Auth names how the key is sent: "bearer" (Authorization: Bearer) or
	// "x-api-key" (Anthropic).
	Auth string
	// Notes are known quirks, shown by llmgate models presets and docs/routing.md.
	Notes string
	// DropParams are request members the API rejects that clients or
	// translations may send (the backend's drop_params default).
	DropParams []string
}

// Engine is a local inference server preset.
type Engine struct {
	Name string
	// Port is the engine's default listening port.
	Port int
	// V1 reports whether the OpenAI API lives under /v1.
	V1 bool
	// HealthPath is an absolute path answering 200 when the engine is up
	// (a cheap liveness probe that does not run the model).
	HealthPath string
	// StreamUsage reports whether every supported version honours
	// stream_options.include_usage; when false, older versions may send no
	// usage and the gateway estimates tokens (records are marked estimated).
	StreamUsage bool
	Notes       string
}

var providers = map[string]Provider{
	"openai": {Name: "openai", BaseURL: "https://api.openai.com/v1", Dialect: dialect.OpenAI, APIKeyEnv: "OPENAI_API_KEY", Auth: "bearer",
		Notes: "rejects top_k (dropped by default: drop_params)", DropParams: []string{"top_k"}},
	"anthropic": {Name: "anthropic", BaseURL: "https://api.anthropic.com", Dialect: dialect.Anthropic, APIKeyEnv: "ANTHROPIC_API_KEY", Auth: "x-api-key",
		Notes: "Messages API; anthropic-version header sent"},
	"deepseek": {Name: "deepseek", BaseURL: "https://api.deepseek.com/v1", Dialect: dialect.OpenAI, APIKeyEnv: "DEEPSEEK_API_KEY", Auth: "bearer",
		Notes: "deepseek-reasoner streams reasoning_content"},
	"dashscope": {Name: "dashscope", BaseURL: "https://dashscope.aliyuncs.com/compatible-mode/v1", Dialect: dialect.OpenAI, APIKeyEnv: "DASHSCOPE_API_KEY", Auth: "bearer",
		Notes: "international accounts: url: https://dashscope-intl.aliyuncs.com/compatible-mode/v1"},
	"gemini": {Name: "gemini", BaseURL: "https://generativelanguage.googleapis.com/v1beta/openai", Dialect: dialect.OpenAI, APIKeyEnv: "GEMINI_API_KEY", Auth: "bearer",
		Notes: "OpenAI-compatibility layer of the Gemini API"},
	"openrouter": {Name: "openrouter", BaseURL: "https://openrouter.ai/api/v1", Dialect: dialect.OpenAI, APIKeyEnv: "OPENROUTER_API_KEY", Auth: "bearer",
		Notes: "model names are vendor/model"},
	"groq": {Name: "groq", BaseURL: "https://api.groq.com/openai/v1", Dialect: dialect.OpenAI, APIKeyEnv: "GROQ_API_KEY", Auth: "bearer",
		Notes: "rejects logprobs, logit_bias and n > 1 with 400"},
	"together": {Name: "together", BaseURL: "https://api.together.xyz/v1", Dialect: dialect.OpenAI, APIKeyEnv: "TOGETHER_API_KEY", Auth: "bearer"},
	"mistral":  {Name: "mistral", BaseURL: "https://api.mistral.ai/v1", Dialect: dialect.OpenAI, APIKeyEnv: "MISTRAL_API_KEY", Auth: "bearer"},
	"siliconflow": {Name: "siliconflow", BaseURL: "https://api.siliconflow.cn/v1", Dialect: dialect.OpenAI, APIKeyEnv: "SILICONFLOW_API_KEY", Auth: "bearer",
		Notes: "international accounts: url: https://api.siliconflow.com/v1"},
	"moonshot": {Name: "moonshot", BaseURL: "https://api.moonshot.cn/v1", Dialect: dialect.OpenAI, APIKeyEnv: "MOONSHOT_API_KEY", Auth: "bearer",
		Notes: "international accounts: url: https://api.moonshot.ai/v1"},
	"zhipu": {Name: "zhipu", BaseURL: "https://open.bigmodel.cn/api/paas/v4", Dialect: dialect.OpenAI, APIKeyEnv: "ZHIPUAI_API_KEY", Auth: "bearer",
		Notes: "the API version is /v4, not /v1"},
}

var engines = map[string]Engine{
	"vllm": {Name: "vllm", Port: 8000, V1: true, HealthPath: "/health", StreamUsage: true,
		Notes: "answers 503 from /health while loading or after a fatal engine error"},
	"sglang": {Name: "sglang", Port: 30000, V1: true, HealthPath: "/health", StreamUsage: true,
		Notes: "/health_generate runs a real generation; /health is the cheap probe"},
	"llamacpp": {Name: "llamacpp", Port: 8080, V1: true, HealthPath: "/health", StreamUsage: false,
		Notes: "serves the loaded model whatever \"model\" says; /health is 503 while loading; some builds always send the usage chunk (dropped unless asked), older ones never (estimated)"},
	"trtllm": {Name: "trtllm", Port: 8000, V1: true, HealthPath: "/health", StreamUsage: true,
		Notes: "trtllm-serve; same default port as vLLM, so give one of them another port"},
	"ollama": {Name: "ollama", Port: 11434, V1: true, HealthPath: "/", StreamUsage: false,
		Notes: "native API at /api, OpenAI API at /v1; GET / answers \"Ollama is running\"; older versions ignore stream_options (usage estimated); loads models on first use, so allow a long first_byte_timeout"},
}

// LookupProvider returns the preset of a cloud provider.
func LookupProvider(name string) (Provider, bool) {
	p, ok := providers[name]
	return p, ok
}

// LookupEngine returns the preset of a local engine.
func LookupEngine(name string) (Engine, bool) {
	e, ok := engines[name]
	return e, ok
}

// ProviderNames lists the provider presets, sorted.
func ProviderNames() []string { return sortedNames(providers) }

// EngineNames lists the engine presets, sorted.
func EngineNames() []string { return sortedNames(engines) }

// Providers returns every provider preset, sorted by name.
func Providers() []Provider {
	out := make([]Provider, 0, len(providers))
	for _, n := range ProviderNames() {
		out = append(out, providers[n])
	}
	return out
}

// Engines returns every engine preset, sorted by name.
func Engines() []Engine {
	out := make([]Engine, 0, len(engines))
	for _, n := range EngineNames() {
		out = append(out, engines[n])
	}
	return out
}

// LocalURL is the URL an engine listens on by default on this machine.
func (e Engine) LocalURL() string {
	u := "http://127.0.0.1:" + itoa(e.Port)
	if e.V1 {
		u += "/v1"
	}
	return u
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
