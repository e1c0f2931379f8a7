package codec

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
)

// checkResult decides, from a backend's 200 body, whether the client gets
// it or a 502 that quotes it, and reads the usage counts.
func TestCheckResult(t *testing.T) {
	cases := []struct {
		name, ep, body string
		code           string // apierror code, "" for accepted
		prompt, compl  int
		cached         int
		haveUsage      bool
	}{
		{"chat with usage", "choices", `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":11,"completion_tokens":9,"total_tokens":20}}`, "", 11, 9, 0, true},
		{"cached tokens", "choices", `{"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":9,"total_tokens":20,"prompt_tokens_details":{"cached_tokens":8}}}`, "", 11, 9, 8, true},
		{"usage null", "choices", `{"choices":[{"text":"x"}],"usage":null}`, "", 0, 0, 0, false},
		{"usage not integers", "choices", `{"choices":[{"text":"x"}],"usage":{"prompt_tokens":1.5}}`, "", 0, 0, 0, false},
		{"usage partial", "choices", `{"choices":[{"text":"x"}],"usage":{"prompt_tokens":7}}`, "", 7, 0, 0, true},
		{"embeddings", "data", `{"data":[{"embedding":[0.1]}],"usage":{"prompt_tokens":3,"total_tokens":3}}`, "", 3, 0, 0, true},
		{"not JSON", "choices", `<html>502 Bad Gateway</html>`, "bad_upstream_response", 0, 0, 0, false},
		{"truncated", "choices", `{"choices":[`, "bad_upstream_response", 0, 0, 0, false},
		{"not an object", "choices", `[1,2]`, "bad_upstream_response", 0, 0, 0, false},
		{"no choices", "choices", `{"id":"x","object":"chat.completion"}`, "bad_upstream_response", 0, 0, 0, false},
		{"choices null", "choices", `{"choices":null,"error":{"message":"boom"}}`, "bad_upstream_response", 0, 0, 0, false},
		{"error in 200", "choices", `{"error":{"message":"model overloaded","type":"server_error"}}`, "upstream_error_in_body", 0, 0, 0, false},
		{"error null is fine", "choices", `{"choices":[{"text":"x"}],"error":null}`, "", 0, 0, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u, est, err := checkResult([]byte(tc.body), tc.ep, "vllm")
			if tc.code == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
			} else {
				var ae *apierror.Error
				if !errors.As(err, &ae) || ae.Code != tc.code || ae.Status != 502 || !strings.Contains(ae.Message, `"vllm"`) {
					t.Fatalf("got %v, want a 502 %s naming the backend", err, tc.code)
				}
				return
			}
			if (u != nil) != tc.haveUsage || u != nil && (u.PromptTokens != tc.prompt || u.CompletionTokens != tc.compl) {
				t.Fatalf("usage %+v, want prompt %d completion %d (have %v)", u, tc.prompt, tc.compl, tc.haveUsage)
			}
			if tc.cached > 0 && (u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens != tc.cached) {
				t.Fatalf("cached tokens %+v, want %d", u.PromptTokensDetails, tc.cached)
			}
			if u == nil && strings.Contains(tc.body, `"text":"x"`) && generatedChars([]byte(tc.body)) == 0 {
				t.Fatal("no usage and no generated-text estimate")
			}
			if est {
				t.Fatal("usage said to be estimated")
			}
		})
	}
}

