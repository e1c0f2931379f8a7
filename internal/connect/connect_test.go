package connect

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const testKey = "sk-lg-test-0123456789abcdef"

// testOpts isolates a test from the machine: its own home, no environment.
func testOpts(t *testing.T) Options {
	t.Helper()
	return Options{
		BaseURL:   "http://127.0.0.1:4000",
		APIKey:    testKey,
		Model:     "qwen2.5-7b-instruct",
		HomeDir:   t.TempDir(),
		LookupEnv: func(string) (string, bool) { return "", false },
		GOOS:      "linux",
		Command:   "llmgate",
		Now:       func() time.Time { return time.Date(2026, 11, 30, 3, 4, 5, 0, time.UTC) },
	}
}

var fileTargets = []struct {
	target Target
	ext    string
}{{ClaudeCode, "json"}, {Codex, "toml"}, {Cline, "json"}, {ClineMCP, "json"}, {OpenCode, "json"}}

// install copies testdata/<target>/existing.<ext> to where the target writes.
func install(t *testing.T, target Target, ext string, o Options) string {
	t.Helper()
	path, err := DefaultPath(target, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", string(target), "existing."+ext))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden:\n--- got ---\n%s\n--- want ---\n%s", name, got, want)
	}
}

func TestPlan_MatchesGoldenFiles(t *testing.T) {
	for _, ft := range fileTargets {
		t.Run(string(ft.target)+"/fresh", func(t *testing.T) {
			c, err := Plan(ft.target, testOpts(t))
			if err != nil {
				t.Fatal(err)
			}
			if !c.Changed || c.Before != nil {
				t.Errorf("fresh plan: changed=%v before=%q", c.Changed, c.Before)
			}
			golden(t, string(ft.target)+"/fresh.golden."+ft.ext, c.After)
		})
		t.Run(string(ft.target)+"/merged", func(t *testing.T) {
			o := testOpts(t)
			install(t, ft.target, ft.ext, o)
			c, err := Plan(ft.target, o)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, string(ft.target)+"/merged.golden."+ft.ext, c.After)
		})
	}
}

func TestExports_MatchGolden(t *testing.T) {
	got, err := Exports(testOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "env/exports.golden.sh", []byte(got))
	o := testOpts(t)
	o.APIKey, o.Model, o.BaseURL = "", "", "https://gw.example.com/v1/"
	got, err = Exports(o)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "env/nokey.golden.sh", []byte(got))
}

func TestPlan_DoesNotWrite(t *testing.T) {
	o := testOpts(t)
	c, err := Plan(ClaudeCode, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Path); !os.IsNotExist(err) {
		t.Errorf("Plan created %s", c.Path)
	}
}

func backups(t *testing.T, path string) []string {
	t.Helper()
	m, err := filepath.Glob(path + ".bak-*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestApply_TwiceIsIdempotentWithOneBackup(t *testing.T) {
	for _, ft := range fileTargets {
		t.Run(string(ft.target), func(t *testing.T) {
			o := testOpts(t)
			path := install(t, ft.target, ft.ext, o)
			original, _ := os.ReadFile(path)
			first, err := Apply(ft.target, o)
			if err != nil {
				t.Fatal(err)
			}
			if !first.Changed || first.Backup == "" {
				t.Fatalf("first run: changed=%v backup=%q", first.Changed, first.Backup)
			}
			if !strings.HasSuffix(first.Backup, ".bak-20261130T030405Z") {
				t.Errorf("backup name %s", first.Backup)
			}
			if b, _ := os.ReadFile(first.Backup); !bytes.Equal(b, original) {
				t.Error("backup does not hold the original file")
			}
			written, _ := os.ReadFile(path)
			if !bytes.Equal(written, first.After) {
				t.Error("file differs from the planned content")
			}
			// A later second, so a second backup would get another name.
			o.Now = func() time.Time { return time.Date(2026, 11, 30, 3, 9, 0, 0, time.UTC) }
			second, err := Apply(ft.target, o)
			if err != nil {
				t.Fatal(err)
			}
			if second.Changed || second.Backup != "" {
				t.Errorf("second run: changed=%v backup=%q", second.Changed, second.Backup)
			}
			if again, _ := os.ReadFile(path); !bytes.Equal(again, written) {
				t.Error("second run changed the file")
			}
			if n := len(backups(t, path)); n != 1 {
				t.Errorf("%d backups, want 1", n)
			}
		})
	}
}

func TestApply_NewFileIsPrivateAndHasNoBackup(t *testing.T) {
	o := testOpts(t)
	c, err := Apply(Cline, o)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600 for a file holding a key", st.Mode().Perm())
	}
	if c.Backup != "" || len(backups(t, c.Path)) != 0 {
		t.Error("backup made for a file that did not exist")
	}
	if c.Path != filepath.Join(o.HomeDir, ".cline", "data", "settings", "providers.json") {
		t.Errorf("path %s", c.Path)
	}
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, b)
	}
	return m
}

