package translate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
)

// ReasoningOptions says how a client's request about the model's thinking
// reaches a chat backend, for one model. Engines take it in different
// places: Qwen3 and GLM-4.5 on vLLM and SGLang read
// chat_template_kwargs.enable_thinking, DeepSeek-V3.1 and Granite
// chat_template_kwargs.thinking, gpt-oss (and Ollama) reasoning_effort. The
// zero value sends nothing, so a model that does not reason is never sent a
// parameter it does not know: the client's thinking settings are then
// dropped (see AnthropicIgnoredFields).
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

// ReasoningRequest is what a client asked of the model's thinking, in terms
// of no dialect.
type ReasoningRequest struct {
	// Enabled is set when the client turned thinking on or off; nil when it
	// did not say.
	Enabled *bool
	// Effort is "low", "medium" or "high", or "" when the client did not say.
	Effort string
	// BudgetTokens is the client's thinking budget, 0 when none.
	BudgetTokens int
}

// AnthropicReasoning reads the thinking request of a Messages request:
// thinking enabled (with its budget and the effort that budget implies) or
// adaptive turns thinking on, disabled turns it off; output_config.effort
// sets the effort, and the effort of the last system message in messages
// that is still in effect (see AnthropicToChatWith) overrides it for the
// turn.
func AnthropicReasoning(req *anthropic.MessagesRequest) ReasoningRequest {
	var r ReasoningRequest
	if th := req.Thinking; th != nil {
		switch th.Type {
		case "enabled":
			r.Enabled = ptr(true)
			r.BudgetTokens = max(th.BudgetTokens, 0)
			r.Effort = effortForBudget(r.BudgetTokens)
		case "adaptive":
			r.Enabled = ptr(true)
		case "disabled":
			r.Enabled = ptr(false)
		}
	}
	if oc := req.OutputConfig; oc != nil && oc.Effort != "" {
		r.Effort = normalEffort(oc.Effort)
	}
	lastUser := lastUserIndex(req.Messages)
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role == anthropic.RoleSystem && m.OutputConfig != nil && m.OutputConfig.Effort != "" && !systemCleared(m, i, lastUser) {
			r.Effort = normalEffort(m.OutputConfig.Effort)
		}
	}
	return r
}

// ResponsesReasoning reads reasoning.effort of a Responses request: "none"
// turns thinking off, any other effort turns it on.
func ResponsesReasoning(req *openai.ResponsesRequest) ReasoningRequest {
	var r ReasoningRequest
	if req.Reasoning == nil || req.Reasoning.Effort == "" {
		return r
	}
	if req.Reasoning.Effort == "none" {
		r.Enabled = ptr(false)
		return r
	}
	r.Enabled = ptr(true)
	r.Effort = normalEffort(req.Reasoning.Effort)
	return r
}

// effortForBudget is the effort a thinking budget implies, the inverse of
// reasoningBudgets.
func effortForBudget(budget int) string {
	switch {
	case budget <= 0:
		return ""
	case budget < 4096:
		return "low"
	case budget < 16384:
		return "medium"
	default:
		return "high"
	}
}

// normalEffort maps the efforts of both APIs onto the three levels chat
// backends take (vLLM accepts only low, medium and high).
func normalEffort(e string) string {
	switch e {
	case "minimal", "low":
		return "low"
	case "medium":
		return "medium"
	case "high", "xhigh", "max":
		return "high"
	}
	return ""
}

// ApplyReasoning writes the client's reasoning request r into chat as opts
// say, and applies DropHistory. It is idempotent and can be applied to a
// copy per backend when models on one route differ. Options that pass
// Validate cannot fail; others give a 500 *apierror.Error (the operator's
// configuration is at fault, not the client).
func ApplyReasoning(chat *openai.ChatCompletionRequest, r ReasoningRequest, opts ReasoningOptions) error {
	if err := applyReasoning(chat, r, opts); err != nil {
		return apierror.Newf(http.StatusInternalServerError, apierror.KindInternal, "bad_reasoning_config",
			"the gateway's reasoning settings for model %q are invalid (%v); the operator must fix the model's reasoning config", chat.Model, err)
	}
	return nil
}

func applyReasoning(chat *openai.ChatCompletionRequest, r ReasoningRequest, opts ReasoningOptions) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	if opts.DropHistory {
		for i := range chat.Messages {
			chat.Messages[i].ReasoningContent, chat.Messages[i].Reasoning = "", ""
		}
	}
	on := r.Enabled == nil || *r.Enabled
	if opts.Switch != "" && r.Enabled != nil {
		if err := setChatPath(chat, opts.Switch, *r.Enabled); err != nil {
			return err
		}
	}
	if opts.Effort != "" && r.Effort != "" && on {
		if err := setChatPath(chat, opts.Effort, r.Effort); err != nil {
			return err
		}
	}
	if opts.Budget != "" && r.BudgetTokens > 0 && on {
		if err := setChatPath(chat, opts.Budget, r.BudgetTokens); err != nil {
			return err
		}
	}
	return nil
}

// setChatPath sets the member at the dotted path of chat to v, merging into
// objects already there.
func setChatPath(chat *openai.ChatCompletionRequest, path string, v any) error {
	segs := strings.Split(path, ".")
	if segs[0] == "reasoning_effort" && len(segs) == 1 {
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("reasoning_effort takes a string, not %T", v)
		}
		chat.ReasoningEffort = s
		return nil
	}
	if chat.Extra == nil {
		chat.Extra = openai.Extra{}
	}
	raw, err := setJSONPath(chat.Extra[segs[0]], segs[1:], v)
	if err != nil {
		return fmt.Errorf("setting %s: %w", path, err)
	}
	chat.Extra[segs[0]] = raw
	return nil
}

// setJSONPath returns doc (a JSON object, or absent) with the member at
// path set to v.
func setJSONPath(doc json.RawMessage, path []string, v any) (json.RawMessage, error) {
	if len(path) == 0 {
		return json.Marshal(v)
	}
	obj := map[string]json.RawMessage{}
	if len(doc) > 0 && string(doc) != "null" {
		if err := json.Unmarshal(doc, &obj); err != nil {
			return nil, errors.New("the request already holds a value there that is not an object")
		}
	}
	inner, err := setJSONPath(obj[path[0]], path[1:], v)
	if err != nil {
		return nil, err
	}
	obj[path[0]] = inner
	return json.Marshal(obj)
}
