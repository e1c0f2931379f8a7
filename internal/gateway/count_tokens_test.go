package gateway

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/sim"
	"llmgate/internal/translate"
)

// count_tokens for an OpenAI-dialect backend comes from the backend's own
// tokenizer (vLLM's POST /tokenize) when it has one, so it equals the
// input_tokens the same Messages request then reports; a backend without
// one gets the estimate and is not asked again for a while.
func TestCountTokens_ExactFromTheBackendTokenizerElseEstimated(t *testing.T) {
	mc := sim.ModelConfig{Name: "sim-m", MaxNumSeqs: 4, MaxModelLen: 4096, PrefillBase: time.Millisecond,
		DecodeBase: time.Millisecond, MeanOutputTokens: 4, EmbeddingDim: 8}
	s, err := sim.New(sim.Config{Models: []sim.ModelConfig{mc}, Seed: 1, APIKey: "sk-sim"})
	if err != nil {
		t.Fatal(err)
	}
	simSrv := httptest.NewServer(s)
	t.Cleanup(func() { simSrv.Close(); s.Close() })
	plain := newFakeVLLM(t) // answers /tokenize with a chat completion: no tokenizer there

	f := startFaultGW(t, fmt.Sprintf(`
backends:
  local: {url: %s/v1, api_key: sk-sim}
  plain: {url: %s}
models:
  local-m: {backend: local, upstream_model: sim-m}
  plain-m: {backend: plain, upstream_model: up-a}
`, simSrv.URL, plain.URL))
	e := &env{t: t, g: f.g, base: f.g.URL()}

	body := func(model, extra string) string {
		return `{"model":"` + model + `"` + extra + `,"system":"You are a careful assistant.",` +
			`"tools":[{"name":"get_weather","description":"Weather for a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],` +
			`"messages":[{"role":"user","content":"What is the weather in Lisbon, and should I take an umbrella?"},` +
			`{"role":"assistant","content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Lisbon"}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"Rain, 14 C"}]}]}`
	}
	count := func(model string) (int, string) {
		t.Helper()
		r := e.do("POST", "/v1/messages/count_tokens", testMaster, body(model, ""))
		var out struct {
			InputTokens *int `json:"input_tokens"`
		}
		if r.status != 200 || json.Unmarshal([]byte(r.body), &out) != nil || out.InputTokens == nil {
			t.Fatalf("count_tokens %s: %d %s", model, r.status, r.body)
		}
		return *out.InputTokens, r.header.Get("Llmgate-Token-Count")
	}

	n, src := count("local-m")
	if src != "tokenizer" {
		t.Fatalf("count_tokens on a vLLM-like backend: source %q, want tokenizer", src)
	}
	r := e.do("POST", "/v1/messages", testMaster, body("local-m", `,"max_tokens":4`))
	var msg anthropic.Message
	if r.status != 200 || json.Unmarshal([]byte(r.body), &msg) != nil {
		t.Fatalf("messages: %d %s", r.status, r.body)
	}
	if msg.Usage.InputTokens != n {
		t.Fatalf("count_tokens said %d, the request then reported input_tokens %d", n, msg.Usage.InputTokens)
	}

	var req anthropic.MessagesRequest
	if err := json.Unmarshal([]byte(body("plain-m", "")), &req); err != nil {
		t.Fatal(err)
	}
	want := translate.EstimateAnthropicInputTokens(&req)
	for i := 0; i < 2; i++ {
		if n, src := count("plain-m"); src != "estimate" || n != want {
			t.Fatalf("count_tokens %d on a backend without a tokenizer: %d (%s), want the estimate %d", i+1, n, src, want)
		}
	}
	asked := 0
	plain.mu.Lock()
	for _, b := range plain.bodies {
		if _, ok := b["add_generation_prompt"]; ok {
			asked++
		}
	}
	plain.mu.Unlock()
	if asked != 1 {
		t.Fatalf("the backend without a tokenizer was asked %d times, want once (then remembered)", asked)
	}
}
