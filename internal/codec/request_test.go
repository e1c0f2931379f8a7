package codec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"llmgate/internal/apierror"
	"llmgate/internal/dialect"
)

// TestDecode_RefusesEveryOtherSpellingOfADecisionField: a second member,
// or a spelling some JSON decoder maps onto the field (Go's encoding/json
// folds case and the Kelvin sign / long s; escapes decode to the same key),
// would let a backend read another value than the gateway checked.
func TestDecode_RefusesEveryOtherSpellingOfADecisionField(t *testing.T) {
	cases := []struct {
		name, body, field, code string
	}{
		{"model twice", `{"model":"alias","messages":[],"model":"other"}`, "model", "duplicate_field"},
		{"model upper case", `{"Model":"other","messages":[]}`, "model", "noncanonical_field"},
		{"model twice, other case", `{"model":"alias","MODEL":"other"}`, "model", "duplicate_field"},
		{"model escaped", `{"mod\u0065l":"other"}`, "model", "noncanonical_field"},
		{"escaped copy after the real one", `{"model":"alias","mod\u0065l":"other"}`, "model", "duplicate_field"},
		{"stream with a long s", `{"model":"a","ſtream":true}`, "stream", "noncanonical_field"},
		{"max_tokens with a Kelvin sign", `{"model":"a","max_to\u212aens":5000}`, "max_tokens", "noncanonical_field"},
		{"max_completion_tokens twice", `{"model":"a","max_completion_tokens":1,"max_completion_tokens":2000}`, "max_completion_tokens", "duplicate_field"},
		{"stream_options twice", `{"model":"a","stream":true,"stream_options":{},"stream_options":{"include_usage":true}}`, "stream_options", "duplicate_field"},
		{"n twice", `{"model":"a","n":1,"n":8}`, "n", "duplicate_field"},
		{"tools twice", `{"model":"a","tools":[],"tools":[{"type":"function"}]}`, "tools", "duplicate_field"},
	}
	for _, d := range []Dialect{Chat, Completions, Embeddings, Rerank, Responses, Messages, CountTokens} {
		for _, tc := range cases {
			_, err := Decode(d, []byte(tc.body))
			var e *apierror.Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != tc.code || e.Param != tc.field || !strings.Contains(e.Message, `"`+tc.field+`"`) {
				t.Errorf("%s, %s: got %v, want a 400 %s naming %q", d.Name(), tc.name, err, tc.code, tc.field)
			}
		}
	}
}

