package connect

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gatewayModels is a /v1/models body as a gateway in front of vLLM and a
// cloud model might answer it: a vLLM max_model_len, a context_window with
// an output cap, and a model that says nothing about its size.
const gatewayModels = `{"object":"list","data":[
	{"id":"qwen2.5-7b-instruct","object":"model","owned_by":"vllm","max_model_len":32768},
	{"id":"deepseek-chat","object":"model","owned_by":"deepseek","context_window":131072,"max_output_tokens":8192},
	{"id":"mystery","object":"model","owned_by":"x"}]}`

// fakeGateway serves gatewayModels to the test key only.
func fakeGateway(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"invalid API key"}}`))
			return
		}
		_, _ = w.Write([]byte(gatewayModels))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// limitOpts reads the model list from a fake gateway, as the command does.
func limitOpts(t *testing.T) Options {
	t.Helper()
	srv := fakeGateway(t)
	o := testOpts(t)
	o.BaseURL = srv.URL
	cat, err := FetchModels(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// The goldens must not depend on the test server's port.
	cat.URL = "http://127.0.0.1:4000/v1/models"
	o.BaseURL, o.Models = "http://127.0.0.1:4000", cat
	return o
}

func TestFetchModels_ReadsContextLengthsFromEachField(t *testing.T) {
	o := limitOpts(t)
	want := map[string]ModelInfo{
		"qwen2.5-7b-instruct": {ID: "qwen2.5-7b-instruct", ContextLength: 32768, ContextSource: "max_model_len"},
		"deepseek-chat":       {ID: "deepseek-chat", ContextLength: 131072, ContextSource: "context_window", MaxOutput: 8192},
		"mystery":             {ID: "mystery"},
	}
	if len(o.Models.Models) != len(want) {
		t.Fatalf("models %+v", o.Models.Models)
	}
	for _, m := range o.Models.Models {
		if m != want[m.ID] {
			t.Errorf("%s: %+v, want %+v", m.ID, m, want[m.ID])
		}
	}
	// A wrong key, a server that is not a gateway, nothing listening.
	srv := fakeGateway(t)
	bad := testOpts(t)
	bad.BaseURL, bad.APIKey = srv.URL+"/v1", "sk-wrong"
	if _, err := FetchModels(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong key: %v", err)
	}
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("<html>")) }))
	defer html.Close()
	bad.BaseURL, bad.APIKey = html.URL, testKey
	if _, err := FetchModels(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "not a model list") {
		t.Errorf("html: %v", err)
	}
	// Numbers may come as strings; non-integers and negatives are ignored.
	for raw, n := range map[string]int{`32768`: 32768, `"8192"`: 8192, `1.5`: 0, `-4`: 0, `null`: 0, `"x"`: 0} {
		if got := positiveInt(json.RawMessage(raw)); got != n {
			t.Errorf("positiveInt(%s) = %d, want %d", raw, got, n)
		}
	}
}

func TestOutputLimit_LeavesThreeQuartersOfTheContextForInput(t *testing.T) {
	for _, c := range []struct {
		m    ModelInfo
		want int
	}{
		{ModelInfo{ContextLength: 32768}, 8192},
		{ModelInfo{ContextLength: 8192}, 2048},
		{ModelInfo{ContextLength: 131072}, 32000},
		{ModelInfo{ContextLength: 131072, MaxOutput: 8192}, 8192},
		{ModelInfo{ContextLength: 32768, MaxOutput: 65536}, 8192},
		{ModelInfo{ContextLength: 2}, 1},
		{ModelInfo{}, 0},
	} {
		if got := OutputLimit(c.m); got != c.want {
			t.Errorf("OutputLimit(%+v) = %d, want %d", c.m, got, c.want)
		}
	}
}

// TestPlan_WritesLimitsFromTheGatewaysContextLengths checks the files and
// the assumptions printed for them against goldens.
func TestPlan_WritesLimitsFromTheGatewaysContextLengths(t *testing.T) {
	for _, ft := range fileTargets {
		t.Run(string(ft.target), func(t *testing.T) {
			o := limitOpts(t)
			o.Executable = func() (string, error) { return "/usr/local/bin/llmgate", nil }
			o.Command = ""
			c, err := Plan(ft.target, o)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, string(ft.target)+"/limits.golden."+ft.ext, c.After)
			golden(t, string(ft.target)+"/limits.assumed.txt", []byte(strings.Join(c.Assumed, "\n")+"\n"))
		})
	}
}

func TestPlan_KeepsAnOutputLimitThatLeavesRoomForInput(t *testing.T) {
	o := limitOpts(t)
	path, _ := DefaultPath(OpenCode, o)
	_ = os.MkdirAll(filepath.Dir(path), 0o700)
	_ = os.WriteFile(path, []byte(`{"provider":{"llmgate":{"models":{
		"qwen2.5-7b-instruct":{"name":"Qwen 7B","limit":{"context":999,"output":4096}},
		"deepseek-chat":{"limit":{"output":100000}}}}}}`), 0o600)
	c, err := Plan(OpenCode, o)
	if err != nil {
		t.Fatal(err)
	}
	doc := decodeJSON(t, c.After)
	for path, want := range map[string]any{
		"provider/llmgate/models/qwen2.5-7b-instruct/name":          "Qwen 7B",
		"provider/llmgate/models/qwen2.5-7b-instruct/limit/context": float64(32768),
		"provider/llmgate/models/qwen2.5-7b-instruct/limit/output":  float64(4096),
		"provider/llmgate/models/deepseek-chat/limit/output":        float64(8192),
		"provider/llmgate/models/deepseek-chat/limit/context":       float64(131072),
		"provider/llmgate/models/mystery/name":                      "mystery",
	} {
		if got := dig(doc, strings.Split(path, "/")...); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if dig(doc, "provider", "llmgate", "models", "mystery", "limit") != nil {
		t.Error("a model of unknown size got a limit")
	}
	if !strings.Contains(strings.Join(c.Assumed, "\n"), "limit.output of qwen2.5-7b-instruct: 4096 (kept from the file)") {
		t.Errorf("assumptions %q", c.Assumed)
	}
	// Applying twice changes nothing the second time.
	if _, err := Apply(OpenCode, o); err != nil {
		t.Fatal(err)
	}
	if again, err := Apply(OpenCode, o); err != nil || again.Changed {
		t.Errorf("second apply changed=%v err=%v", again != nil && again.Changed, err)
	}
}

func TestPlan_ContextLengthFlagAndUnreadableGatewayAreReported(t *testing.T) {
	o := testOpts(t)
	o.ModelsErr = context.DeadlineExceeded
	c, err := Plan(OpenCode, o)
	if err != nil {
		t.Fatal(err)
	}
	if a := strings.Join(c.Assumed, "\n"); !strings.Contains(a, "could not be read (context deadline exceeded)") || !strings.Contains(a, "--context-length") {
		t.Errorf("assumptions %q", a)
	}
	if strings.Contains(string(c.After), `"limit"`) {
		t.Error("limits written without a context length")
	}
	o.ContextLength = 16384
	for _, target := range []Target{OpenCode, ClaudeCode, Codex} {
		c, err = Plan(target, o)
		if err != nil {
			t.Fatal(err)
		}
		a := strings.Join(c.Assumed, "\n")
		if !strings.Contains(a, "16384 tokens (--context-length)") {
			t.Errorf("%s assumptions %q", target, a)
		}
		for _, want := range map[Target][]string{
			OpenCode:   {`"context": 16384`, `"output": 4096`},
			ClaudeCode: {`"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096"`, `"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "16384"`},
			Codex:      {"model_context_window = 16384"},
		}[target] {
			if !strings.Contains(string(c.After), want) {
				t.Errorf("%s lacks %s:\n%s", target, want, c.After)
			}
		}
	}
}