func dig(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func TestApply_KeepsUnrelatedSettings(t *testing.T) {
	plan := func(target Target, ext string) []byte {
		o := testOpts(t)
		install(t, target, ext, o)
		c, err := Apply(target, o)
		if err != nil {
			t.Fatal(err)
		}
		return c.After
	}
	cc := decodeJSON(t, plan(ClaudeCode, "json"))
	for path, want := range map[string]any{
		"env/DISABLE_TELEMETRY": "1", "model": "sonnet", "statusLine/command": "~/.claude/statusline.sh",
		"env/ANTHROPIC_BASE_URL": "http://127.0.0.1:4000", "env/ANTHROPIC_AUTH_TOKEN": testKey,
	} {
		if got := dig(cc, strings.Split(path, "/")...); got != want {
			t.Errorf("claude-code %s = %v, want %v", path, got, want)
		}
	}
	if dig(cc, "permissions", "allow") == nil {
		t.Error("claude-code lost permissions.allow")
	}

	raw := plan(Codex, "toml")
	var cx map[string]any
	if err := toml.Unmarshal(raw, &cx); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]any{
		"approval_policy": "on-request", "sandbox_mode": "workspace-write", "model_providers/ollama/base_url": "http://localhost:11434/v1",
		"mcp_servers/docs/command": "npx", "tui/notifications": true, "model_provider": "llmgate", "model": "qwen2.5-7b-instruct",
		"model_providers/llmgate/base_url": "http://127.0.0.1:4000/v1", "model_providers/llmgate/wire_api": "responses",
		"model_providers/llmgate/env_key": "LLMGATE_API_KEY",
	} {
		if got := dig(cx, strings.Split(path, "/")...); got != want {
			t.Errorf("codex %s = %v, want %v", path, got, want)
		}
	}
	for _, comment := range []string{"# Codex configuration (hand-written)", "# sandbox settings"} {
		if !strings.Contains(string(raw), comment) {
			t.Errorf("codex lost comment %q", comment)
		}
	}
	if strings.Contains(string(raw), testKey) {
		t.Error("codex config.toml holds the key; it must reference env_key")
	}

	// The Cline CLI: the provider set, made the one in use; the other
	// provider and the provider's own extra settings kept.
	cp := decodeJSON(t, plan(Cline, "json"))
	for path, want := range map[string]any{
		"version": float64(1), "lastUsedProvider": "openai-compatible",
		"providers/anthropic/settings/apiKey": "sk-ant-kept", "providers/anthropic/updatedAt": "2026-11-01T10:00:00.000Z",
		"providers/openai-compatible/settings/provider":       "openai-compatible",
		"providers/openai-compatible/settings/baseUrl":        "http://127.0.0.1:4000/v1",
		"providers/openai-compatible/settings/apiKey":         testKey,
		"providers/openai-compatible/settings/model":          "qwen2.5-7b-instruct",
		"providers/openai-compatible/settings/headers/X-Team": "ml",
		"providers/openai-compatible/updatedAt":               "2026-11-30T03:04:05.000Z",
		"providers/openai-compatible/tokenSource":             "manual",
	} {
		if got := dig(cp, strings.Split(path, "/")...); got != want {
			t.Errorf("cline %s = %v, want %v", path, got, want)
		}
	}

	cl := decodeJSON(t, plan(ClineMCP, "json"))
	if dig(cl, "mcpServers", "github", "command") != "npx" {
		t.Error("cline lost the github server")
	}
	for path, want := range map[string]any{
		"command": "llmgate", "disabled": true, "timeout": float64(120), "env/LLMGATE_BASE_URL": "http://127.0.0.1:4000/v1",
		"env/LLMGATE_API_KEY": testKey, "env/LLMGATE_MODEL": "qwen2.5-7b-instruct",
	} {
		if got := dig(cl, append([]string{"mcpServers", "llmgate"}, strings.Split(path, "/")...)...); got != want {
			t.Errorf("cline llmgate.%s = %v, want %v", path, got, want)
		}
	}

	oc := decodeJSON(t, plan(OpenCode, "json"))
	for path, want := range map[string]any{
		"theme": "tokyonight", "provider/ollama/options/baseURL": "http://localhost:11434/v1",
		"provider/llmgate/name": "My gateway", "provider/llmgate/npm": "@ai-sdk/openai-compatible",
		"provider/llmgate/options/baseURL": "http://127.0.0.1:4000/v1", "provider/llmgate/options/apiKey": "{env:LLMGATE_API_KEY}",
		"provider/llmgate/models/llama-3.1-8b-instruct/name": "Llama 8B", "provider/llmgate/models/qwen2.5-7b-instruct/name": "qwen2.5-7b-instruct",
		"model": "llmgate/qwen2.5-7b-instruct",
	} {
		if got := dig(oc, strings.Split(path, "/")...); got != want {
			t.Errorf("opencode %s = %v, want %v", path, got, want)
		}
	}
}

