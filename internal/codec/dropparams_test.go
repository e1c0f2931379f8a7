package codec

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"llmgate/internal/config"
	"llmgate/internal/dialect"
)

// drop_params may never remove a field the gateway decided on: every
// decision field of the codec is in config's protected list.
func TestDropParams_DecisionFieldsAreProtected(t *testing.T) {
	for _, name := range fieldNames {
		if !slices.Contains(config.GatewayDecidedFields, name) {
			t.Errorf("decision field %q is missing from config.GatewayDecidedFields, so drop_params could remove it", name)
		}
	}
}

// A backend's drop_params leave its requests, passthrough or translated,
// and everything else arrives as before.
func TestOutbound_DropParams(t *testing.T) {
	drop := []string{"top_k", "guided_json"}
	cases := []struct {
		name    string
		d       Dialect
		body    string
		backend dialect.Dialect
	}{
		{"chat passthrough", Chat, `{"model":"m","stream":true,"top_k":20,"guided_json":{"type":"object"},"top_p":0.9,"messages":[{"role":"user","content":"hi"}]}`, dialect.OpenAI},
		{"completions passthrough", Completions, `{"model":"m","prompt":"hi","top_k":20,"max_tokens":5}`, dialect.OpenAI},
		{"messages translated to chat", Messages, `{"model":"m","max_tokens":50,"top_k":20,"top_p":0.9,"messages":[{"role":"user","content":"hi"}]}`, dialect.OpenAI},
		{"messages passthrough", Messages, `{"model":"m","max_tokens":50,"top_k":20,"top_p":0.9,"messages":[{"role":"user","content":"hi"}]}`, dialect.Anthropic},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Decode(tc.d, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Outbound(Target{Dialect: tc.backend, UpstreamModel: "up", DropParams: drop})
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(out.Body, &got); err != nil {
				t.Fatalf("body is not JSON: %v: %s", err, out.Body)
			}
			for _, name := range drop {
				if _, ok := got[name]; ok {
					t.Errorf("%s reached the backend: %s", name, out.Body)
				}
			}
			if string(got["model"]) != `"up"` {
				t.Errorf("model = %s; want the upstream name", got["model"])
			}
			if strings.Contains(tc.body, "top_p") && string(got["top_p"]) != "0.9" {
				t.Errorf("top_p = %s; other parameters must pass", got["top_p"])
			}
			// Without drop_params the same request keeps top_k.
			out, _ = r.Outbound(Target{Dialect: tc.backend, UpstreamModel: "up"})
			if !strings.Contains(string(out.Body), `"top_k":20`) {
				t.Errorf("top_k dropped without drop_params: %s", out.Body)
			}
		})
	}
}

// History with unsigned thinking blocks (from a chat backend) is re-encoded
// for an Anthropic backend; a fitted output limit still applies, whatever
// the spacing of the client's JSON.
func TestOutbound_UnsignedThinkingKeepsTheFittedLimit(t *testing.T) {
	body := `{"model":"m","max_tokens":30000,"messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"hm", "signature": ""},{"type":"text","text":"yes"}]},` +
		`{"role":"user","content":"go on"}]}`
	r, err := Decode(Messages, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.WithOutputLimit(1000).Outbound(Target{Dialect: dialect.Anthropic, UpstreamModel: "up"})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		MaxTokens int `json:"max_tokens"`
		Messages  []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(out.Body, &got); err != nil {
		t.Fatal(err)
	}
	if got.MaxTokens != 1000 {
		t.Errorf("max_tokens = %d; want the fitted 1000", got.MaxTokens)
	}
	if strings.Contains(string(got.Messages[1].Content), "thinking") {
		t.Errorf("the unsigned thinking block reached the Anthropic backend: %s", got.Messages[1].Content)
	}
}

// A chat request with reasoning_effort for an Anthropic backend: the
// thinking budget is added to max_tokens, and when fitting lowers
// max_tokens the budget stays below it (Anthropic rejects budget_tokens >=
// max_tokens), or thinking is turned off when there is no room for it.
func TestOutbound_FittedLimitKeepsTheThinkingBudgetBelowIt(t *testing.T) {
	for _, tc := range []struct {
		limit, wantBudget int
	}{{8000, 4000}, {1500, 1024}, {1000, 0}} {
		r, err := Decode(Chat, []byte(`{"model":"m","max_tokens":30000,"reasoning_effort":"high","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		f := r.WithOutputLimit(tc.limit)
		out, err := f.Outbound(Target{Dialect: dialect.Anthropic, UpstreamModel: "up"})
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			MaxTokens int `json:"max_tokens"`
			Thinking  *struct {
				BudgetTokens int `json:"budget_tokens"`
			} `json:"thinking"`
		}
		if err := json.Unmarshal(out.Body, &got); err != nil {
			t.Fatal(err)
		}
		budget := 0
		if got.Thinking != nil {
			budget = got.Thinking.BudgetTokens
		}
		if got.MaxTokens != tc.limit || budget != tc.wantBudget {
			t.Errorf("limit %d: max_tokens %d, budget %d; want %d, %d (%s)", tc.limit, got.MaxTokens, budget, tc.limit, tc.wantBudget, out.Body)
		}
		if m := f.MaxOutput([]dialect.Dialect{dialect.Anthropic}, 0); m != int64(tc.limit) {
			t.Errorf("limit %d: reserved %d output tokens; want the limit the backend gets", tc.limit, m)
		}
	}
}

// A count_tokens request the translation refuses says why, in the
// translation's words, as /v1/messages does.
func TestOutbound_CountTokensRefusalSaysWhy(t *testing.T) {
	r, err := Decode(CountTokens, []byte(`{"model":"m","messages":[{"role":"bogus","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Outbound(Target{Dialect: dialect.OpenAI, UpstreamModel: "up"})
	if err == nil || !strings.Contains(err.Error(), `messages[0].role`) {
		t.Fatalf("err = %v; want the role named", err)
	}
}
