package dialect

import "testing"

func TestValid_KnowsOnlyTheTwoDialects(t *testing.T) {
	for _, tc := range []struct {
		d    Dialect
		want bool
	}{
		{OpenAI, true},
		{Anthropic, true},
		{"", false}, // the default is config's to apply
		{"Anthropic", false},
		{"gemini", false},
	} {
		if got := tc.d.Valid(); got != tc.want {
			t.Errorf("Dialect(%q).Valid() = %v, want %v", tc.d, got, tc.want)
		}
	}
}
