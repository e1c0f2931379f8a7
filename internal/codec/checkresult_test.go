package codec

import (
	"errors"
	"strings"
	"testing"

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
			u, err := checkResult([]byte(tc.body), tc.ep, "vllm")
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
		})
	}
}
