package dialect

import (
	"strings"
	"testing"
)

func TestReasoningOptions_ValidateRejectsUnusablePaths(t *testing.T) {
	for _, tc := range []struct {
		opts ReasoningOptions
		want string // "" = valid
	}{
		{ReasoningOptions{}, ""},
		{ReasoningOptions{Switch: "chat_template_kwargs.enable_thinking", Effort: "reasoning_effort", Budget: "thinking_budget"}, ""},
		{ReasoningOptions{Switch: "chat_template_kwargs..x"}, "dots"},
		{ReasoningOptions{Effort: "max_tokens"}, "sets itself"},
		{ReasoningOptions{Effort: "reasoning_effort.level"}, "not an object"},
		{ReasoningOptions{Switch: "a.b", Budget: "a.b"}, "overlap"},
		{ReasoningOptions{Switch: "a", Effort: "a.b"}, "overlap"},
	} {
		err := tc.opts.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.opts, err, tc.want)
		}
	}
}

func TestReasoningPresets_AreValidAndNamed(t *testing.T) {
	names := ReasoningPresetNames()
	if strings.Join(names, ",") != "deepseek_v3,glm45,gpt_oss,granite,qwen3" {
		t.Errorf("presets = %v", names)
	}
	for _, n := range names {
		o, ok := ReasoningPreset(n)
		if !ok || o.IsZero() || o.Validate() != nil {
			t.Errorf("preset %s = %+v (ok %v, validate %v)", n, o, ok, o.Validate())
		}
	}
	if _, ok := ReasoningPreset("llama"); ok {
		t.Error("unknown preset found")
	}
}
