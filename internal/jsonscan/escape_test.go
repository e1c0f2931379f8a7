package jsonscan

import (
	"encoding/json"
	"testing"
)

// AppendEscaped writes every ASCII character, and valid UTF-8 beyond it,
// as json.Marshal does.
func TestAppendEscaped_AsJSONMarshal(t *testing.T) {
	cases := []string{"", "plain", "é漢字🙂 ok", `{"path": "a\b"}`, "line\n\ttab\r\b\f", "<script>&amp;"}
	for c := 0; c < 0x80; c++ {
		cases = append(cases, "x"+string(rune(c))+"y")
	}
	for _, s := range cases {
		want, _ := json.Marshal(s)
		if got := `"` + string(AppendEscaped(nil, s)) + `"`; got != string(want) {
			t.Errorf("%q: AppendEscaped %s, json.Marshal %s", s, got, want)
		}
	}
}
