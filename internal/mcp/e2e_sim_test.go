package mcpserver

import (
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"llmgate/internal/sim"
)

// TestE2E_AgainstTheSimulator runs "llmgate mcp" against llmgate's own
// vLLM simulator, whose responses and errors reproduce vLLM field for
// field: the tools must read its streams (usage chunk included) and
// explain its error bodies, not only those of the hand-written fake.
func TestE2E_AgainstTheSimulator(t *testing.T) {
	var models []sim.ModelConfig
	for _, name := range []string{"qwen2.5-7b-instruct", "qwen3-32b"} {
		mc, _ := sim.PresetFor(name)
		// Faster than the real preset so the test stays short; the timing
		// model is the simulator's concern, not this test's.
		mc.PrefillBase, mc.PrefillPerToken = 2*time.Millisecond, 10*time.Microsecond
		mc.DecodeBase, mc.DecodePerSeq = time.Millisecond, 10*time.Microsecond
		models = append(models, mc)
	}
	s, err := sim.New(sim.Config{Models: models, APIKey: "sk-sim", Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })

	cs := startMCP(t, []string{"LLMGATE_BASE_URL=" + srv.URL + "/v1", "LLMGATE_API_KEY=sk-sim"}).ClientSession

	var lm ListModelsOutput
	structured(t, callTool(t, cs, "list_models", nil), &lm)
	var ids []string
	for _, m := range lm.Models {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"qwen2.5-7b-instruct", "qwen3-32b"}) {
		t.Fatalf("list_models = %v", ids)
	}

	res := callTool(t, cs, "compare", map[string]any{"models": []string{"qwen2.5-7b-instruct", "qwen3-32b"}, "prompt": "Name three primes.", "max_tokens": 12})
	if res.IsError {
		t.Fatal(resultText(res))
	}
	t.Logf("compare as the agent reads it:\n%s", resultText(res))
	var out CompareOutput
	structured(t, res, &out)
	for _, a := range out.Results {
		if a.Error != "" || a.Answer == "" || a.TokensEstimated || a.CompletionTokens < 1 || a.CompletionTokens > 12 || a.PromptTokens < 1 {
			t.Errorf("%s: %+v", a.Model, a)
		}
		if a.TTFTms == nil || *a.TTFTms <= 0 || *a.TTFTms > a.LatencyMs {
			t.Errorf("%s: TTFT %v, latency %v", a.Model, a.TTFTms, a.LatencyMs)
		}
	}

	res = callTool(t, cs, "chat", map[string]any{"model": "llama-70b", "prompt": "hi"})
	wantToolError(t, res, `model "llama-70b" is not served`, "llama-70b", "list_models")
	t.Logf("unknown model:\n%s", resultText(res))

	bad := startMCP(t, []string{"LLMGATE_BASE_URL=" + srv.URL, "LLMGATE_API_KEY=sk-wrong", "LLMGATE_MODEL=qwen3-32b"}).ClientSession
	wantToolError(t, callTool(t, bad, "chat", map[string]any{"prompt": "hi"}), "the API key was rejected (401: Unauthorized)", "LLMGATE_API_KEY")
}
