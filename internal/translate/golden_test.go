package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/dialect"
	"llmgate/internal/sse"
)

// Golden transcripts: testdata/<direction>/<case>.in.<ext> is the input
// (a client request, an upstream response, or an upstream SSE stream) and
// <case>.want.<ext> the expected translation. Run with -update to rewrite
// the want files after a deliberate change, then review the diff.
var update = flag.Bool("update", false, "rewrite golden want files")

// fixedNow pins generated timestamps so transcripts are stable.
var fixedNow = func() time.Time { return time.Unix(1_700_000_000, 0) }

// goldenDirs maps each direction to its translation of one input file.
var goldenDirs = map[string]func(t *testing.T, in []byte) []byte{
	"anthropic_to_chat": func(t *testing.T, in []byte) []byte {
		var req anthropic.MessagesRequest
		mustUnmarshal(t, in, &req)
		out, err := AnthropicToChat(&req)
		return jsonOrError(t, out, err)
	},
	// anthropic_to_chat_options inputs are {"options": goldenOptions,
	// "request": a Messages request}.
	"anthropic_to_chat_options": func(t *testing.T, in []byte) []byte {
		var c struct {
			Options goldenOptions
			Request anthropic.MessagesRequest
		}
		mustUnmarshal(t, in, &c)
		out, err := AnthropicToChatWith(&c.Request, c.Options.chat())
		return jsonOrError(t, out, err)
	},
	"responses_to_chat_options": func(t *testing.T, in []byte) []byte {
		var c struct {
			Options goldenOptions
			Request openai.ResponsesRequest
		}
		mustUnmarshal(t, in, &c)
		out, err := ResponsesToChatWith(&c.Request, c.Options.chat())
		return jsonOrError(t, out, err)
	},
	"chat_to_anthropic": func(t *testing.T, in []byte) []byte {
		msg, err := ChatBodyToAnthropic(in, "claude-via-gateway")
		return jsonOrError(t, msg, err)
	},
	"stream_chat_to_anthropic": func(t *testing.T, in []byte) []byte {
		tr := NewChatToAnthropicStream("claude-via-gateway", 42)
		return runChatStream(t, in, tr.Feed, tr.Finish)
	},
	"chat_to_anthropic_request": func(t *testing.T, in []byte) []byte {
		var req openai.ChatCompletionRequest
		mustUnmarshal(t, in, &req)
		out, err := ChatToAnthropicRequest(&req)
		return jsonOrError(t, out, err)
	},
	"anthropic_to_chat_response": func(t *testing.T, in []byte) []byte {
		var msg anthropic.Message
		mustUnmarshal(t, in, &msg)
		out := AnthropicToChatCompletion(&msg, "gpt-via-gateway")
		out.Created = fixedNow().Unix()
		return jsonOrError(t, out, nil)
	},
	"stream_anthropic_to_chat": func(t *testing.T, in []byte) []byte {
		includeUsage := bytes.Contains(in, []byte(": include_usage"))
		tr := NewAnthropicToChatStream("gpt-via-gateway", includeUsage)
		tr.now = fixedNow
		return runAnthropicStream(t, in, tr)
	},
	"responses_to_chat": func(t *testing.T, in []byte) []byte {
		var req openai.ResponsesRequest
		mustUnmarshal(t, in, &req)
		out, err := ResponsesToChat(&req)
		return jsonOrError(t, out, err)
	},
	"chat_to_responses": func(t *testing.T, in []byte) []byte {
		var resp openai.ChatCompletion
		mustUnmarshal(t, in, &resp)
		req := &openai.ResponsesRequest{Model: "codex-via-gateway", Instructions: "be brief", Store: ptr(false),
			Include: []string{"reasoning.encrypted_content"}}
		return jsonOrError(t, ChatToResponses(&resp, req), nil)
	},
	"stream_chat_to_responses": func(t *testing.T, in []byte) []byte {
		req := &openai.ResponsesRequest{Model: "codex-via-gateway", Store: ptr(false), Include: []string{"reasoning.encrypted_content"},
			Tools: []openai.ResponsesTool{{Type: "function", Name: "shell", Parameters: json.RawMessage(`{"type":"object"}`)}}}
		tr := NewChatToResponsesStream(req)
		tr.now = fixedNow
		return runChatStream(t, in, tr.Feed, tr.Finish)
	},
}