func TestPlan_ClineMCPCommandIsAnAbsolutePathWhenOneIsKnown(t *testing.T) {
	tmpBuild := filepath.Join(os.TempDir(), "go-build1234", "b001", "exe", "llmgate")
	for _, c := range []struct {
		name       string
		command    string
		exe        string
		onPath     string
		want, says string
	}{
		{"installed", "", "/opt/llmgate/bin/llmgate", "", "/opt/llmgate/bin/llmgate", "this llmgate executable"},
		{"go run, on PATH", "", tmpBuild, "/home/me/go/bin/llmgate", "/home/me/go/bin/llmgate", "temporary \"go run\" build"},
		{"go run, not on PATH", "", tmpBuild, "", "llmgate", "install it"},
		{"given", "/srv/llmgate", tmpBuild, "", "/srv/llmgate", "(given)"},
		{"given relative", "llmgate", "/opt/llmgate", "", "llmgate", "not an absolute path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := testOpts(t)
			o.Command = c.command
			o.Executable = func() (string, error) { return c.exe, nil }
			o.LookPath = func(string) (string, error) {
				if c.onPath == "" {
					return "", os.ErrNotExist
				}
				return c.onPath, nil
			}
			ch, err := Plan(ClineMCP, o)
			if err != nil {
				t.Fatal(err)
			}
			if got := dig(decodeJSON(t, ch.After), "mcpServers", "llmgate", "command"); got != c.want {
				t.Errorf("command %v, want %s", got, c.want)
			}
			if a := strings.Join(ch.Assumed, "\n"); !strings.Contains(a, c.says) {
				t.Errorf("assumptions %q lack %q", a, c.says)
			}
		})
	}
}

