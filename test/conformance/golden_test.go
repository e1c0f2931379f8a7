package conformance

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata/ from the live gateway")

// Golden transcripts record the exact bytes the LIVE gateway sends for
// streams whose shape matters most to clients: translated tool calls,
// streams cut mid-way and upstream errors after headers, in each
// translation direction. The translators have their own golden tests; these
// catch wiring mistakes between them (a usage chunk lost in the hub, an
// error written in the wrong dialect, a missing terminal event). Ids and
// timestamps are normalized. Regenerate with:
//
//	go test ./test/conformance -run TestGolden -update
func TestGolden_LiveGatewayTranscripts(t *testing.T) {
	e := newEnv(t)
	const anthropicBody = `{"model":%q,"max_tokens":64,"stream":true,"messages":[{"role":"user","content":"What is the weather in Paris?"}]%s}`
	const anthropicTools = `,"tools":[{"name":"get_weather","description":"Current weather for a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`
	const chatBody = `{"model":%q,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"What is the weather in Paris?"}]%s}`
	const chatTools = `,"tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	const responsesBody = `{"model":%q,"stream":true,"store":false,"input":"What is the weather in Paris?"%s}`
	const responsesTools = `,"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`
	cases := []struct {
		name, path, body string
	}{
		// Anthropic client, chat backend.
		{"messages_from_chat_backend_tool_call", "/v1/messages", fmt.Sprintf(anthropicBody, "oa-tool", anthropicTools)},
		{"messages_from_chat_backend_parallel_tool_calls", "/v1/messages", fmt.Sprintf(anthropicBody, "oa-tools2", anthropicTools)},
		{"messages_from_chat_backend_thinking", "/v1/messages", fmt.Sprintf(anthropicBody, "oa-reason", "")},
		{"messages_from_chat_backend_stream_cut", "/v1/messages", fmt.Sprintf(anthropicBody, "oa-cut", "")},
		{"messages_from_chat_backend_upstream_error", "/v1/messages", fmt.Sprintf(anthropicBody, "oa-errmid", "")},
		// Anthropic client, Anthropic backend (passthrough).
		{"messages_passthrough_stream_cut", "/v1/messages", fmt.Sprintf(anthropicBody, "an-cut", "")},
		// Chat client, Anthropic backend.
		{"chat_from_anthropic_backend_tool_call", "/v1/chat/completions", fmt.Sprintf(chatBody, "an-tool", chatTools)},
		{"chat_from_anthropic_backend_parallel_tool_calls", "/v1/chat/completions", fmt.Sprintf(chatBody, "an-tools2", chatTools)},
		{"chat_from_anthropic_backend_thinking", "/v1/chat/completions", fmt.Sprintf(chatBody, "an-reason", "")},
		{"chat_from_anthropic_backend_stream_cut", "/v1/chat/completions", fmt.Sprintf(chatBody, "an-cut", "")},
		{"chat_from_anthropic_backend_upstream_error", "/v1/chat/completions", fmt.Sprintf(chatBody, "an-errmid", "")},
		// Responses client, chat and Anthropic backends.
		{"responses_from_chat_backend_tool_call", "/v1/responses", fmt.Sprintf(responsesBody, "oa-tool", responsesTools)},
		{"responses_from_anthropic_backend_tool_call", "/v1/responses", fmt.Sprintf(responsesBody, "an-tool", responsesTools)},
		{"responses_from_chat_backend_stream_cut", "/v1/responses", fmt.Sprintf(responsesBody, "oa-cut", "")},
		{"responses_from_anthropic_backend_upstream_error", "/v1/responses", fmt.Sprintf(responsesBody, "an-errmid", "")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := e.transcript(t, tc.path, tc.body)
			file := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("live transcript differs from %s (run with -update if the change is intended)\n%s", file, lineDiff(string(want), got))
			}
		})
	}
}

// transcript posts body and renders the request, status, content type and
// the normalized response body.
func (e *env) transcript(t *testing.T, path, body string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, e.root+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s\n%s\n\n--- response\nstatus: %d\ncontent-type: %s\n\n%s", path, body, resp.StatusCode,
		resp.Header.Get("Content-Type"), normalize(string(raw)))
	return b.String()
}

var normalizers = []struct {
	re   *regexp.Regexp
	repl string
}{
	// Generated ids: keep the prefix, drop the random part.
	{regexp.MustCompile(`"(id|item_id|response_id)":"(msg|chatcmpl|resp|rs|fc|item|msg)([-_])[A-Za-z0-9_-]+"`), `"$1":"$2$3<id>"`},
	{regexp.MustCompile(`"(created|created_at|completed_at)":[0-9]+`), `"$1":0`},
	// Request ids quoted in error messages.
	{regexp.MustCompile(`(request[ _]id[":= ]+)[A-Za-z0-9_-]{8,}`), `$1<id>`},
}

func normalize(s string) string {
	for _, n := range normalizers {
		s = n.re.ReplaceAllString(s, n.repl)
	}
	return s
}

// lineDiff shows the first differing lines of two transcripts.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(wl), len(gl)) && shown < 8; i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			fmt.Fprintf(&b, "line %d\n  want: %s\n  got:  %s\n", i+1, w, g)
			shown++
		}
	}
	return b.String()
}
