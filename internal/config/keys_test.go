package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestYamlKeys_ReadsTagsInlinedStructsAndSkipsTheRest(t *testing.T) {
	type inner struct {
		Deep string `yaml:"deep"`
	}
	type block struct {
		Tagged   int              `yaml:"tagged"`
		WithOpts bool             `yaml:"with_opts,omitempty"`
		inner    `yaml:",inline"` // unexported: yaml.v3 does not see it either
		Inlined  inner            `yaml:",inline"`
		Untagged string           // yaml.v3 lowercases the field name
		Skipped  string           `yaml:"-"`
		hidden   string
	}
	_ = block{}.hidden
	got := yamlKeys(reflect.TypeFor[block]())
	want := []string{"tagged", "with_opts", "deep", "untagged"}
	if !slices.Equal(got, want) {
		t.Fatalf("yamlKeys = %q, want %q", got, want)
	}
}

func TestKnownKeys_AreTheTagsOfEachBlock(t *testing.T) {
	// A key is known because its field is tagged, with no list to update:
	// these were once added to a hand-written list by init functions.
	for _, tc := range []struct{ kind, key string }{
		{"", "metrics_key_labels"}, // inlined from Features
		{"", "engines"},
		{"model", "context_window"},
		{"model", "reasoning"},
		{"engine", "anthropic_billing_header"},
		{"reasoning", "drop_history"},
		{"circuit_breaker", "rate_limit_max"},
	} {
		if !slices.Contains(knownKeys[tc.kind], tc.key) {
			t.Errorf("knownKeys[%q] lacks %q: %q", tc.kind, tc.key, knownKeys[tc.kind])
		}
	}
	for kind, keys := range knownKeys {
		if slices.Contains(keys, "-") || slices.Contains(keys, "") || slices.Contains(keys, "name") && kind != "" {
			t.Errorf("knownKeys[%q] holds a key no file may set: %q", kind, keys)
		}
	}
	// And the file is checked against them, nested blocks included.
	for _, tc := range []struct{ src, want string }{
		{"acess_log: true\n", `x.yaml:1: acess_log: unknown key "acess_log"; did you mean "access_log"?`}, // inlined from Features
		{"backends:\n  b: {url: http://x:1}\nmodels:\n  m: {backend: b, reasoning: {drop_histroy: true}}\n",
			`x.yaml:4: models.m.reasoning.drop_histroy: unknown key "drop_histroy"; did you mean "drop_history"?`},
		{"routing:\n  circuit_breaker: {open_fr: 5s}\n", `x.yaml:2: routing.circuit_breaker.open_fr: unknown key "open_fr"; did you mean "open_for"?`},
	} {
		_, err := Load(strings.NewReader(tc.src), "x.yaml")
		if err == nil || err.Error() != tc.want {
			t.Errorf("Load(%q) = %v, want %s", tc.src, err, tc.want)
		}
	}
	if _, err := Load(strings.NewReader("metrics_key_labels: false\nbackends:\n  b: {url: http://x:1}\nmodels:\n  m: {backend: b, context_window: 4096, reasoning: {preset: qwen3}}\n"), "x.yaml"); err != nil {
		t.Errorf("a file using tagged keys: %v", err)
	}
}
