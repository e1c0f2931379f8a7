package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connectInMemory runs the tools in-process behind an in-memory MCP
// transport, for tool behaviour that needs no child process.
func connectInMemory(t *testing.T, cfg Config) *mcp.ClientSession {
	t.Helper()
	srv, err := New(cfg, "test", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return connectServer(t, srv, nil)
}

func connectServer(t *testing.T, srv *mcp.Server, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v (tool failures must be tool errors)", name, err)
	}
	return res
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// structured decodes a result's structured content into out.
func structured(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

func wantToolError(t *testing.T, res *mcp.CallToolResult, parts ...string) {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got %q", resultText(res))
	}
	mustContain(t, resultText(res), parts...)
}

func TestChatTool_UsesTheDefaultModelWhenNoneIsGiven(t *testing.T) {
	g := newFakeGateway(t)
	cs := connectInMemory(t, Config{BaseURL: g.URL, APIKey: g.key, Model: "model-b"})
	res := callTool(t, cs, "chat", map[string]any{"prompt": "ping"})
	if res.IsError {
		t.Fatal(resultText(res))
	}
	var a Answer
	structured(t, res, &a)
	if a.Model != "model-b" || a.Answer != answerFor("model-b", "ping") {
		t.Errorf("answer %+v", a)
	}
	mustContain(t, resultText(res), answerFor("model-b", "ping"), "model model-b", "tokens: 1 prompt + 3 completion", "TTFT ", "tokens/s", "finish stop")
}

func TestChatTool_WithoutModelOrDefaultNamesTheChoices(t *testing.T) {
	g := newFakeGateway(t)
	cs := connectInMemory(t, Config{BaseURL: g.URL, APIKey: g.key})
	// The schema requires "model" when there is no default; the SDK
	// enforces it, so send an empty name to reach the handler's own check.
	res := callTool(t, cs, "chat", map[string]any{"prompt": "ping", "model": " "})
	wantToolError(t, res, `no model given: pass "model" (available: model-a, model-b, model-c)`, "LLMGATE_MODEL")
}

func TestChatTool_SchemaRequiresModelOnlyWithoutDefault(t *testing.T) {
	g := newFakeGateway(t)
	for _, tc := range []struct {
		model    string
		required bool
	}{{"", true}, {"model-a", false}} {
		cs := connectInMemory(t, Config{BaseURL: g.URL, Model: tc.model})
		lt, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range lt.Tools {
			if tool.Name != "chat" {
				continue
			}
			b, _ := json.Marshal(tool.InputSchema)
			var s struct{ Required []string }
			_ = json.Unmarshal(b, &s)
			got := strings.Contains(strings.Join(s.Required, ","), "model")
			if got != tc.required {
				t.Errorf("default %q: model required = %v, want %v (schema %s)", tc.model, got, tc.required, b)
			}
		}
	}
}

func TestCompareTool_AsksTheModelsConcurrentlyAndKeepsTheirOrder(t *testing.T) {
	g := newFakeGateway(t)
	// Every request waits at the barrier until all three have arrived,
	// which only happens if compare sends them at the same time.
	g.barrier = newBarrier("model-c", "model-a", "model-b")
	cs := connectInMemory(t, Config{BaseURL: g.URL, APIKey: g.key})
	res := callTool(t, cs, "compare", map[string]any{"models": []string{"model-c", "model-a", "model-b"}, "prompt": "say hi", "max_tokens": 64})
	if res.IsError {
		t.Fatal(resultText(res))
	}
	var out CompareOutput
	structured(t, res, &out)
	if len(out.Results) != 3 {
		t.Fatalf("%d results", len(out.Results))
	}
	for i, m := range []string{"model-c", "model-a", "model-b"} {
		r := out.Results[i]
		if r.Model != m || r.Answer != answerFor(m, "say hi") || r.Error != "" || r.TTFTms == nil || r.CompletionTokens != 4 {
			t.Errorf("result %d = %+v, want %s's answer with figures", i, r, m)
		}
	}
	text := resultText(res)
	mustContain(t, text, "| model | prompt tokens | completion tokens | TTFT ms | latency ms | tokens/s | finish |",
		"| model-c | 2 | 4 |", "## model-a\n\n"+answerFor("model-a", "say hi"))
}

func TestCompareTool_ReportsAFailedModelInItsRowAndAnswersWithTheOthers(t *testing.T) {
	g := newFakeGateway(t)
	cs := connectInMemory(t, Config{BaseURL: g.URL, APIKey: g.key})
	res := callTool(t, cs, "compare", map[string]any{"models": []string{"model-a", "gpt-9"}, "prompt": "hi"})
	if res.IsError {
		t.Fatalf("one failure out of two must not fail the tool: %s", resultText(res))
	}
	var out CompareOutput
	structured(t, res, &out)
	if out.Results[0].Error != "" || !strings.Contains(out.Results[1].Error, `model "gpt-9" is not served`) {
		t.Errorf("results %+v", out.Results)
	}
	mustContain(t, resultText(res), "| gpt-9 | – | – | – | – | – | failed |", "## gpt-9\n\nFailed: model \"gpt-9\" is not served")
}

func TestCompareTool_AllModelsFailingIsAToolError(t *testing.T) {
	g := newFakeGateway(t)
	cs := connectInMemory(t, Config{BaseURL: g.URL, APIKey: "sk-wrong"})
	res := callTool(t, cs, "compare", map[string]any{"models": []string{"model-a", "model-b"}, "prompt": "hi"})
	wantToolError(t, res, "every model failed", "model-a: the API key was rejected", "model-b: the API key was rejected", "LLMGATE_API_KEY")
}

func TestCompareTool_NeedsTwoToFourModels(t *testing.T) {
	g := newFakeGateway(t)
	cs := connectInMemory(t, Config{BaseURL: g.URL, APIKey: g.key})
	wantToolError(t, callTool(t, cs, "compare", map[string]any{"models": []string{"model-a"}, "prompt": "hi"}), "minItems")
	five := []string{"a", "b", "c", "d", "e"}
	wantToolError(t, callTool(t, cs, "compare", map[string]any{"models": five, "prompt": "hi"}), "maxItems")
	wantToolError(t, callTool(t, cs, "compare", map[string]any{"models": []string{"model-a", " "}, "prompt": "hi"}), "compare needs 2 to 4 model names", "use chat")
}

func TestListModelsTool_MarksTheDefaultAndWarnsWhenItIsMissing(t *testing.T) {
	g := newFakeGateway(t)
	cs := connectInMemory(t, Config{BaseURL: g.URL + "/v1/", APIKey: g.key, Model: "model-a"})
	res := callTool(t, cs, "list_models", nil)
	mustContain(t, resultText(res), "3 model(s) at "+g.URL+"/v1:", "- model-a (owned by llmgate, context 8192 tokens, default)")

	cs = connectInMemory(t, Config{BaseURL: g.URL, APIKey: g.key, Model: "gpt-4o"})
	res = callTool(t, cs, "list_models", nil)
	var out ListModelsOutput
	structured(t, res, &out)
	if out.DefaultModel != "gpt-4o" || len(out.Models) != 3 {
		t.Errorf("output %+v", out)
	}
	mustContain(t, resultText(res), `the default model "gpt-4o" is not in this list`)
}

func TestNew_RefusesABaseURLThatCannotWork(t *testing.T) {
	if _, err := New(Config{BaseURL: "ftp://gateway"}, "test", nil, nil); err == nil {
		t.Fatal("ftp:// accepted")
	}
}

func TestChatTool_SendsProgressWhileTheAnswerStreams(t *testing.T) {
	g := newFakeGateway(t)
	s, err := newServer(Config{BaseURL: g.URL, APIKey: g.key, Model: "model-a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.progressEvery = 0 // every chunk, so the test needs no long answer
	srv, err := s.build("test", nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	notified := make(chan struct{}, 1024)
	cs := connectServer(t, srv, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, r.Params)
		mu.Unlock()
		notified <- struct{}{}
	}})
	params := &mcp.CallToolParams{Name: "chat", Arguments: map[string]any{"prompt": "one two three"}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("chat: %v %s", err, resultText(res))
	}
	want := len(strings.Fields(answerFor("model-a", "one two three")))
	// Notifications are asynchronous; the last may trail the result.
	timeout := time.After(5 * time.Second)
wait:
	for range want {
		select {
		case <-notified:
		case <-timeout:
			break wait // the count below says how many came
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != want {
		t.Fatalf("%d progress notifications, want one per chunk (%d)", len(got), want)
	}
	for i, p := range got {
		if p.ProgressToken != "tok-1" || p.Progress != float64(i+1) {
			t.Errorf("notification %d = %+v", i, p)
		}
	}
	mustContain(t, got[want-1].Message, fmt.Sprintf("model-a: %d tokens so far", want))
}

func TestChatTool_ClientCancellationCancelsTheUpstreamRequest(t *testing.T) {
	g := newFakeGateway(t)
	cs := connectInMemory(t, Config{BaseURL: g.URL, APIKey: g.key})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "chat", Arguments: map[string]any{"model": "slow", "prompt": "hi"}})
		done <- err
	}()
	// Wait until the request reached the upstream, then cancel it.
	select {
	case <-g.arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the chat request never reached the upstream")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call returned no error")
	}
	select {
	case <-g.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was still running 5s after the client cancelled (the fake answers after 10s)")
	}
}

func TestGuard_TurnsAPanicIntoAToolError(t *testing.T) {
	s, err := newServer(Config{BaseURL: "http://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := guard(s, "chat", func(context.Context, *mcp.CallToolRequest, ChatInput) (*mcp.CallToolResult, Answer, error) {
		var m map[string]int
		m["boom"]++ // a nil-map write panics
		return nil, Answer{}, nil
	})
	res, _, err := h(context.Background(), nil, ChatInput{})
	if res != nil || err == nil {
		t.Fatalf("result %v, error %v; want a tool error", res, err)
	}
	mustContain(t, err.Error(), "internal error in llmgate mcp while running chat", "stderr")
}
