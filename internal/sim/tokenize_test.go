package sim

import (
	"encoding/json"
	"slices"
	"testing"
)

// POST /tokenize counts what the same chat or completion request reports
// as prompt_tokens, as vLLM's does.
func TestTokenize_CountIsThePromptTokensOfTheSameRequest(t *testing.T) {
	mc := fastModel()
	_, url := startServer(t, Config{Models: []ModelConfig{mc}, Seed: 1, APIKey: "k"})
	auth := []string{"Authorization", "Bearer k"}
	type tok struct {
		Count       int   `json:"count"`
		MaxModelLen int   `json:"max_model_len"`
		Tokens      []int `json:"tokens"`
	}
	tokenize := func(body string) (int, tok) {
		t.Helper()
		st, _, b := post(t, url+"/tokenize", body) // no key: outside /v1, as in vLLM
		var out tok
		if st == 200 {
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
		}
		return st, out
	}
	promptTokens := func(path, body string) int {
		t.Helper()
		st, _, b := post(t, url+path, body, auth...)
		var out struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if st != 200 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("%s: %d %s", path, st, b)
		}
		return out.Usage.PromptTokens
	}

	msgs := `"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Count the tokens of this sentence, please."}]`
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	want := promptTokens("/v1/chat/completions", `{"model":"`+mc.Name+`","max_tokens":1,`+msgs+`,`+tools+`}`)
	st, got := tokenize(`{"model":"` + mc.Name + `",` + msgs + `,` + tools + `}`)
	if st != 200 || got.Count != want || len(got.Tokens) != want || got.MaxModelLen != mc.MaxModelLen {
		t.Fatalf("chat: status %d, count %d (%d ids), max_model_len %d; want count %d (prompt_tokens), max_model_len %d",
			st, got.Count, len(got.Tokens), got.MaxModelLen, want, mc.MaxModelLen)
	}
	if _, noGen := tokenize(`{"model":"` + mc.Name + `","add_generation_prompt":false,` + msgs + `,` + tools + `}`); noGen.Count != want-chatGenerationPrompt {
		t.Fatalf("without the generation prompt: count %d, want %d", noGen.Count, want-chatGenerationPrompt)
	}

	prompt := `"prompt":"The quick brown fox jumps over the lazy dog"`
	want = promptTokens("/v1/completions", `{"model":"`+mc.Name+`","max_tokens":1,`+prompt+`}`)
	if _, got = tokenize(`{"model":"` + mc.Name + `",` + prompt + `}`); got.Count != want {
		t.Fatalf("completion prompt: count %d, want %d", got.Count, want)
	}
	if _, again := tokenize(`{"model":"` + mc.Name + `",` + prompt + `}`); !slices.Equal(again.Tokens, got.Tokens) {
		t.Fatal("the same text got different token ids")
	}
	if st, empty := tokenize(`{"model":"` + mc.Name + `","prompt":""}`); st != 200 || empty.Count != 0 || empty.Tokens == nil {
		t.Fatalf("empty prompt: status %d, %+v; want 200 with count 0 and tokens []", st, empty)
	}
	if st, _ := tokenize(`{"model":"nope","prompt":"x"}`); st != 404 {
		t.Fatalf("unknown model: status %d, want 404", st)
	}
	if st, _ := tokenize(`{"model":"` + mc.Name + `","prompt":"x",` + msgs + `}`); st != 400 {
		t.Fatalf("prompt and messages: status %d, want 400", st)
	}
}
