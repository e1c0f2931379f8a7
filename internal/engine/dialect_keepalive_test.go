package engine_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	asdk "github.com/anthropics/anthropic-sdk-go/v2"
	assestream "github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	ossestream "github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"

	"llmgate/internal/engine"
)

// TestEngine_MessagesAndResponsesStreamsGetKeepAliveWhileEngineStarts:
// Claude Code (/v1/messages) and Codex (/v1/responses) streaming from a
// stopped engine get the SSE headers and keep-alive comments while it
// starts, then their answer; the official SDK decoders read the whole body,
// comments included.
func TestEngine_MessagesAndResponsesStreamsGetKeepAliveWhileEngineStarts(t *testing.T) {
	e := start(t, fmt.Sprintf(`
  sim-a:
    cmd: %s
    models: [model-a]
`, simCmd("model-a", "--startup-delay", "600ms")))
	post := func(path, body string) (*http.Response, []byte) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.base+path, strings.NewReader(body))
		req.Header.Set("x-api-key", master)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	asSSE := func(b []byte) *http.Response {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(bytes.NewReader(b)), Request: httptest.NewRequest("POST", "http://gateway/", nil)}
	}
	checkStart := func(what string, resp *http.Response, body []byte) {
		t.Helper()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" ||
			!bytes.HasPrefix(body, []byte(": waiting for engine sim-a (")) {
			t.Fatalf("%s: %d %s, body starts %q", what, resp.StatusCode, resp.Header.Get("Content-Type"), body[:min(len(body), 80)])
		}
	}

	resp, body := post("/v1/messages", `{"model":"model-a","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"hello"}]}`)
	checkStart("messages", resp, body)
	s := assestream.NewStream[asdk.MessageStreamEventUnion](assestream.NewDecoder(asSSE(body)), nil)
	var msg asdk.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil || msg.Model != "model-a" || msg.StopReason == "" || len(msg.Content) == 0 {
		t.Fatalf("messages through the Anthropic SDK: %+v, %v\n%s", msg, err, body)
	}

	if err := e.g.Engines.Unload(t.Context(), "sim-a"); err != nil {
		t.Fatal(err)
	}
	e.waitState("sim-a", engine.StateStopped, 20*time.Second)
	resp, body = post("/v1/responses", `{"model":"model-a","max_output_tokens":4,"stream":true,"input":"hello"}`)
	checkStart("responses", resp, body)
	rs := ossestream.NewStream[responses.ResponseStreamEventUnion](ossestream.NewDecoder(asSSE(body)), nil)
	var last responses.ResponseStreamEventUnion
	for rs.Next() {
		last = rs.Current()
	}
	if err := rs.Err(); err != nil || (last.Type != "response.completed" && last.Type != "response.incomplete") {
		t.Fatalf("responses through openai-go: last %s, %v\n%s", last.Type, err, body)
	}
	if st := e.status("sim-a"); st.State != engine.StateReady || st.Starts != 2 {
		t.Fatalf("engine: %+v", st)
	}
}
