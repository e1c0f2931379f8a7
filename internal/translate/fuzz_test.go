package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/dialect"
	"llmgate/internal/sse"
)

// The fuzz targets check the "never crash, never a 500 for bad input"
// rule: any request body is either translated or refused with a 400, and
// any upstream stream ends with a well-formed terminal event. Their seeds
// are the golden inputs, so plain `go test` runs them as regression tests.

// streamSeeds returns the data payloads of every golden SSE input in dir.
func streamSeeds(f *testing.F, dir string) {
	paths, _ := filepath.Glob(filepath.Join("testdata", dir, "*.in.sse"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		r := sse.NewReader(bytes.NewReader(b), 0)
		for {
			ev, err := r.Next()
			if err != nil {
				break
			}
			f.Add(ev.Name, append([]byte(nil), ev.Data...))
		}
	}
}

func requestSeeds(f *testing.F, dir string) {
	paths, _ := filepath.Glob(filepath.Join("testdata", dir, "*.in.json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// optionRequestSeeds adds the "request" member of every golden input in
// dir (inputs of the form {"options":..., "request":...}).
func optionRequestSeeds(f *testing.F, dir string) {
	paths, _ := filepath.Glob(filepath.Join("testdata", dir, "*.in.json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		var c struct{ Request json.RawMessage }
		if err := json.Unmarshal(b, &c); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(c.Request))
	}
}

// fuzzReasoning is the reasoning configuration the request fuzzers also
// translate with, so option paths are exercised on every input.
var fuzzReasoning = dialect.ChatOptions{SystemInPlace: true, Reasoning: dialect.ReasoningOptions{Switch: "chat_template_kwargs.enable_thinking",
	Effort: "reasoning_effort", Budget: "thinking_budget", DropHistory: true}}

func requireRefusal(t *testing.T, err error) {
	t.Helper()
	var e *apierror.Error
	if err != nil && (!errors.As(err, &e) || e.Status != 400 || e.Message == "") {
		t.Fatalf("error %v is not a 400 with a message", err)
	}
}

func FuzzChatToAnthropicStream(f *testing.F) {
	streamSeeds(f, "stream_chat_to_anthropic")
	f.Fuzz(func(t *testing.T, _ string, data []byte) {
		tr := NewChatToAnthropicStream("m", 1)
		var err error
		for range 2 { // the same chunk twice exercises continuation paths
			if _, err = tr.Feed(data); err != nil {
				break
			}
		}
		evs := tr.Finish(err)
		if last := evs[len(evs)-1].Name; last != anthropic.EventMessageStop && last != anthropic.EventError {
			t.Fatalf("stream ended with %s", last)
		}
	})
}

func FuzzChatToResponsesStream(f *testing.F) {
	streamSeeds(f, "stream_chat_to_responses")
	f.Fuzz(func(t *testing.T, _ string, data []byte) {
		tr := NewChatToResponsesStream(nil)
		_, err := tr.Feed(data)
		evs := tr.Finish(err)
		switch last := evs[len(evs)-1].Name; last {
		case "response.completed", "response.incomplete", "response.failed":
		default:
			t.Fatalf("stream ended with %s", last)
		}
	})
}

func FuzzAnthropicToChatStream(f *testing.F) {
	streamSeeds(f, "stream_anthropic_to_chat")
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		tr := NewAnthropicToChatStream("m", true)
		_, err := tr.Feed(name, data)
		evs := tr.Finish(err)
		if len(evs) != 1 || !(bytes.Equal(evs[0].Data, Done) || bytes.HasPrefix(evs[0].Data, []byte(`{"error":`))) {
			t.Fatalf("Finish = %q", evs)
		}
	})
}

func FuzzAnthropicToChat(f *testing.F) {
	requestSeeds(f, "anthropic_to_chat")
	optionRequestSeeds(f, "anthropic_to_chat_options")
	// Shapes Claude Code and the beta API send: system messages with
	// clear_at and a per-turn effort, blocks of unmodelled types, beta
	// fields at every level.
	f.Add([]byte(`{"model":"m","max_tokens":9,"thinking":{"type":"adaptive"},"output_config":{"effort":"max","format":{"type":"json_schema","schema":{}}},"messages":[{"role":"system","content":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"clear_at":"next_user_message","output_config":{"effort":"low"}},{"role":"user","content":[{"type":"search_result","source":"u","title":"t","content":[]}]}]}`))
	f.Add([]byte(`{"model":"m","max_tokens":9,"messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}},{"type":"thinking","thinking":"t","signature":""}]},{"role":"system","content":""}],"context_management":{},"mcp_servers":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req anthropic.MessagesRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		_, err := AnthropicToChat(&req)
		requireRefusal(t, err)
		_, err = AnthropicToChatWith(&req, fuzzReasoning)
		requireRefusal(t, err)
		_ = AnthropicIgnoredFields(&req, fuzzReasoning)
		_ = EstimateAnthropicInputTokens(&req)
		// What the gateway re-encodes for an anthropic backend must decode
		// to the same request.
		out, err := json.Marshal(&req)
		if err != nil {
			t.Fatalf("re-encoding a decoded request: %v", err)
		}
		var again anthropic.MessagesRequest
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("re-encoded request does not decode: %v\n%s", err, out)
		}
		if out2, _ := json.Marshal(&again); !bytes.Equal(out, out2) {
			t.Fatalf("re-encoding is not stable:\n%s\n%s", out, out2)
		}
	})
}

func FuzzChatToAnthropicRequest(f *testing.F) {
	requestSeeds(f, "chat_to_anthropic_request")
	f.Fuzz(func(t *testing.T, body []byte) {
		var req openai.ChatCompletionRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		_, err := ChatToAnthropicRequest(&req)
		requireRefusal(t, err)
	})
}

func FuzzResponsesToChat(f *testing.F) {
	requestSeeds(f, "responses_to_chat")
	optionRequestSeeds(f, "responses_to_chat_options")
	f.Fuzz(func(t *testing.T, body []byte) {
		var req openai.ResponsesRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		_, err := ResponsesToChat(&req)
		requireRefusal(t, err)
		_, err = ResponsesToChatWith(&req, fuzzReasoning)
		requireRefusal(t, err)
	})
}
