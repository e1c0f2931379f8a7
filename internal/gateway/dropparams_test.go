package gateway

import (
	"strings"
	"testing"

	"llmgate/internal/config"
)

// A backend's drop_params never reach it, from an OpenAI client
// (passthrough) or an Anthropic one (translated), and the answer and the
// ledger are as usual.
func TestGateway_DropParamsNeverReachTheBackend(t *testing.T) {
	e := startEnv(t, func(c *config.Config) { c.Backends["vllm"].DropParams = []string{"top_k", "guided_json"} })
	r := e.do("POST", "/v1/chat/completions", testMaster, chatBody("qwen", false, `,"top_k":20,"guided_json":{"type":"object"},"top_p":0.5`))
	if r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	body := e.up.lastBody()
	if _, ok := body["top_k"]; ok {
		t.Errorf("top_k reached the backend: %v", body)
	}
	if _, ok := body["guided_json"]; ok {
		t.Errorf("guided_json reached the backend: %v", body)
	}
	if body["top_p"] != 0.5 || body["model"] != "up-a" {
		t.Errorf("the rest of the request changed: %v", body)
	}
	r = e.do("POST", "/v1/messages", testMaster,
		`{"model":"qwen","max_tokens":20,"top_k":40,"messages":[{"role":"user","content":"hi"}]}`, "anthropic-version", "2023-06-01")
	if r.status != 200 || !strings.Contains(r.body, `"type":"message"`) {
		t.Fatalf("messages: %d %s", r.status, r.body)
	}
	if _, ok := e.up.lastBody()["top_k"]; ok {
		t.Errorf("top_k (translated from Messages) reached the backend: %v", e.up.lastBody())
	}
	if recs := e.records(2); recs[0].CompletionTokens == 0 {
		t.Errorf("no usage recorded: %+v", recs[0])
	}
}
