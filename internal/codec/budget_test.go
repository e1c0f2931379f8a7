package codec

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"llmgate/internal/apierror"
	"llmgate/internal/dialect"
)

// TestDecode_ChoicesAboveTheMaximumAre400: n and best_of multiply the
// reservation; above MaxChoices (2^31 made it overflow to a negative cost
// that every budget admitted) the request is refused with a message that
// says what to do.
func TestDecode_ChoicesAboveTheMaximumAre400(t *testing.T) {
	for _, d := range []Dialect{Chat, Completions} {
		for _, tc := range []struct{ body, code string }{
			{`{"model":"a","max_tokens":30000,"n":2147483648}`, "invalid_n"},
			{`{"model":"a","max_tokens":30000,"n":129}`, "invalid_n"},
			{`{"model":"a","max_tokens":30000,"best_of":2147483648}`, "invalid_best_of"},
			{`{"model":"a","max_tokens":30000,"best_of":1e300}`, "invalid_best_of"},
			{`{"model":"a","max_tokens":30000,"n_cmpl":129}`, "invalid_n_cmpl"},
		} {
			_, err := Decode(d, []byte(tc.body))
			var e *apierror.Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != tc.code || !strings.Contains(e.Message, "128") ||
				!strings.Contains(e.Message, "send several requests") {
				t.Errorf("%s %s: got %v, want a 400 %s naming the maximum and what to do", d.Name(), tc.body, err, tc.code)
			}
		}
		r, err := Decode(d, []byte(`{"model":"a","max_tokens":10,"n":128}`))
		if err != nil || r.MaxOutput([]dialect.Dialect{dialect.OpenAI}, 0) != 1280 {
			t.Errorf("%s n=128: %v", d.Name(), err)
		}
		// llama.cpp reads n_cmpl as n: it reserves as n does.
		r, err = Decode(d, []byte(`{"model":"a","max_tokens":10,"n_cmpl":16}`))
		if err != nil || r.Choices != 16 || r.MaxOutput([]dialect.Dialect{dialect.OpenAI}, 0) != 160 {
			t.Errorf("%s n_cmpl=16: %v", d.Name(), err)
		}
	}
}

