package doctor

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"llmgate/internal/connect"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestClients_ConfigsWrittenByConnectMatch proves the two halves agree: what
// llmgate connect writes, llmgate doctor reads back as matching.
func TestClients_ConfigsWrittenByConnectMatch(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.LookupEnv = envMap("LLMGATE_API_KEY", f.key)
	for _, target := range []connect.Target{connect.ClaudeCode, connect.Codex, connect.Cline, connect.ClineMCP, connect.OpenCode} {
		_, err := connect.Apply(target, connect.Options{BaseURL: srv.URL, APIKey: f.key, Model: f.models[0],
			HomeDir: o.HomeDir, GOOS: "linux", LookupEnv: func(string) (string, bool) { return "", false }})
		if err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, o)
	for _, id := range []string{"clients.claude-code", "clients.codex", "clients.cline", "clients.cline-mcp", "clients.opencode"} {
		expect(t, r, id, StatusPass, "matches the endpoint and key", "")
	}
	if !r.OK || r.Warnings != 0 {
		t.Errorf("ok=%v warnings=%d", r.OK, r.Warnings)
	}
}

func TestClients_MismatchesAreReportedWithFingerprints(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := baseOpts(t, srv.URL, f)
	o.LookupEnv = envMap("OTHER_KEY", "sk-other-0000000000009999")
	home := o.HomeDir
	writeFile(t, filepath.Join(home, ".claude", "settings.json"), `{"env": {
		"ANTHROPIC_BASE_URL": "`+srv.URL+`/v1",
		"ANTHROPIC_AUTH_TOKEN": "sk-lg-another-key-00001111",
		"ANTHROPIC_API_KEY": "sk-ant-api03-zzzzzzzzzzzz2222",
		"ANTHROPIC_MODEL": "qwen2.5-7b-instruc"}}`)
	writeFile(t, filepath.Join(home, ".codex", "config.toml"), `model_provider = "gw"
[model_providers.gw]
base_url = "http://127.0.0.1:9/v1"
env_key = "MISSING_KEY"
wire_api = "chat"
`)
	writeFile(t, filepath.Join(o.WorkDir, ".claude", "settings.json"), `{"env": {"ANTHROPIC_BASE_URL": "`+srv.URL+`",}}`)
	r := run(t, o)

	cc := expect(t, r, "clients.claude-code", StatusFail, "ANTHROPIC_BASE_URL ends in /v1", "Set ANTHROPIC_BASE_URL to "+srv.URL)
	for _, want := range []string{"sets both ANTHROPIC_AUTH_TOKEN and ANTHROPIC_API_KEY", "key sk-lg-…1111 (ANTHROPIC_AUTH_TOKEN) differs from sk-lg-…cdef", "ANTHROPIC_MODEL qwen2.5-7b-instruc is not served"} {
		if !strings.Contains(cc.Detail, want) {
			t.Errorf("claude-code detail lacks %q: %s", want, cc.Detail)
		}
	}
	if strings.Contains(cc.Detail, "sk-lg-another-key-00001111") {
		t.Error("full key printed")
	}
	cx := expect(t, r, "clients.codex", StatusFail, "$MISSING_KEY is not set", "Export MISSING_KEY")
	for _, want := range []string{`wire_api = "chat"`, "points at http://127.0.0.1:9/v1"} {
		if !strings.Contains(cx.Detail, want) {
			t.Errorf("codex detail lacks %q: %s", want, cx.Detail)
		}
	}
	expect(t, r, "clients.claude-code-project", StatusFail, "cannot parse: line 1", "Fix the JSON syntax")
}

func TestClients_NoFilesIsSkipped(t *testing.T) {
	f := newFake()
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := run(t, baseOpts(t, srv.URL, f))
	expect(t, r, "clients", StatusSkip, "no Claude Code, Codex, Cline or opencode configuration", "")
}
