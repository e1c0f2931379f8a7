package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"llmgate/internal/testenv"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The end-to-end tests build the real llmgate binary once and
// drive "llmgate mcp" as a child process over stdio with the Go SDK's
// client, exactly as Cline or another MCP client would start it.

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveSharedLLMGate()
	os.Exit(code)
}

// llmgateBinary returns the llmgate binary the test packages share
// (testenv.SharedLLMGate: linked once, kept in the go command's cache).
func llmgateBinary(t *testing.T) string {
	t.Helper()
	return testenv.SharedLLMGate(t)
}

// mcpProcess is a running "llmgate mcp" with its client session.
type mcpProcess struct {
	*mcp.ClientSession
	stderr   *testenv.SyncBuffer
	stopOnce sync.Once
	exitErr  error
}

// stop closes stdin, waits for the process to exit (which also finishes
// copying its stderr) and returns the stderr text.
func (p *mcpProcess) stop(t *testing.T) string {
	t.Helper()
	p.stopOnce.Do(func() { p.exitErr = p.Close() })
	if p.exitErr != nil {
		t.Errorf("llmgate mcp did not exit cleanly when its client closed: %v\nstderr:\n%s", p.exitErr, p.stderr)
	}
	return p.stderr.String()
}

// startMCP starts "llmgate mcp <args>" with only the given LLMGATE_*
// variables (the test's own environment must not leak a key or URL in) and
// connects the SDK client to it over stdin/stdout.
func startMCP(t *testing.T, env []string, args ...string) *mcpProcess {
	t.Helper()
	cmd := exec.Command(llmgateBinary(t), append([]string{"mcp"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LLMGATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	stderr := &testenv.SyncBuffer{}
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "llmgate-e2e", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to llmgate mcp: %v\nstderr:\n%s", err, stderr)
	}
	p := &mcpProcess{ClientSession: cs, stderr: stderr}
	t.Cleanup(func() { p.stop(t) })
	return p
}

func TestE2E_LLMGateMCPServesModelsOverStdio(t *testing.T) {
	g := newFakeGateway(t)
	g.barrier = newBarrier("model-b", "model-c") // compare must send both at once
	// The base URL is given without /v1, as people often paste it.
	proc := startMCP(t, []string{"LLMGATE_BASE_URL=" + g.URL, "LLMGATE_API_KEY=" + g.key, "LLMGATE_MODEL=model-a"})
	cs := proc.ClientSession

	// initialize
	init := cs.InitializeResult()
	if init.ServerInfo.Name != "llmgate" || init.Capabilities.Tools == nil {
		t.Fatalf("initialize result: %+v", init)
	}
	mustContain(t, init.Instructions, g.URL+"/v1")

	// list tools
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]map[string]any{}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 40 || tool.OutputSchema == nil {
			t.Errorf("tool %s: description %q, output schema %v", tool.Name, tool.Description, tool.OutputSchema)
		}
		b, _ := json.Marshal(tool.InputSchema)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		schemas[tool.Name] = m
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"chat", "compare", "list_models"}) {
		t.Fatalf("tools = %v", names)
	}
	if req := fmt.Sprint(schemas["chat"]["required"]); req != "[prompt]" {
		t.Errorf("chat requires %s; with LLMGATE_MODEL set only the prompt is required", req)
	}
	models := schemas["compare"]["properties"].(map[string]any)["models"].(map[string]any)
	if models["minItems"] != 2.0 || models["maxItems"] != 4.0 {
		t.Errorf("compare models schema %v, want 2..4 items", models)
	}

	// list_models
	res := callTool(t, cs, "list_models", nil)
	if res.IsError {
		t.Fatal(resultText(res))
	}
	var lm ListModelsOutput
	structured(t, res, &lm)
	var ids []string
	for _, m := range lm.Models {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, g.models) || lm.BaseURL != g.URL+"/v1" || lm.DefaultModel != "model-a" {
		t.Errorf("list_models = %+v", lm)
	}

	// chat, with the default model
	prompt := "what is two plus two"
	res = callTool(t, cs, "chat", map[string]any{"prompt": prompt, "system": "answer briefly", "max_tokens": 64, "temperature": 0})
	if res.IsError {
		t.Fatal(resultText(res))
	}
	var a Answer
	structured(t, res, &a)
	wantAnswer := answerFor("model-a", prompt)
	if a.Model != "model-a" || a.Answer != wantAnswer || a.FinishReason != "stop" {
		t.Errorf("chat answer %+v", a)
	}
	if a.PromptTokens != 7 || a.CompletionTokens != len(strings.Fields(wantAnswer)) || a.TokensEstimated {
		t.Errorf("tokens %d + %d (estimated %v), want the gateway's usage 7 + %d", a.PromptTokens, a.CompletionTokens, a.TokensEstimated, len(strings.Fields(wantAnswer)))
	}
	if a.TTFTms == nil || *a.TTFTms <= 0 || *a.TTFTms > a.LatencyMs || a.TokensPerSecond <= 0 {
		t.Errorf("figures: ttft %v ms, latency %v ms, %v tokens/s", a.TTFTms, a.LatencyMs, a.TokensPerSecond)
	}
	mustContain(t, resultText(res), wantAnswer, "model model-a", fmt.Sprintf("tokens: 7 prompt + %d completion", len(strings.Fields(wantAnswer))), "TTFT ", "tokens/s")
	last := g.chatRequests()[len(g.chatRequests())-1]
	if !last.Stream || last.StreamOptions == nil || !last.StreamOptions.IncludeUsage || last.Temperature == nil || *last.Temperature != 0 {
		t.Errorf("upstream request did not stream with usage and temperature 0: %+v", last)
	}

	// compare: two models at once (the barrier proves concurrency)
	res = callTool(t, cs, "compare", map[string]any{"models": []string{"model-b", "model-c"}, "prompt": "hello"})
	if res.IsError {
		t.Fatal(resultText(res))
	}
	var cmp CompareOutput
	structured(t, res, &cmp)
	if len(cmp.Results) != 2 || cmp.Results[0].Answer != answerFor("model-b", "hello") || cmp.Results[1].Answer != answerFor("model-c", "hello") {
		t.Errorf("compare results %+v", cmp.Results)
	}
	for _, r := range cmp.Results {
		if r.TTFTms == nil || r.CompletionTokens != 3 || r.PromptTokens != 1 {
			t.Errorf("compare figures for %s: %+v", r.Model, r)
		}
	}
	mustContain(t, resultText(res), "| model | prompt tokens |", "| model-b | 1 | 3 |", "| model-c | 1 | 3 |", "## model-b", "## model-c")

	// an unknown model is a tool error carrying the endpoint's message
	res = callTool(t, cs, "chat", map[string]any{"model": "gpt-9", "prompt": "hi"})
	wantToolError(t, res, `model "gpt-9" is not served at `+g.URL+"/v1", `the model "gpt-9" does not exist`, "list_models")

	for _, auth := range g.authHeaders() {
		if auth != "Bearer "+g.key {
			t.Errorf("upstream saw Authorization %q", auth)
		}
	}
	logs := proc.stop(t)
	mustContain(t, logs, "llmgate mcp: serving tools over stdio", "tool=chat", "tool call failed")
	if strings.Contains(logs, g.key) {
		t.Errorf("the API key leaked into the log:\n%s", logs)
	}
}

