package dialect

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"llmgate/internal/api/openai"
)

// ChatOptions tune the translation (internal/translate) of a request for a
// chat backend's model; config builds them from the model's settings.
// The zero value is the default translation.
type ChatOptions struct {
	// Reasoning maps the client's thinking request onto the model's
	// parameters.
	Reasoning ReasoningOptions
	// SystemInPlace keeps a system message that follows other messages
	// where it is, for chat templates that render such messages (Qwen2.5,
	// Qwen3, Llama 3). By default every system message joins the leading
	// one, which every template accepts.
	SystemInPlace bool
	// KeepBillingHeader keeps the first line of the system prompt when it
	// is Claude Code's "x-anthropic-billing-header: ..." line. By default
	// it is removed: it means something only to Anthropic's API, and it
	// carries a hash of the session's first prompt, so it changes between
	// sessions at the very start of the prompt and defeats an engine's
	// prefix cache for everything after it.
	KeepBillingHeader bool
}

// ReasoningOptions says how a client's request about the model's thinking
// reaches a chat backend, for one model. Engines take it in different
// places: Qwen3 and GLM-4.5 on vLLM and SGLang read
// chat_template_kwargs.enable_thinking, DeepSeek-V3.1 and Granite
// chat_template_kwargs.thinking, gpt-oss (and Ollama) reasoning_effort. The
// zero value sends nothing, so a model that does not reason is never sent a
// parameter it does not know: the client's thinking settings are then
// dropped (see translate.AnthropicIgnoredFields).
//
// Each path is a top-level request member ("reasoning_effort") or a dotted
// path into an object member ("chat_template_kwargs.enable_thinking"),
// merged with what the request already holds there.
type ReasoningOptions struct {
	// Switch receives true or false when the client turned thinking on
	// (Anthropic thinking enabled or adaptive, Responses effort other than
	// "none") or off (thinking disabled, effort "none").
	Switch string
	// Effort receives "low", "medium" or "high": Anthropic
	// output_config.effort (xhigh and max become high), the effort implied
	// by a thinking budget (below 4096 tokens low, below 16384 medium, else
	// high), or a Responses reasoning.effort (minimal becomes low). It is
	// not sent when thinking is off.
	Effort string
	// Budget receives the client's thinking budget in tokens (Anthropic
	// thinking.budget_tokens), for engines that take one per request.
	Budget string
	// DropHistory leaves the reasoning of earlier assistant turns out of
	// the request, for backends that refuse reasoning_content in input
	// (DeepSeek's own API). By default it is sent as reasoning_content,
	// which Qwen3's chat template renders for the turns of a tool loop.
	DropHistory bool
}

// reasoningPresets are the options of model families served by vLLM and
// SGLang, named as vLLM's --reasoning-parser names them (see vLLM's
// "Reasoning Outputs": Qwen3 and GLM-4.5 think unless
// chat_template_kwargs.enable_thinking is false; DeepSeek-V3.1 and Granite
// 3.2 only when chat_template_kwargs.thinking is true; gpt-oss takes
// reasoning_effort).
var reasoningPresets = map[string]ReasoningOptions{
	"qwen3":       {Switch: "chat_template_kwargs.enable_thinking"},
	"glm45":       {Switch: "chat_template_kwargs.enable_thinking"},
	"deepseek_v3": {Switch: "chat_template_kwargs.thinking"},
	"granite":     {Switch: "chat_template_kwargs.thinking"},
	"gpt_oss":     {Effort: "reasoning_effort"},
}

// ReasoningPreset returns the options of a model family by name (qwen3,
// glm45, deepseek_v3, granite, gpt_oss); ok is false for another name.
func ReasoningPreset(name string) (opts ReasoningOptions, ok bool) {
	opts, ok = reasoningPresets[name]
	return opts, ok
}

// ReasoningPresetNames lists the preset names, sorted, for messages that
// say which exist.
func ReasoningPresetNames() []string {
	return slices.Sorted(maps.Keys(reasoningPresets))
}

// IsZero reports whether no option is set.
func (o ReasoningOptions) IsZero() bool { return o == ReasoningOptions{} }

// Validate checks the paths: dotted names without empty segments, whose
// first segment is not a chat request field the gateway sets itself (only
// reasoning_effort may be named), none of them equal to or inside another.
func (o ReasoningOptions) Validate() error {
	paths := []struct{ name, path string }{{"switch", o.Switch}, {"effort", o.Effort}, {"budget", o.Budget}}
	for i, p := range paths {
		if p.path == "" {
			continue
		}
		for _, q := range paths[i+1:] {
			if q.path != "" && (p.path == q.path || strings.HasPrefix(q.path, p.path+".") || strings.HasPrefix(p.path, q.path+".")) {
				return fmt.Errorf("reasoning %s %q and %s %q overlap; each needs its own member", p.name, p.path, q.name, q.path)
			}
		}
		segs := strings.Split(p.path, ".")
		for _, s := range segs {
			if s == "" {
				return fmt.Errorf("reasoning %s %q: a path is member names separated by dots, such as chat_template_kwargs.enable_thinking", p.name, p.path)
			}
		}
		if segs[0] == "reasoning_effort" {
			if len(segs) > 1 {
				return fmt.Errorf("reasoning %s %q: reasoning_effort is a string, not an object", p.name, p.path)
			}
			continue
		}
		if openai.IsChatRequestField(segs[0]) {
			return fmt.Errorf("reasoning %s %q: %s is a chat request field the gateway sets itself; choose another member", p.name, p.path, segs[0])
		}
	}
	return nil
}