// llama.cpp answers n > 1 with the usage of the first choice alone (and
// its timings beside it): the others are estimated from their text, at
// the first choice's characters per token (4 a token when it has no
// text), and the count says so. Other servers count every choice and are
// taken at their word.
func TestCheckResult_LlamaCppSeveralChoicesAreAllCounted(t *testing.T) {
	const usage = `"usage":{"completion_tokens":4,"prompt_tokens":9,"total_tokens":13}`
	cases := []struct {
		name, body string
		compl      int
		est        bool
	}{
		// 16 characters in 4 tokens: 8 are 2, 3+9 are 3.
		{"llama.cpp chat n=3", `{"choices":[{"index":0,"message":{"role":"assistant","content":"abcdefghijklmnop"}},` +
			`{"index":1,"message":{"role":"assistant","content":"12345678"}},` +
			`{"index":2,"message":{"role":"assistant","reasoning_content":"xyz","content":"abcdefghi"}}],` + usage + `,"timings":{"predicted_n":4}}`,
			4 + 2 + 3, true},
		// 4 characters in 4 tokens: 12 are 12; 1 is at least 1.
		{"llama.cpp text n=3", `{"choices":[{"text":"abcd","index":0},{"text":"0123456789ab","index":1},{"text":"x","index":2}],` + usage + `,"timings":{"predicted_n":4}}`,
			4 + 12 + 1, true},
		// The first choice has no text: 4 characters a token.
		{"llama.cpp first empty", `{"choices":[{"text":"","index":0},{"text":"0123456789ab","index":1},{"text":"","index":2}],` + usage + `,"timings":{"predicted_n":4}}`,
			4 + 3, true},
		{"llama.cpp n=1", `{"choices":[{"text":"abcd","index":0}],` + usage + `,"timings":{"predicted_n":4}}`, 4, false},
		{"vLLM n=2 counts both", `{"choices":[{"text":"abcd","index":0},{"text":"0123456789ab","index":1}],` + usage + `}`, 4, false},
		{"timings null", `{"choices":[{"text":"abcd","index":0},{"text":"0123456789ab","index":1}],` + usage + `,"timings":null}`, 4, false},
	}
	for _, tc := range cases {
		u, est, err := checkResult([]byte(tc.body), "choices", "llama")
		if err != nil || u == nil {
			t.Fatalf("%s: %v %v", tc.name, u, err)
		}
		if u.CompletionTokens != tc.compl || est != tc.est || u.PromptTokens != 9 || u.TotalTokens != 9+tc.compl {
			t.Errorf("%s: usage %+v estimated %v, want %d output tokens (estimated %v), prompt 9", tc.name, u, est, tc.compl, tc.est)
		}
	}
}

// llama.cpp ends each choice of a stream with several (n > 1) with that
// choice's usage and timings: the decoder's usage is their sum, the
// prompt counted once. A server that sends one usage for all choices
// (vLLM, no timings) is taken as it is.
func TestOpenAIDecoder_LlamaCppPerChoiceUsageIsSummed(t *testing.T) {
	perChoice := func(compl int) []byte {
		return fmt.Appendf(nil, `{"choices":[],"usage":{"completion_tokens":%d,"prompt_tokens":9,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":8}},"timings":{"predicted_n":%d}}`,
			compl, 9+compl, compl)
	}
	content := []byte(`{"choices":[{"index":1,"delta":{"content":"hi"}}]}`)
	last := func(choices int, chunks ...[]byte) *openai.Usage {
		t.Helper()
		return lastUsage(t, &Request{Dialect: Chat, Choices: choices, Stream: true}, chunks...)
	}
	if u := last(3, content, perChoice(5), content, perChoice(7), perChoice(2)); u.CompletionTokens != 14 || u.PromptTokens != 9 || u.TotalTokens != 23 ||
		u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens != 8 {
		t.Errorf("three choices: %+v, want 14 output tokens (5+7+2), prompt 9 once, cached 8", u)
	}
	if u := last(2, perChoice(5), perChoice(7), perChoice(7)); u.CompletionTokens != 12 {
		t.Errorf("a report beyond the 2 choices asked for was added: %+v", u)
	}
	if u := last(2, content, perChoice(5)); u.CompletionTokens != 5 || u.PromptTokens != 9 || u.PromptTokensDetails.CachedTokens != 8 {
		t.Errorf("a stream of 2 choices cut after the first one's report: %+v, want its prompt (9, 8 cached) whole", u)
	}
	if u := last(1, perChoice(5)); u.CompletionTokens != 5 {
		t.Errorf("one choice: %+v", u)
	}
	vllm := []byte(`{"choices":[],"usage":{"completion_tokens":12,"prompt_tokens":9,"total_tokens":21}}`)
	if u := last(2, content, vllm); u.CompletionTokens != 12 {
		t.Errorf("vLLM's one usage for both choices: %+v", u)
	}
}