func TestE2E_BadKeyIsAToolErrorAndTheServerStaysUp(t *testing.T) {
	g := newFakeGateway(t)
	// Flags win over the environment: the env points at a closed port.
	proc := startMCP(t, []string{"LLMGATE_BASE_URL=http://127.0.0.1:1", "LLMGATE_API_KEY=sk-lg-from-env"},
		"--base-url", g.URL+"/v1/", "--api-key", "sk-lg-revoked", "--model", "model-a")
	cs := proc.ClientSession

	res := callTool(t, cs, "chat", map[string]any{"prompt": "hi"})
	wantToolError(t, res, "the API key was rejected (401: invalid API key: the key is unknown or revoked): set LLMGATE_API_KEY (or --api-key) to a key the gateway issued")

	// The server is still serving after the failure.
	res = callTool(t, cs, "list_models", nil)
	wantToolError(t, res, "the API key was rejected (401")
	res = callTool(t, cs, "compare", map[string]any{"models": []string{"model-a", "model-b"}, "prompt": "hi"})
	wantToolError(t, res, "every model failed", "model-b: the API key was rejected")

	if strings.Contains(proc.stop(t), "sk-lg-revoked") {
		t.Errorf("the API key leaked into the log")
	}
}

func TestE2E_TimeoutAndUnreachableEndpointAreToolErrors(t *testing.T) {
	g := newFakeGateway(t)
	cs := startMCP(t, []string{"LLMGATE_BASE_URL=" + g.URL, "LLMGATE_API_KEY=" + g.key, "LLMGATE_TIMEOUT=400ms"}).ClientSession
	start := time.Now()
	res := callTool(t, cs, "chat", map[string]any{"model": "slow", "prompt": "hi"})
	wantToolError(t, res, `no complete answer from model "slow"`, "within 400ms", "raise --timeout or LLMGATE_TIMEOUT")
	if time.Since(start) > 9*time.Second {
		t.Errorf("the time-out took %v; the fake answers only after 10s, so LLMGATE_TIMEOUT was not applied", time.Since(start))
	}

	g.Close() // the endpoint goes away while the MCP server runs
	res = callTool(t, cs, "list_models", nil)
	wantToolError(t, res, "could not connect to "+g.URL+"/v1", "LLMGATE_BASE_URL")
}

func TestE2E_InvalidBaseURLStopsWithAClearMessage(t *testing.T) {
	cmd := exec.Command(llmgateBinary(t), "mcp", "--base-url", "ftp://gateway")
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("llmgate mcp accepted ftp://: %s", out)
	}
	mustContain(t, string(out), "must start with http:// or https://")
}