// goldenOptions is the JSON form of dialect.ChatOptions in golden inputs.
type goldenOptions struct {
	Switch, Effort, Budget     string
	DropHistory, SystemInPlace bool
}

func (o goldenOptions) chat() dialect.ChatOptions {
	return dialect.ChatOptions{SystemInPlace: o.SystemInPlace, Reasoning: dialect.ReasoningOptions{
		Switch: o.Switch, Effort: o.Effort, Budget: o.Budget, DropHistory: o.DropHistory}}
}

func TestGoldenTranscripts(t *testing.T) {
	for dir, translate := range goldenDirs {
		ins, _ := filepath.Glob(filepath.Join("testdata", dir, "*.in.*"))
		if len(ins) == 0 {
			t.Errorf("no golden inputs in testdata/%s", dir)
		}
		for _, inPath := range ins {
			name := strings.SplitN(filepath.Base(inPath), ".in.", 2)
			wantPath := filepath.Join("testdata", dir, name[0]+".want."+name[1])
			t.Run(dir+"/"+name[0], func(t *testing.T) {
				in, err := os.ReadFile(inPath)
				if err != nil {
					t.Fatal(err)
				}
				got := translate(t, in)
				if *update {
					if err := os.WriteFile(wantPath, got, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(wantPath)
				if err != nil {
					t.Fatalf("missing %s (run go test -update and review it): %v", wantPath, err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("translation of %s differs from %s\n--- got ---\n%s\n--- want ---\n%s", inPath, wantPath, got, want)
				}
			})
		}
	}
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode input: %v", err)
	}
}

// jsonOrError renders a translation result, or the error as the client
// would see it: status and the OpenAI-style fields.
func jsonOrError(t *testing.T, v any, err error) []byte {
	t.Helper()
	if err != nil {
		var e *apierror.Error
		if !errors.As(err, &e) {
			t.Fatalf("translation returned %T, want *apierror.Error: %v", err, err)
		}
		v = map[string]any{"status": e.Status, "kind": e.Kind, "param": e.Param, "message": e.Message}
	}
	b, mErr := json.MarshalIndent(v, "", "  ")
	if mErr != nil {
		t.Fatal(mErr)
	}
	return append(b, '\n')
}

// writeEvents renders events as SSE text.
func writeEvents(buf *bytes.Buffer, evs []Event) {
	w := sse.NewWriter(buf)
	for _, e := range evs {
		_ = w.WriteEvent(e.Name, e.Data)
	}
}

// runChatStream feeds an upstream chat SSE transcript. "[DONE]" ends it
// normally; a transcript without it was cut, which Finish sees as
// io.ErrUnexpectedEOF, as the gateway's reader reports it.
func runChatStream(t *testing.T, in []byte, feed func([]byte) ([]Event, error), finish func(error) []Event) []byte {
	var out bytes.Buffer
	r := sse.NewReader(bytes.NewReader(in), 0)
	for {
		ev, err := r.Next()
		if err == io.EOF {
			writeEvents(&out, finish(io.ErrUnexpectedEOF))
			return out.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Done() {
			writeEvents(&out, finish(nil))
			return out.Bytes()
		}
		evs, ferr := feed(ev.Data)
		writeEvents(&out, evs)
		if ferr != nil {
			writeEvents(&out, finish(ferr))
			return out.Bytes()
		}
	}
}

// runAnthropicStream feeds an upstream Anthropic SSE transcript and calls
// Finish(nil) at its end, as the gateway does at EOF; a transcript without
// message_stop was cut and Finish must report it.
func runAnthropicStream(t *testing.T, in []byte, tr *AnthropicToChatStream) []byte {
	var out bytes.Buffer
	r := sse.NewReader(bytes.NewReader(in), 0)
	for {
		ev, err := r.Next()
		if err == io.EOF {
			writeEvents(&out, tr.Finish(nil))
			return out.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
		evs, ferr := tr.Feed(ev.Name, ev.Data)
		writeEvents(&out, evs)
		if ferr != nil {
			writeEvents(&out, tr.Finish(ferr))
			return out.Bytes()
		}
	}
}

// translateStream returns all events of a translated stream, for tests that
// inspect events rather than compare text.
func translateStream(t *testing.T, dir, name string) []byte {
	t.Helper()
	in, err := os.ReadFile(filepath.Join("testdata", dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return goldenDirs[dir](t, in)
}
