package translate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/dialect"
)

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
func ApplyReasoning(chat *openai.ChatCompletionRequest, r ReasoningRequest, opts dialect.ReasoningOptions) error {
	if err := applyReasoning(chat, r, opts); err != nil {
		return apierror.Newf(http.StatusInternalServerError, apierror.KindInternal, "bad_reasoning_config",
			"the gateway's reasoning settings for model %q are invalid (%v); the operator must fix the model's reasoning config", chat.Model, err)
	}
	return nil
}

func applyReasoning(chat *openai.ChatCompletionRequest, r ReasoningRequest, opts dialect.ReasoningOptions) error {
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
