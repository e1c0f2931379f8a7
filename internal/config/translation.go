package config

import (
	"fmt"
	"strings"

	"llmgate/internal/dialect"
)

// Reasoning tells how a model takes a client's thinking request (Anthropic
// thinking / output_config.effort, Responses reasoning.effort) on a chat
// backend: a preset named after vLLM's --reasoning-parser, or the request
// fields themselves. Without it a model gets no extra parameters.
type Reasoning struct {
	Preset      string `yaml:"preset"`       // qwen3, glm45, deepseek_v3, granite, gpt_oss
	Switch      string `yaml:"switch"`       // e.g. chat_template_kwargs.enable_thinking
	Effort      string `yaml:"effort"`       // e.g. reasoning_effort
	Budget      string `yaml:"budget"`       // a field taking a token budget
	DropHistory bool   `yaml:"drop_history"` // leave earlier turns' reasoning out
}

// Values of system_messages.
const (
	SystemMessagesMerge   = "merge"
	SystemMessagesInPlace = "in_place"
)

// Values of anthropic_billing_header.
const (
	BillingHeaderRemove = "remove"
	BillingHeaderKeep   = "keep"
)

// ChatOptions are the options a model's translated requests are built
// with: its reasoning mapping, where system messages go, and whether
// Claude Code's billing line stays.
func (m *Model) ChatOptions() (dialect.ChatOptions, error) {
	var o dialect.ChatOptions
	switch m.SystemMessages {
	case "", SystemMessagesMerge:
	case SystemMessagesInPlace:
		o.SystemInPlace = true
	default:
		return o, fmt.Errorf("system_messages must be %s or %s, not %q", SystemMessagesMerge, SystemMessagesInPlace, m.SystemMessages)
	}
	switch m.AnthropicBillingHeader {
	case "", BillingHeaderRemove:
	case BillingHeaderKeep:
		o.KeepBillingHeader = true
	default:
		return o, fmt.Errorf("anthropic_billing_header must be %s or %s, not %q", BillingHeaderRemove, BillingHeaderKeep, m.AnthropicBillingHeader)
	}
	r := m.Reasoning
	if r == nil {
		return o, nil
	}
	if r.Preset != "" {
		p, ok := dialect.ReasoningPreset(r.Preset)
		if !ok {
			return o, fmt.Errorf("reasoning.preset %q is not known: use one of %s, or set switch/effort/budget", r.Preset, strings.Join(dialect.ReasoningPresetNames(), ", "))
		}
		o.Reasoning = p
	}
	for _, f := range []struct {
		v   string
		dst *string
	}{{r.Switch, &o.Reasoning.Switch}, {r.Effort, &o.Reasoning.Effort}, {r.Budget, &o.Reasoning.Budget}} {
		if f.v != "" {
			*f.dst = f.v // explicit paths override the preset's
		}
	}
	o.Reasoning.DropHistory = o.Reasoning.DropHistory || r.DropHistory
	if err := o.Reasoning.Validate(); err != nil {
		return o, fmt.Errorf("reasoning: %w", err)
	}
	return o, nil
}
