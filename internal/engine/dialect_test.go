package engine_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"llmgate/internal/engine"
)

// TestEngine_MessagesAndResponsesStartTheEngine: Claude Code (/v1/messages)
// and Codex (/v1/responses) asking for a model whose engine is stopped get
// the engine started, like chat clients do.
func TestEngine_MessagesAndResponsesStartTheEngine(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
`, simCmd("model-a", "--startup-delay", "300ms")))
	post := func(path, body string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodPost, e.base+path, strings.NewReader(body))
		req.Header.Set("x-api-key", master)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, body := post("/v1/messages", `{"model":"model-a","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`)
	var msg struct {
		Type  string `json:"type"`
		Model string `json:"model"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || code != http.StatusOK || msg.Type != "message" || msg.Model != "model-a" {
		t.Fatalf("messages: %d %s", code, body)
	}
	if st := e.status("sim-a"); st.State != engine.StateReady || st.Starts != 1 {
		t.Fatalf("engine after /v1/messages: %+v", st)
	}
	if err := e.g.Engines.Unload(t.Context(), "sim-a"); err != nil {
		t.Fatal(err)
	}
	e.waitState("sim-a", engine.StateStopped, 20e9)
	code, body = post("/v1/responses", `{"model":"model-a","max_output_tokens":4,"input":"hello"}`)
	if code != http.StatusOK || !strings.Contains(string(body), `"object":"response"`) {
		t.Fatalf("responses: %d %s", code, body)
	}
	if st := e.status("sim-a"); st.State != engine.StateReady || st.Starts != 2 {
		t.Fatalf("engine after /v1/responses: %+v", st)
	}
}

// count_tokens does not start a stopped engine (it answers with the
// estimate); once the engine runs, the count comes from its tokenizer.
func TestEngine_CountTokensDoesNotStartTheEngine(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
`, simCmd("model-a")))
	count := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/messages/count_tokens",
			strings.NewReader(`{"model":"model-a","messages":[{"role":"user","content":"How many tokens is this?"}]}`))
		req.Header.Set("x-api-key", master)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			InputTokens int `json:"input_tokens"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("count_tokens: %d %v", resp.StatusCode, err)
		}
		return out.InputTokens, resp.Header.Get("Llmgate-Token-Count")
	}
	if _, src := count(); src != "estimate" {
		t.Fatalf("count_tokens with the engine stopped: source %q, want estimate", src)
	}
	if st := e.status("sim-a"); st.State != engine.StateStopped || st.Starts != 0 {
		t.Fatalf("count_tokens started the engine: %+v", st)
	}
	if err := e.g.Engines.Load(t.Context(), "sim-a"); err != nil {
		t.Fatal(err)
	}
	if n, src := count(); src != "tokenizer" || n <= 0 {
		t.Fatalf("count_tokens with the engine ready: %d (%s), want the tokenizer's count", n, src)
	}
}