// A completions prompt list: llama.cpp generates for each prompt (n
// each) and reports each sequence's usage in a stream, the first
// sequence's alone in a whole answer. The ledger gets every prompt once
// and every sequence's output.
func TestOpenAIDecoder_LlamaCppPromptListIsAllCounted(t *testing.T) {
	report := func(prompt, compl int) []byte {
		return fmt.Appendf(nil, `{"choices":[{"text":"","index":0,"finish_reason":"length"}],"usage":{"completion_tokens":%d,"prompt_tokens":%d,"total_tokens":%d},"timings":{}}`,
			compl, prompt, prompt+compl)
	}
	stream := func(body string, chunks ...[]byte) *openai.Usage {
		t.Helper()
		r, err := Decode(Completions, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return lastUsage(t, r, chunks...)
	}
	two := `{"model":"m","prompt":["hello there","hi"],"max_tokens":4,"stream":true}`
	if u := stream(two, report(2, 4), report(1, 4)); u.PromptTokens != 3 || u.CompletionTokens != 8 {
		t.Errorf("two prompts: %+v, want prompt 2+1, output 4+4", u)
	}
	if u := stream(`{"model":"m","prompt":["hello there","hi"],"n":2,"max_tokens":4,"stream":true}`, report(2, 4)); u.PromptTokens != 2 {
		t.Errorf("two prompts, n=2, cut after the first report: %+v, want the first prompt's 2 whole", u)
	}
	twoByTwo := `{"model":"m","prompt":["hello there","hi"],"n":2,"max_tokens":4,"stream":true}`
	if u := stream(twoByTwo, report(2, 4), report(2, 4), report(1, 4), report(1, 4)); u.PromptTokens != 3 || u.CompletionTokens != 16 {
		t.Errorf("two prompts, n=2: %+v, want prompt 2+1 (each once), output 4 x 4", u)
	}

	// The whole answer: the first prompt's count (2 tokens for 11
	// characters) sizes the others: "hi" and "abcdefghijklmnopqrstuv" (22
	// characters) are 1 and 4; token ids count one each.
	body := `{"model":"m","prompt":["hello there","hi","abcdefghijklmnopqrstuv"],"max_tokens":4}`
	ids := `{"model":"m","prompt":[[1,2],[3,4,5]],"max_tokens":4}`
	answer := func(n int) []byte {
		b := []byte(`{"choices":[`)
		for i := range n {
			if i > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `{"text":"abcd","index":%d}`, i)
		}
		return append(b, `],"usage":{"completion_tokens":4,"prompt_tokens":2,"total_tokens":6},"timings":{}}`...)
	}
	for _, tc := range []struct {
		body            string
		choices, prompt int
	}{{body, 3, 2 + 1 + 4}, {ids, 2, 2 + 3}} {
		r, err := Decode(Completions, []byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := NewDecoder(r, Target{Backend: "llama"}, false).Body(answer(tc.choices))
		if err != nil {
			t.Fatal(err)
		}
		u := evs[0].Usage
		if u.PromptTokens != tc.prompt || u.CompletionTokens != 4*tc.choices || !evs[0].UsageEstimated {
			t.Errorf("%s: %+v (estimated %v), want prompt %d, output %d, estimated", tc.body, u, evs[0].UsageEstimated, tc.prompt, 4*tc.choices)
		}
	}
}

// lastUsage feeds a llama.cpp stream's chunks to the decoder of r and
// returns the last usage it reported.
func lastUsage(t *testing.T, r *Request, chunks ...[]byte) *openai.Usage {
	t.Helper()
	d := NewDecoder(r, Target{Backend: "llama"}, true)
	var u *openai.Usage
	for _, c := range chunks {
		evs, err := d.Event(nil, "", c)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Usage != nil {
				u = ev.Usage
			}
		}
	}
	return u
}