// Without --model, a gateway that serves one model leaves no choice; with
// several, Claude Code (which asks for claude-… names) is told that its
// requests would get 404, with the names to pick from.
func TestPlan_ModelWhenNoneIsGiven(t *testing.T) {
	one := &Catalog{URL: "http://127.0.0.1:4000/v1/models", Models: []ModelInfo{{ID: "qwen3-8b", ContextLength: 32768, ContextSource: "max_model_len"}}}
	two := &Catalog{URL: one.URL, Models: []ModelInfo{{ID: "qwen3-8b"}, {ID: "llama-3.1-8b"}}}
	withClaude := &Catalog{URL: one.URL, Models: []ModelInfo{{ID: "qwen3-8b"}, {ID: "claude-sonnet-4-5"}}}
	for _, tc := range []struct {
		name      string
		cat       *Catalog
		wantModel string // ANTHROPIC_MODEL written, "" for none
		wantNote  string // a note that must be there, "" for no 404 note
	}{
		{"one model", one, "qwen3-8b", ""},
		{"two models", two, "", "404 model_not_found unless it serves them; rerun with --model (the gateway lists: qwen3-8b, llama-3.1-8b)"},
		{"claude served", withClaude, "", ""},
		{"list not read", nil, "", "404 model_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOpts(t)
			o.Model, o.Models = "", tc.cat
			c, err := Plan(ClaudeCode, o)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := dig(decodeJSON(t, c.After), "env", "ANTHROPIC_MODEL").(string)
			if got != tc.wantModel {
				t.Errorf("ANTHROPIC_MODEL = %q, want %q", got, tc.wantModel)
			}
			notes := strings.Join(c.Notes, "\n")
			if tc.wantNote == "" && strings.Contains(notes, "404") || tc.wantNote != "" && !strings.Contains(notes, tc.wantNote) {
				t.Errorf("notes:\n%s\nwant one with %q", notes, tc.wantNote)
			}
			if tc.wantModel != "" {
				assumed := strings.Join(c.Assumed, "\n")
				if !strings.Contains(assumed, "model qwen3-8b: the only model http://127.0.0.1:4000/v1/models lists") ||
					!strings.Contains(assumed, "context length of qwen3-8b: 32768 tokens") {
					t.Errorf("assumed:\n%s", assumed)
				}
			}
		})
	}
}
