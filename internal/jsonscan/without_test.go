package jsonscan

import (
	"encoding/json"
	"testing"
)

func TestWithout(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"one member", `{"a":1,"top_k":5,"b":[1,{"top_k":2}]}`, `{"a":1,"b":[1,{"top_k":2}]}`},
		{"every duplicate", `{"top_k":1,"a":"x","top_k":2}`, `{"a":"x"}`},
		{"escaped key", `{"top\u005fk":3,"a":true}`, `{"a":true}`},
		{"first and last, with spaces", "{ \"guided_json\" : {\"x\":1} ,\n \"a\": null , \"top_k\":0 }", `{"a": null}`},
		{"only member", `{"top_k":1}`, `{}`},
	} {
		got := string(Without([]byte(tc.in), []string{"top_k", "guided_json"}))
		if got != tc.want {
			t.Errorf("%s: Without(%s) = %s; want %s", tc.name, tc.in, got, tc.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("%s: result is not JSON: %s", tc.name, got)
		}
	}
	// Nothing to drop: the same bytes, not a copy.
	in := []byte(`{"a":1, "b":{"top_k":1}}`)
	if out := Without(in, []string{"top_k"}); &out[0] != &in[0] || string(out) != string(in) {
		t.Errorf("a body without the names was rewritten: %s", out)
	}
	for _, bad := range []string{`[1]`, `{"a":`, ``, `{"a" 1}`} {
		if out := Without([]byte(bad), []string{"a"}); string(out) != bad {
			t.Errorf("Without(%q) = %q; want it unchanged", bad, out)
		}
	}
}