func TestDecode_UnknownFieldsPassThroughUntouched(t *testing.T) {
	body := `{"model":"alias","top_k":20,"guided_json":{"type":"object"},"regex":"[a-z]+","Top_K":3,"messages":[{"role":"user","content":"hi"}],"stream":true}`
	r, err := Decode(Chat, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Outbound(Target{Dialect: dialect.OpenAI, UpstreamModel: "Qwen/Qwen3-32B"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out.Body, &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"top_k": `20`, "guided_json": `{"type":"object"}`, "regex": `"[a-z]+"`, "Top_K": `3`,
		"model": `"Qwen/Qwen3-32B"`, "stream_options": `{"include_usage":true}`} {
		if string(got[k]) != want {
			t.Errorf("%s = %s, want %s", k, got[k], want)
		}
	}
	// Everything but the patched fields is the client's own bytes.
	if !strings.Contains(string(out.Body), `"top_k":20,"guided_json":{"type":"object"},"regex":"[a-z]+","Top_K":3,"messages":[{"role":"user","content":"hi"}],"stream":true}`) {
		t.Errorf("body not passed through byte for byte: %s", out.Body)
	}
}

func TestDecode_DecisionFieldTypes(t *testing.T) {
	for _, tc := range []struct{ body, code string }{
		{`{"model":1}`, "invalid_model"},
		{`{"model":"a","stream":"true"}`, "invalid_stream"},
		{`{"model":"a","stream":1}`, "invalid_stream"},
		{`{"model":"a","max_tokens":"2000"}`, "invalid_max_tokens"},
		{`{"model":"a","max_tokens":10.5}`, "invalid_max_tokens"},
		{`{"model":"a","max_tokens":-5}`, "invalid_max_tokens"},
		{`{"model":"a","max_completion_tokens":1e12}`, "invalid_max_completion_tokens"},
		{`{"model":"a","n":0}`, "invalid_n"},
		{`{"model":"a","stream_options":[]}`, "invalid_stream_options"},
		{`[1,2]`, "invalid_body"},
		{`{"model":"a",}`, "invalid_json"},
		{`   `, "empty_body"},
	} {
		_, err := Decode(Chat, []byte(tc.body))
		var e *apierror.Error
		if !errors.As(err, &e) || e.Status != 400 || e.Code != tc.code {
			t.Errorf("%s: got %v, want a 400 %s", tc.body, err, tc.code)
		}
	}
	// Whole numbers written as floats are what Python validators accept.
	r, err := Decode(Chat, []byte(`{"model":"a","max_tokens":1e3,"n":2.0}`))
	if err != nil || r.OutputLimit != 1000 || r.Choices != 2 {
		t.Fatalf("1e3 / 2.0: %+v %v", r, err)
	}
}

// TestMaxOutput_LargestAliasTheBackendMayHonour: vLLM takes
// max_completion_tokens over max_tokens, others the reverse, llama.cpp
// n_predict, TGI/SGLang max_new_tokens: the bound is the largest, in any
// order, times the choices.
func TestMaxOutput_LargestAliasTheBackendMayHonour(t *testing.T) {
	openaiOnly := []dialect.Dialect{dialect.OpenAI}
	for _, tc := range []struct {
		body string
		want int64
	}{
		{`{"model":"a","max_completion_tokens":2000,"max_tokens":1}`, 2000},
		{`{"model":"a","max_tokens":1,"max_completion_tokens":2000}`, 2000},
		{`{"model":"a","max_tokens":2000,"max_completion_tokens":1}`, 2000},
		{`{"model":"a","max_tokens":1,"n_predict":3000}`, 3000},
		{`{"model":"a","max_new_tokens":4000,"max_tokens":1}`, 4000},
		{`{"model":"a","max_tokens":100,"n":4}`, 400},
		{`{"model":"a","max_tokens":100,"best_of":5,"n":2}`, 500},
		{`{"model":"a","max_tokens":null}`, DefaultOutputTokens},
		{`{"model":"a"}`, DefaultOutputTokens},
	} {
		r, err := Decode(Chat, []byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.MaxOutput(openaiOnly, 0); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.body, got, tc.want)
		}
	}
	// Without a limit, what the context leaves.
	r, _ := Decode(Chat, []byte(`{"model":"a","messages":[{"role":"user","content":"hello"}]}`))
	if got, want := r.MaxOutput(openaiOnly, 32768), 32768-r.PromptEstimate(); got != want {
		t.Errorf("context bound %d, want %d", got, want)
	}
	// An Anthropic backend gets the translation's max_tokens (with the
	// thinking budget that reasoning_effort adds).
	r, _ = Decode(Chat, []byte(`{"model":"a","max_tokens":100,"reasoning_effort":"high","messages":[{"role":"user","content":"hi"}]}`))
	both := []dialect.Dialect{dialect.OpenAI, dialect.Anthropic}
	ar := mustAnthropic(t, r)
	if got := r.MaxOutput(both, 0); got != int64(ar) || got <= 100 {
		t.Errorf("anthropic bound %d, want the translated max_tokens %d (> 100)", got, ar)
	}
	if r, _ := Decode(Embeddings, []byte(`{"model":"a","input":"x","max_tokens":5}`)); r.MaxOutput(openaiOnly, 0) != 0 {
		t.Error("embeddings generate nothing")
	}
}

func mustAnthropic(t *testing.T, r *Request) int {
	t.Helper()
	out, err := r.Outbound(Target{Dialect: dialect.Anthropic, UpstreamModel: "claude"})
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		MaxTokens int `json:"max_tokens"`
	}
	if err := json.Unmarshal(out.Body, &v); err != nil {
		t.Fatal(err)
	}
	return v.MaxTokens
}

func TestPatch_StreamOptionsEveryShape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"model":"a","stream":true}`, `{"stream_options":{"include_usage":true},"model":"b","stream":true}`},
		{`{"model":"a","stream":true,"stream_options":null}`, `{"model":"b","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"a","stream":true,"stream_options":{"continuous_usage_stats":true}}`, `{"model":"b","stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true}}`},
		{`{"model":"a","stream":true,"stream_options":{"include_usage":true}}`, `{"model":"b","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"model":"a","stream":false}`, `{"model":"b","stream":false}`},
	} {
		r, err := Decode(Chat, []byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(r.patch("b")); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}