// TestMaxOutput_MessagesAndResponsesIgnoreChoices: those APIs have no n,
// and the translation never sends one, so the reservation is one choice;
// an Anthropic backend getting the client's own bytes gets no n either.
func TestMaxOutput_MessagesAndResponsesIgnoreChoices(t *testing.T) {
	both := []dialect.Dialect{dialect.OpenAI, dialect.Anthropic}
	msgs := `{"model":"a","max_tokens":30000,"n":2147483648,"best_of":7,"n_cmpl":3,"messages":[{"role":"user","content":"hi"}]}`
	r, err := Decode(Messages, []byte(msgs))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.MaxOutput(both, 0); got != 30000 {
		t.Errorf("messages: MaxOutput %d, want 30000", got)
	}
	out, err := r.Outbound(Target{Dialect: dialect.Anthropic, UpstreamModel: "claude"})
	if err != nil || strings.Contains(string(out.Body), `"n"`) || strings.Contains(string(out.Body), `"best_of"`) || strings.Contains(string(out.Body), `"n_cmpl"`) ||
		!strings.Contains(string(out.Body), `"max_tokens":30000`) {
		t.Errorf("messages passthrough body %s (%v): want it without n and best_of", out.Body, err)
	}
	out, err = r.Outbound(Target{Dialect: dialect.OpenAI, UpstreamModel: "qwen"})
	if err != nil || strings.Contains(string(out.Body), `"n"`) {
		t.Errorf("messages translated body %s (%v): want it without n", out.Body, err)
	}
	r, err = Decode(Responses, []byte(`{"model":"a","max_output_tokens":30000,"n":2147483648,"input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.MaxOutput(both, 0); got != 30000 {
		t.Errorf("responses: MaxOutput %d, want 30000", got)
	}
	out, err = r.Outbound(Target{Dialect: dialect.OpenAI, UpstreamModel: "qwen"})
	if err != nil || strings.Contains(string(out.Body), `"n"`) {
		t.Errorf("responses translated body %s (%v): want it without n", out.Body, err)
	}
}

// TestMaxOutput_PromptListReservesForEveryPrompt: an engine generates n
// completions for each prompt of a list (of strings or of token-id lists),
// so the output bound is the limit times n times the prompts.
func TestMaxOutput_PromptListReservesForEveryPrompt(t *testing.T) {
	hundred := `[` + strings.TrimSuffix(strings.Repeat(`"say hi",`, 100), ",") + `]`
	idLists := `[` + strings.TrimSuffix(strings.Repeat(`[1,2,3],`, 100), ",") + `]`
	for _, tc := range []struct {
		body string
		want int64
	}{
		{`{"model":"a","max_tokens":10,"prompt":"one"}`, 10},
		{`{"model":"a","max_tokens":10,"prompt":["one"]}`, 10},
		{`{"model":"a","max_tokens":10,"prompt":[1,2,3]}`, 10},
		{`{"model":"a","max_tokens":10,"prompt":` + hundred + `}`, 1000},
		{`{"model":"a","max_tokens":10,"n":3,"prompt":` + hundred + `}`, 3000},
		{`{"model":"a","max_tokens":10,"prompt":` + idLists + `}`, 1000},
		{`{"model":"a","max_tokens":10,"prompt":[]}`, 10},
	} {
		r, err := Decode(Completions, []byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.MaxOutput([]dialect.Dialect{dialect.OpenAI}, 0); got != tc.want {
			t.Errorf("%.80s: MaxOutput %d, want %d", tc.body, got, tc.want)
		}
	}
}

// TestPromptEstimate_TokenIDsCountOneTokenEach: a prompt or input given as
// token ids is counted by its ids ("1," is two bytes, one token), for every
// element of a list.
func TestPromptEstimate_TokenIDsCountOneTokenEach(t *testing.T) {
	ids := func(n int) string { return `[` + strings.TrimSuffix(strings.Repeat(`1,`, n), ",") + `]` }
	for _, tc := range []struct {
		d     Dialect
		field string
		value string
		ids   int64
	}{
		{Embeddings, "input", ids(1000), 1000},
		{Embeddings, "input", `[` + ids(1000) + `,` + ids(500) + `]`, 1500},
		{Completions, "prompt", `[` + strings.TrimSuffix(strings.Repeat(ids(100)+",", 100), ",") + `]`, 10000},
	} {
		body := fmt.Sprintf(`{"model":"a",%q:%s}`, tc.field, tc.value)
		r, err := Decode(tc.d, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.PromptEstimate(); got < tc.ids || got > tc.ids+int64(len(body))/8+8 {
			t.Errorf("%s %.60s: estimate %d, want about %d (one a token id)", tc.d.Name(), tc.value, got, tc.ids)
		}
	}
	r, _ := Decode(Embeddings, []byte(`{"model":"a","input":["`+strings.Repeat("x", 4000)+`","`+strings.Repeat("y", 4000)+`"]}`))
	if got := r.PromptEstimate(); got < 2000 {
		t.Errorf("two 4000-byte inputs: estimate %d, want at least 2000 (bytes/4 of both)", got)
	}
}

// TestMaxOutput_SaturatesAtTheOverflowEdge: limit × choices × prompts
// stops at the largest int64 instead of wrapping to a negative bound.
func TestMaxOutput_SaturatesAtTheOverflowEdge(t *testing.T) {
	r, err := Decode(Completions, []byte(`{"model":"a","max_tokens":2147483648,"n":128,"prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.MaxOutput(nil, 0); got != 1<<38 {
		t.Fatalf("2^31 × 128 = %d, want 2^38", got)
	}
	r.Prompts = 1 << 25 // 2^31 × 2^7 × 2^25 = 2^63: one more than an int64 holds
	if got := r.MaxOutput(nil, 0); got != math.MaxInt64 {
		t.Fatalf("2^63 saturates: got %d, want MaxInt64", got)
	}
}