func TestPlan_RefusesFilesItCannotParse(t *testing.T) {
	o := testOpts(t)
	path, _ := DefaultPath(ClaudeCode, o)
	_ = os.MkdirAll(filepath.Dir(path), 0o700)
	bad := []byte("{\n  // a comment\n  \"env\": {}\n}\n")
	_ = os.WriteFile(path, bad, 0o600)
	_, err := Apply(ClaudeCode, o)
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "not changed") {
		t.Errorf("error %v, want a line number and 'not changed'", err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, bad) {
		t.Error("unparsable file was modified")
	}

	cpath, _ := DefaultPath(Codex, o)
	_ = os.MkdirAll(filepath.Dir(cpath), 0o700)
	_ = os.WriteFile(cpath, []byte("model = \n"), 0o600)
	if _, err := Apply(Codex, o); err == nil {
		t.Error("invalid TOML accepted")
	}
}

func TestPlan_RefusesTOMLLayoutsItCannotEditSafely(t *testing.T) {
	o := testOpts(t)
	path, _ := DefaultPath(Codex, o)
	_ = os.MkdirAll(filepath.Dir(path), 0o700)
	// An inline table defines the provider; appending a [table] would be a
	// duplicate definition, so the edit must be refused, not written.
	src := "model_providers = { llmgate = { name = \"x\", base_url = \"http://old/v1\" } }\n"
	_ = os.WriteFile(path, []byte(src), 0o600)
	if _, err := Apply(Codex, o); err == nil || !strings.Contains(err.Error(), "by hand") {
		t.Errorf("error %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(path); string(b) != src {
		t.Error("file modified despite the refusal")
	}
}

func TestOptions_DefaultsFromEnvironment(t *testing.T) {
	o := testOpts(t)
	o.BaseURL, o.APIKey, o.Model = "", "", ""
	env := map[string]string{"LLMGATE_API_KEY": "sk-lg-from-env-000000000000", "LLMGATE_MODEL": "m1"}
	o.LookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	out, err := Exports(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"export OPENAI_BASE_URL=http://127.0.0.1:4000/v1\n", "export ANTHROPIC_BASE_URL=http://127.0.0.1:4000\n",
		"export ANTHROPIC_AUTH_TOKEN=sk-lg-from-env-000000000000\n", "export ANTHROPIC_MODEL=m1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("exports lack %q:\n%s", want, out)
		}
	}
}

func TestPaths_FollowToolConventions(t *testing.T) {
	o := testOpts(t)
	env := map[string]string{"CODEX_HOME": "/srv/codex", "XDG_CONFIG_HOME": "/srv/xdg"}
	o.LookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	o.GOOS = "windows"
	env["APPDATA"] = "/users/me/AppData/Roaming"
	if got, _ := DefaultPath(ClineMCP, o); got != filepath.FromSlash("/users/me/AppData/Roaming/Code/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json") {
		t.Errorf("windows cline-mcp path %s", got)
	}
	// The Cline CLI looks where its own code does, on every system.
	for _, c := range []struct{ env, value, want string }{
		{"", "", filepath.Join(o.HomeDir, ".cline/data/settings/providers.json")},
		{"CLINE_DIR", "/srv/cline", "/srv/cline/data/settings/providers.json"},
		{"CLINE_DATA_DIR", "/srv/cline-data", "/srv/cline-data/settings/providers.json"},
		{"CLINE_PROVIDER_SETTINGS_PATH", "/etc/cline/p.json", "/etc/cline/p.json"},
	} {
		if c.env != "" {
			env[c.env] = c.value
		}
		if got, _ := DefaultPath(Cline, o); got != filepath.FromSlash(c.want) {
			t.Errorf("cline with %s=%s: %s, want %s", c.env, c.value, got, c.want)
		}
	}
	o.GOOS = "darwin"
	for target, want := range map[Target]string{
		Codex:      "/srv/codex/config.toml",
		OpenCode:   "/srv/xdg/opencode/opencode.json",
		ClaudeCode: filepath.Join(o.HomeDir, ".claude/settings.json"),
		ClineMCP:   filepath.Join(o.HomeDir, "Library/Application Support/Code/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json"),
	} {
		if got, _ := DefaultPath(target, o); got != filepath.FromSlash(want) {
			t.Errorf("%s: %s, want %s", target, got, want)
		}
	}
}

func TestShellQuote_QuotesOnlyWhenNeeded(t *testing.T) {
	for in, want := range map[string]string{"sk-lg-abc": "sk-lg-abc", "a b": "'a b'", "it's": `'it'\''s'`, "$x": "'$x'", "": "''"} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestApply_ZeroOptionsUseDefaultsAndBackUp(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"LLMGATE_API_KEY": testKey}
	o := Options{HomeDir: home, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	path := install(t, Codex, "toml", o)
	c, err := Apply(Codex, o)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Changed || c.Backup == "" || len(backups(t, path)) != 1 {
		t.Errorf("changed=%v backup=%q", c.Changed, c.Backup)
	}
	if !strings.Contains(string(c.After), `base_url = "http://127.0.0.1:4000/v1"`) {
		t.Errorf("default base URL not written:\n%s", c.After)
	}
}
